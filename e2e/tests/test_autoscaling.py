"""The autoscaler on the local cluster: real Prometheus scraping simulator pods, load replayed from a real trace.

Load through the router scales the fleet up within one interval plus the start-up delay (plus the scrape and burst
windows the signal needs to exist), and back down after the stabilisation window; with Prometheus stopped the count
holds and MetricsAvailable turns False; with Prometheus back it resumes.
"""

from __future__ import annotations

import csv
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import requests
from kubernetes import client

from localcluster import prometheus
from localcluster.cluster import ClusterInfo
from localcluster.fleet import Fleet, OperatorProcess, install_crd
from localcluster.paths import REPO_ROOT, as_layout
from localcluster.procs import wait_for

TRACE = REPO_ROOT.parent / "shared" / "traces" / "AzureLLMInferenceTrace_code.csv"
INTERVAL_S = 5
STARTUP_S = 2
SCRAPE_S = 5
BURST_S = 10
DOWN_WINDOW_S = 30


def autoscaled_deployment(prometheus_url: str, **autoscaling: Any) -> dict[str, Any]:
    """One replica of C = 4 with the autoscaler's windows compressed to seconds; `autoscaling` adds or overrides."""
    return {
        "apiVersion": "sglang.ai/v1alpha1", "kind": "SGLangDeployment", "metadata": {"name": "chat"},
        "spec": {
            "model": {"path": "meta-llama/Llama-3.1-8B-Instruct", "servedName": "llama"},
            "engine": {"maxRunningRequests": 4, "env": [
                {"name": "SGLANG_SIM_STARTUP_SECONDS", "value": str(STARTUP_S)},
                {"name": "SGLANG_SIM_DECODE_TOKENS_PER_S", "value": "32"}]},
            "replicas": 1,
            "autoscaling": {
                "enabled": True, "minReplicas": 1, "maxReplicas": 4, "prometheusURL": prometheus_url,
                "intervalSeconds": INTERVAL_S, "startupSeconds": STARTUP_S,
                "windows": {"rateSeconds": 20, "burstSeconds": BURST_S, "peakLookbackSeconds": 20,
                            "scaleDownStabilizationSeconds": DOWN_WINDOW_S, "metricsMaxAgeSeconds": 20},
                # The bursty-traffic rule's windows compressed like the others: the replayed trace is bursty, and
                # this rule then sizes for its busiest rate and releases it after the same short window.
                "burstyTraffic": {"rateSeconds": 60, "burstSeconds": BURST_S, "peakLookbackSeconds": 20,
                                  "scaleDownStabilizationSeconds": DOWN_WINDOW_S},
                **autoscaling,
            },
        },
    }  # fmt: skip


@pytest.fixture
def operator_running(cluster: ClusterInfo, api_client: client.ApiClient, namespace: str) -> Iterator[str]:
    """The operator running for the test's namespace and the CRD installed; yields Prometheus' URL."""
    if cluster.prometheus_url is None:
        pytest.fail("the local cluster runs without Prometheus; `python -m localcluster up` starts it")
    install_crd(api_client)
    log = cluster.state_dir / "logs" / f"operator-{namespace}.log"
    # The CRs here name the local Prometheus as their own prometheusURL: the operator must allow it.
    proc = OperatorProcess(cluster.kubeconfig, [namespace], log, ["--allow-prometheus-url", cluster.prometheus_url])
    proc.start()
    yield cluster.prometheus_url
    proc.stop()


@pytest.fixture
def autoscaled(operator_running: str, api_client: client.ApiClient, namespace: str) -> Fleet:
    fleet = Fleet(api_client, namespace, "chat")
    fleet.apply(autoscaled_deployment(operator_running))
    fleet.wait_ready(1, timeout=120)
    return fleet


