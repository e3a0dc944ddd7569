"""GPU/pod arithmetic and the exact launch command, for every example and both DP-attention flag dialects."""

from typing import Any

import pytest

from sglang_operator.api.groups import worker_groups
from sglang_operator.api.spec import SGLangDeploymentSpec
from sglang_operator.topology import launch_args, readiness_path, topology
from tests.conftest import load_example


def spec_of(raw: dict[str, Any]) -> SGLangDeploymentSpec:
    return SGLangDeploymentSpec.model_validate(raw)


@pytest.mark.parametrize(
    ("example", "gpus_per_replica", "pods", "gpus_per_pod", "total", "concurrency"),
    [
        ("quickstart.yaml", 1, 1, 1, 1, 64),
        ("llama-70b-tp4.yaml", 4, 1, 4, 8, 64),
        ("qwen-dp2-tp4.yaml", 8, 1, 8, 8, 256),
        ("deepseek-v3-dpa.yaml", 16, 2, 8, 16, 32),
        ("autoscaling.yaml", 2, 1, 2, 2, 32),
    ],
)
def test_example_topology(
    example: str, gpus_per_replica: int, pods: int, gpus_per_pod: int, total: int, concurrency: int
) -> None:
    doc = load_example(example)
    spec = spec_of(doc["spec"])
    shape = topology(spec)
    assert (shape.gpus_per_replica, shape.pods_per_replica, shape.gpus_per_pod) == (
        gpus_per_replica,
        pods,
        gpus_per_pod,
    )
    assert shape.total_gpus(spec.replicas) == total
    assert shape.concurrency_per_replica == concurrency


def test_quickstart_command_is_minimal_and_complete() -> None:
    spec = spec_of(load_example("quickstart.yaml")["spec"])
    assert launch_args(spec) == [
        "python3", "-m", "sglang.launch_server",
        "--model-path", "Qwen/Qwen2.5-0.5B-Instruct",
        "--served-model-name", "Qwen/Qwen2.5-0.5B-Instruct",
        "--host", "0.0.0.0", "--port", "30000", "--tp-size", "1", "--enable-metrics",
    ]  # fmt: skip


def test_llama_command_carries_engine_tuning() -> None:
    args = launch_args(spec_of(load_example("llama-70b-tp4.yaml")["spec"]))
    text = " ".join(args)
    assert "--tp-size 4" in text
    assert "--served-model-name llama-3.1-70b" in text
    assert "--max-running-requests 64 --mem-fraction-static 0.85 --context-length 32768" in text
    assert "--dp-size" not in text


def test_in_process_dp_uses_dp_size() -> None:
    text = " ".join(launch_args(spec_of(load_example("qwen-dp2-tp4.yaml")["spec"])))
    assert "--tp-size 4 --dp-size 2" in text
    assert "--enable-dp-attention" not in text and "--attn-dp-size" not in text


def test_deepseek_multinode_flags_per_rank() -> None:
    spec = spec_of(load_example("deepseek-v3-dpa.yaml")["spec"])
    rank1 = launch_args(spec, node_rank=1, dist_init_host="r0.svc")
    text = " ".join(rank1)
    assert "--tp-size 16 --attn-dp-size 16 --ep-size 16 --moe-a2a-backend deepep --enable-dp-lm-head" in text
    assert "--nnodes 2 --node-rank 1 --dist-init-addr r0.svc:20000" in text
    assert "--trust-remote-code" in text
    with pytest.raises(ValueError, match="dist-init-addr"):
        launch_args(spec, node_rank=0)


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        ("0.5.23", ["--attn-dp-size", "4"]),
        ("0.5.22", ["--attn-dp-size", "4"]),
        ("0.5.21", ["--dp-size", "4", "--enable-dp-attention"]),
        ("0.5.9", ["--dp-size", "4", "--enable-dp-attention"]),
    ],
)
def test_attention_dp_flag_dialect(version: str, expected: list[str]) -> None:
    spec = spec_of({"model": {"path": "m"}, "engine": {"version": version}, "parallelism": {"tp": 8, "attentionDP": 4}})
    args = launch_args(spec)
    start = args.index(expected[0])
    assert args[start : start + len(expected)] == expected
    assert topology(spec).gpus_per_replica == 8  # attention DP adds no GPUs


@pytest.mark.parametrize(("version", "path"), [("0.5.23", "/ready"), ("0.5.20", "/ready"), ("0.5.18", "/health")])
def test_readiness_endpoint_by_version(version: str, path: str) -> None:
    assert readiness_path(version) == path


def test_user_args_come_last_and_version_default() -> None:
    spec = spec_of({"model": {"path": "m"}, "engine": {"args": ["--chunked-prefill-size", "4096"]}})
    assert launch_args(spec)[-3:] == ["--enable-metrics", "--chunked-prefill-size", "4096"]
    assert spec.engine.version is None and spec.engine.sglang_version == "0.5.23"  # from the default image's tag
    assert spec.replicas == 1 and spec.router.enabled and spec.parallelism.tp == 1


@pytest.mark.parametrize(
    ("image", "flags", "ready"),
    [
        ("lmsysorg/sglang:v0.5.21-cu129", ["--dp-size", "4", "--enable-dp-attention"], "/ready"),
        ("lmsysorg/sglang:v0.5.19", ["--dp-size", "4", "--enable-dp-attention"], "/health"),
        ("lmsysorg/sglang:v0.5.22", ["--attn-dp-size", "4"], "/ready"),
        ("lmsysorg/sglang:v0.5.15.post1-cu126", ["--dp-size", "4", "--enable-dp-attention"], "/health"),
    ],
)
def test_the_version_comes_from_the_image_tag(image: str, flags: list[str], ready: str) -> None:
    """`engine.image` alone picks the dialect: a 0.5.21 image exits on --attn-dp-size, a 0.5.19 one has no /ready."""
    from sglang_operator.api.validation import parse_spec
    from sglang_operator.render import Owner, render_all

    spec, errors = parse_spec({"model": {"path": "m"}, "engine": {"image": image},
                               "parallelism": {"tp": 8, "attentionDP": 4}})  # fmt: skip
    assert errors == [] and spec is not None
    pod = render_all(spec, Owner("f", "ns", "uid"))[0]
    container = pod["spec"]["containers"][0]
    command = container["command"]
    start = command.index(flags[0])
    assert command[start : start + len(flags)] == flags
    assert "--attn-dp-size" not in command or flags[0] == "--attn-dp-size"
    assert container["readinessProbe"]["httpGet"]["path"] == ready


def test_pd_groups_get_the_kv_contract_on_both_roles() -> None:
    """What both roles must agree on is rendered from spec.disaggregation on each, `--dtype` included (issue 37)."""
    raw = {"model": {"path": "org/m"}, "disaggregation": {"pageSize": 64, "kvCacheDtype": "fp8_e4m3", "dtype": "half"},
           "workerGroups": [{"name": "p", "role": "prefill", "replicas": 1, "parallelism": {"tp": 2}},
                            {"name": "d", "role": "decode", "replicas": 1, "parallelism": {}}]}  # fmt: skip
    spec = spec_of(raw)
    for group in worker_groups(spec):
        args = launch_args(group.spec, pd=group.pd)
        contract = {flag: args[args.index(flag) + 1] for flag in ("--page-size", "--kv-cache-dtype", "--dtype")}
        assert contract == {"--page-size": "64", "--kv-cache-dtype": "fp8_e4m3", "--dtype": "half"}
    unset = spec_of({**raw, "disaggregation": {}})
    assert all("--dtype" not in launch_args(g.spec, pd=g.pd) for g in worker_groups(unset))
