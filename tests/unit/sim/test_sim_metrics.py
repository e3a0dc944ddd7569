"""Prometheus exposition: SGLang's names and labels, dcgm-exporter's GPU gauge."""

from __future__ import annotations

from sglang_sim.args import ServerArgs, parse, resolve
from sglang_sim.engine import Schedule
from sglang_sim.metrics import (
    Counter,
    Histogram,
    PodIdentity,
    SimMetrics,
    dcgm_family,
    gpu_dp_rank,
    labels_of,
    render,
    scheduler_labels,
)

WHO = PodIdentity(hostname="node-1", pod="m-0", namespace="ns", container="sglang", gpu_model="NVIDIA H200")


def args_of(*argv: str) -> ServerArgs:
    ns = parse(["--model", "org/m", *argv])
    return resolve(ns).args


def test_render_counter_and_histogram_like_prometheus_client() -> None:
    c = Counter("sglang:num_requests_total", "Number of requests processed.")
    c.inc(labels_of({"model_name": 'a"b'}), 2)
    h = Histogram("sglang:e2e_request_latency_seconds", "E2E.", (0.1, 1))
    h.observe(labels_of({"model_name": "m"}), 0.5)
    h.observe(labels_of({"model_name": "m"}), 0.05, times=2)
    text = render([c.family(), h.family()])
    assert "# TYPE sglang:num_requests_total counter\n" in text
    assert 'sglang:num_requests_total{model_name="a\\"b"} 2.0\n' in text
    assert 'sglang:e2e_request_latency_seconds_bucket{le="0.1",model_name="m"} 2.0\n' in text
    assert 'sglang:e2e_request_latency_seconds_bucket{le="1.0",model_name="m"} 3.0\n' in text
    assert 'sglang:e2e_request_latency_seconds_bucket{le="+Inf",model_name="m"} 3.0\n' in text
    assert 'sglang:e2e_request_latency_seconds_count{model_name="m"} 3.0\n' in text
    assert 'sglang:e2e_request_latency_seconds_sum{model_name="m"} 0.6\n' in text


def test_scheduler_labels_single_rank_has_no_dp_rank() -> None:
    labels = dict(scheduler_labels(args_of(), 0))
    assert labels == {
        "model_name": "org/m",
        "engine_type": "unified",
        "tp_rank": "0",
        "pp_rank": "0",
        "moe_ep_rank": "0",
    }


def test_scheduler_labels_attention_dp_ranks() -> None:
    a = args_of("--tp", "8", "--attn-dp-size", "4", "--ep", "8")
    got = [dict(scheduler_labels(a, r)) for r in range(4)]
    assert [(g["dp_rank"], g["tp_rank"], g["moe_ep_rank"]) for g in got] == [
        ("0", "0", "0"),
        ("1", "2", "2"),
        ("2", "4", "4"),
        ("3", "6", "6"),
    ]


def test_finished_request_feeds_counters_and_histograms() -> None:
    m = SimMetrics(args_of())
    s = Schedule("r", 0, 0.0, 0.2, 100, 32, 5, 0.5, 0.01)
    m.observe_finished(s, e2e=0.55, streaming=True)
    text = render(m.families([]))
    assert 'sglang:num_requests_total{engine_type="unified",is_streaming="true",model_name="org/m"} 1.0' in text
    assert 'sglang:prompt_tokens_total{engine_type="unified",model_name="org/m"} 100.0' in text
    assert 'sglang:generation_tokens_total{engine_type="unified",model_name="org/m"} 5.0' in text
    assert 'sglang:cached_tokens_total{cache_source="device",engine_type="unified",model_name="org/m"} 32.0' in text
    assert (
        'sglang:inter_token_latency_seconds_count{engine_type="unified",is_streaming="true",model_name="org/m"} 4.0'
        in text
    )
    assert (
        'sglang:time_to_first_token_seconds_sum{engine_type="unified",is_streaming="true",model_name="org/m"} 0.5'
        in text
    )
    assert "sglang:queue_time_seconds_sum{" in text


def test_gpu_to_dp_rank_layout() -> None:
    dp = args_of("--tp", "2", "--dp", "2")
    assert [gpu_dp_rank(dp, g) for g in range(4)] == [0, 0, 1, 1]
    dpa = args_of("--tp", "4", "--attn-dp-size", "2")
    assert [gpu_dp_rank(dpa, g) for g in range(4)] == [0, 0, 1, 1]
    worker = args_of("--tp", "8", "--attn-dp-size", "4", "--nnodes", "2", "--node-rank", "1", "--dist-init-addr", "a:1")
    assert [gpu_dp_rank(worker, g) for g in range(4)] == [2, 2, 3, 3]


def test_dcgm_one_series_per_gpu_of_this_pod() -> None:
    a = args_of("--tp", "4", "--dp", "2")
    fam = dcgm_family(a, WHO, [1.0, 0.25])
    assert [v for _, _, v in fam.samples] == [100.0] * 4 + [25.0] * 4
    labels = dict(fam.samples[0][1])
    assert labels["gpu"] == "0" and labels["modelName"] == "NVIDIA H200" and labels["Hostname"] == "node-1"
    assert (labels["pod"], labels["namespace"], labels["container"]) == ("m-0", "ns", "sglang")
    assert labels["UUID"].startswith("GPU-") and len({dict(s[1])["UUID"] for s in fam.samples}) == 8


def test_dcgm_without_pod_identity_has_no_k8s_labels() -> None:
    bare = PodIdentity(hostname="h", pod=None, namespace=None, container="sglang", gpu_model="NVIDIA H200")
    fam = dcgm_family(args_of(), bare, [0.0])
    assert "pod" not in dict(fam.samples[0][1])