def trace_offsets(limit: int, compress: float) -> list[float]:
    """Arrival offsets (seconds) of the trace's first `limit` requests, time-compressed by `compress`."""
    offsets: list[float] = []
    with TRACE.open() as handle:
        for row in csv.DictReader(handle):
            stamp = datetime.strptime(row["TIMESTAMP"][:26], "%Y-%m-%d %H:%M:%S.%f").timestamp()
            offsets.append(stamp)
            if len(offsets) == limit:
                break
    return [(t - offsets[0]) / compress for t in offsets]


def replay(router: str, offsets: list[float], max_seconds: float) -> tuple[int, list[str]]:
    """Send one 32-token request per offset (bounded by count and time); returns (sent, errors)."""
    errors: list[str] = []
    sent, lock = 0, threading.Lock()
    start = time.monotonic()

    def one(index: int) -> None:
        body = {"text": f"trace request {index}", "sampling_params": {"max_new_tokens": 32}}
        try:
            response = requests.post(f"{router}/generate", json=body, timeout=60)
            error = None if response.status_code == 200 else f"HTTP {response.status_code}: {response.text[:160]}"
        except requests.RequestException as exc:
            error = str(exc)[:160]
        if error:
            with lock:
                errors.append(error)

    threads = []
    for index, offset in enumerate(offsets):
        delay = offset - (time.monotonic() - start)
        if time.monotonic() - start + max(delay, 0) > max_seconds:
            break
        if delay > 0:
            time.sleep(delay)  # pacing the replay, not waiting for a condition
        thread = threading.Thread(target=one, args=(index,), daemon=True)
        thread.start()
        threads.append(thread)
        sent += 1
    for thread in threads:
        thread.join(timeout=90)
    return sent, errors


def desired(fleet: Fleet) -> int:
    return int((fleet.status().get("autoscaler") or {}).get("desiredReplicas") or 0)


def slo_miss_ratio(fleet: Fleet) -> tuple[float] | None:
    value = ((fleet.status().get("autoscaler") or {}).get("observed") or {}).get("sloMissRatio")
    return None if value is None else (float(value),)


def test_scales_up_under_trace_load_and_back_down(autoscaled: Fleet) -> None:
    fleet = autoscaled
    router = fleet.router_urls()[0]
    # The code trace's first 320 requests (~2.5 minutes) compressed 4x: ~8 req/s with the trace's bursts, of 1 s
    # requests against C = 4 per replica: about 3 replicas with headroom, one at rest.
    offsets = trace_offsets(limit=320, compress=4.0)
    result: dict[str, tuple[int, list[str]]] = {}
    load = threading.Thread(target=lambda: result.setdefault("load", replay(router, offsets, 60)), daemon=True)
    started = time.monotonic()
    load.start()
    bound = INTERVAL_S + STARTUP_S + SCRAPE_S + BURST_S + INTERVAL_S
    wait_for(lambda: desired(fleet) >= 2, bound + 10, "the autoscaler to ask for more replicas", interval=0.5,
             on_timeout=lambda: f"; autoscaler={fleet.status().get('autoscaler')}")  # fmt: skip
    decided_after = time.monotonic() - started
    wait_for(lambda: (fleet.status().get("readyReplicas") or 0) >= 2, STARTUP_S + 30, "the new replicas Ready")
    assert decided_after <= bound + 10
    load.join(timeout=120)
    sent, errors = result["load"]
    assert sent >= 300 and not errors, errors[:5]
    # The SLO reading (sglang:queue_time_seconds through the real Prometheus) reaches the status the operator writes.
    (ratio,) = wait_for(lambda: slo_miss_ratio(fleet), 30, "the share of requests over the SLO in status")
    assert 0.0 <= ratio <= 1.0
    wait_for(lambda: desired(fleet) == 1, DOWN_WINDOW_S + 60, "the autoscaler to scale back down", interval=1.0,
             on_timeout=lambda: f"; autoscaler={fleet.status().get('autoscaler')}")  # fmt: skip
    wait_for(lambda: len(fleet.pods()) == 1, 90, "surplus replicas drained and deleted")
    history = fleet.status()["autoscaler"]["history"]
    counts = [h["replicas"] for h in history]
    assert counts[-1] == 1 and max(counts) >= 2
    # The stabilisation window itself is table-tested in tests/autoscaling; here: the fleet came back to one
    # replica no sooner than one window after it first grew.
    times = [datetime.strptime(h["time"], "%Y-%m-%dT%H:%M:%SZ").timestamp() for h in history]
    first_up = next(times[i] for i in range(1, len(history)) if counts[i] > counts[i - 1])
    assert times[-1] - first_up >= DOWN_WINDOW_S - 1, history
    assert fleet.get()["spec"]["replicas"] == 1  # the autoscaler never writes spec


def test_prometheus_down_holds_and_recovers(autoscaled: Fleet, cluster: ClusterInfo) -> None:
    fleet = autoscaled
    metrics = wait_for(lambda: fleet.condition("MetricsAvailable"), 60, "MetricsAvailable condition")
    wait_for(lambda: (fleet.condition("MetricsAvailable") or {}).get("status") == "True", 60, "metrics available")
    assert metrics["type"] == "MetricsAvailable"
    layout = as_layout(Path(cluster.state_dir))
    held = desired(fleet)
    prometheus.stop_prometheus(layout)
    try:
        wait_for(lambda: (fleet.condition("MetricsAvailable") or {}).get("status") == "False", 4 * INTERVAL_S,
                 "MetricsAvailable=False while Prometheus is down")  # fmt: skip
        reason = fleet.status()["autoscaler"]["reason"]
        assert reason.startswith(f"holding {held} replicas")
        assert desired(fleet) == held
    finally:
        prometheus.start_prometheus(layout)
    wait_for(lambda: (fleet.condition("MetricsAvailable") or {}).get("status") == "True", 60,
             "MetricsAvailable=True after Prometheus restarts")  # fmt: skip
    assert desired(fleet) == held


def test_recommend_only_reports_and_hands_over(
    operator_running: str, api_client: client.ApiClient, namespace: str
) -> None:
    """Recommending, the autoscaler writes its count and an event while spec.replicas keeps the fleet; switched to
    owning the count, the fleet follows that count. minReplicas 2 above spec.replicas 1 makes the recommendation
    certain with or without traffic (the bounds apply to every decision, held ones included)."""
    fleet = Fleet(api_client, namespace, "shadow")
    fleet.apply(autoscaled_deployment(operator_running, recommendOnly=True, minReplicas=2))
    fleet.wait_ready(1, timeout=120)
    wait_for(lambda: desired(fleet) == 2 and fleet.status()["autoscaler"].get("recommendOnly") is True,
             4 * INTERVAL_S + 30, "the autoscaler's recommendation in status",
             on_timeout=lambda: f"; autoscaler={fleet.status().get('autoscaler')}")  # fmt: skip
    events = client.CoreV1Api(api_client).list_namespaced_event(namespace, field_selector="involvedObject.name=shadow")
    messages = [e.message for e in events.items if e.reason == "AutoscalerRecommendation"]
    assert messages and messages[-1].startswith("recommends 2 replicas"), messages
    # A spec change the pods do not see (a new generation) proves a reconcile pass ran with the recommendation in
    # status; the fleet it left is spec.replicas'.
    fleet.patch_spec({"autoscaling": {"intervalSeconds": INTERVAL_S + 1}})
    generation = fleet.get()["metadata"]["generation"]
    wait_for(lambda: fleet.status().get("observedGeneration") == generation, 60, "the reconciler's pass")
    assert len(fleet.pods()) == 1 and fleet.status()["replicas"] == 1
    fleet.patch_spec({"autoscaling": {"recommendOnly": False}})
    fleet.wait_ready(2, timeout=120)
    wait_for(lambda: fleet.status()["autoscaler"].get("recommendOnly") is False, 4 * INTERVAL_S + 30,
             "the autoscaler's count no longer marked as a recommendation")  # fmt: skip
    assert fleet.get()["spec"]["replicas"] == 1  # the autoscaler never writes spec
