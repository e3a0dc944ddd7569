"""A prefill/decode fleet rendered: each role's launch flags per release, the prefill's bootstrap port, RDMA as the
admin's device resource and IPC_LOCK (never more), the router in PD mode, the NetworkPolicy's bootstrap port, and
revisions that change with what a KV handoff depends on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from sglang_operator.api.groups import worker_groups
from sglang_operator.api.spec import SGLangDeploymentSpec
from sglang_operator.render import Owner, render_all, revision_hash
from sglang_operator.settings import OperatorSettings, PodPolicy
from tests.support.api.pd_cases import DECODE, PREFILL, pd
from tests.unit.api.test_validation import with_model

REPO = Path(__file__).resolve().parents[3]
OWNER = Owner("chat", "team-a", "7f0c2a4e-0000-4000-8000-000000000001")
RDMA = OperatorSettings(pod_policy=PodPolicy(rdma_resource="rdma/ib"))


def _spec(patch: dict[str, Any]) -> SGLangDeploymentSpec:
    return SGLangDeploymentSpec.model_validate(with_model(patch))


def _pods(spec: SGLangDeploymentSpec, settings: OperatorSettings | None = None) -> dict[str, dict[str, Any]]:
    """Rank-0 pod of replica 0 of each group, by group name."""
    pods = [o for o in render_all(spec, OWNER, settings) if o["kind"] == "Pod"]
    return {p["metadata"]["labels"].get("sglang.ai/group", ""): p for p in reversed(pods)}


def _main(pod: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in pod["spec"]["containers"] if c["name"] == "sglang")


def _flags(pod: dict[str, Any]) -> str:
    return " ".join(_main(pod)["command"])


def test_each_role_gets_its_flags_and_the_shared_kv_contract() -> None:
    pods = _pods(_spec(pd({"pageSize": 64, "kvCacheDtype": "fp8_e4m3", "ibDevice": "mlx5_0"})))
    prefill, decode = _flags(pods["p"]), _flags(pods["d"])
    shared = "--disaggregation-ib-device mlx5_0 --page-size 64 --kv-cache-dtype fp8_e4m3"
    assert "--disaggregation-mode prefill --disaggregation-transfer-backend mooncake " \
           f"--disaggregation-bootstrap-port 8998 {shared}" in prefill  # fmt: skip
    assert f"--disaggregation-mode decode --disaggregation-transfer-backend mooncake {shared}" in decode
    assert "--disaggregation-bootstrap-port" not in decode
    assert "--disaggregation-decode-tp" not in prefill  # 0.5.23 negotiates the decode shape per transfer


def test_0_5_9_prefill_is_told_the_decode_shape() -> None:
    decode = {**DECODE, "parallelism": {"tp": 4, "attentionDP": 4}}
    pods = _pods(_spec(pd(workerGroups=[PREFILL, decode], engine={"version": "0.5.9"})))
    assert "--disaggregation-decode-tp 4 --disaggregation-decode-dp 4" in _flags(pods["p"])
    assert "--disaggregation-decode-tp" not in _flags(pods["d"])


def test_prefill_pods_expose_the_bootstrap_port() -> None:
    pods = _pods(_spec(pd({"bootstrapPort": 9100})))
    assert {"name": "bootstrap", "containerPort": 9100, "protocol": "TCP"} in _main(pods["p"])["ports"]
    assert [p["name"] for p in _main(pods["d"])["ports"]] == ["http"]


def test_rdma_is_one_device_of_the_admins_resource_and_ipc_lock_on_the_main_container_only() -> None:
    sidecar = {"spec": {"containers": [{"name": "helper", "image": "busybox:1.36"}]}}
    spec = _spec(pd(template=sidecar))
    for pod in _pods(spec, RDMA).values():
        main = _main(pod)
        assert main["resources"]["limits"]["rdma/ib"] == "1" == main["resources"]["requests"]["rdma/ib"]
        assert main["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["IPC_LOCK"]}
        assert main["securityContext"]["privileged"] is False
        helper = next(c for c in pod["spec"]["containers"] if c["name"] == "helper")
        assert helper["securityContext"]["capabilities"] == {"drop": ["ALL"]}
        assert pod["spec"]["hostNetwork"] is False and not any("hostPath" in v for v in pod["spec"]["volumes"])
    for settings, patch in ((None, pd()), (RDMA, pd({"transferBackend": "mooncake_tcp"})), (RDMA, {})):
        for pod in _pods(_spec(patch), settings).values():
            assert "rdma/ib" not in _main(pod)["resources"]["limits"]
            assert _main(pod)["securityContext"]["capabilities"] == {"drop": ["ALL"]}


def _router_command(spec: SGLangDeploymentSpec) -> list[str]:
    deployment = next(o for o in render_all(spec, OWNER) if o["kind"] == "Deployment")
    return list(deployment["spec"]["template"]["spec"]["containers"][0]["command"])


def test_the_router_runs_in_pd_mode_with_its_policies() -> None:
    command = _router_command(_spec(pd(router={"prefillPolicy": "bucket", "decodePolicy": "least_load"})))
    assert "--pd-disaggregation" in command
    assert command[command.index("--prefill-policy") + 1] == "bucket"
    assert command[command.index("--decode-policy") + 1] == "least_load"
    assert not {"--pd-disaggregation", "--prefill-policy", "--decode-policy"} & set(_router_command(_spec({})))


def test_the_network_policy_admits_routers_and_the_operator_to_the_bootstrap_port() -> None:
    settings = OperatorSettings()
    policy = next(o for o in render_all(_spec(pd(networkPolicy={"enabled": True})), OWNER, settings)
                  if o["kind"] == "NetworkPolicy")  # fmt: skip
    router_rule = policy["spec"]["ingress"][0]
    assert {"protocol": "TCP", "port": 8998} in router_rule["ports"]
    colocated = next(o for o in render_all(_spec({"networkPolicy": {"enabled": True}}), OWNER, settings)
                     if o["kind"] == "NetworkPolicy")  # fmt: skip
    assert colocated["spec"]["ingress"][0]["ports"] == [{"protocol": "TCP", "port": 30000}]


def _revisions(patch: dict[str, Any]) -> dict[str, str]:
    return {g.name: revision_hash(g.spec, g.pd) for g in worker_groups(_spec(patch))}


def test_revisions_follow_the_kv_contract_and_the_decode_shape_only_where_prefill_reads_it() -> None:
    base = _revisions(pd())
    assert base["p"] != base["d"]
    contract = _revisions(pd({"pageSize": 32}))
    assert contract["p"] != base["p"] and contract["d"] != base["d"]
    wider = {**DECODE, "parallelism": {"tp": 2}}
    assert _revisions(pd(workerGroups=[PREFILL, wider]))["p"] == base["p"]  # 0.5.23: decode's shape is not prefill's
    old = _revisions(pd(engine={"version": "0.5.9"}))
    assert _revisions(pd(workerGroups=[PREFILL, wider], engine={"version": "0.5.9"}))["p"] != old["p"]


def test_the_examples_render_for_each_release() -> None:
    doc = yaml.safe_load((REPO / "examples" / "deepseek-v3-pd.yaml").read_text())
    for version, dialect in (("0.5.9", "--dp-size 16 --enable-dp-attention"), ("0.5.23", "--attn-dp-size 16")):
        doc["spec"]["engine"]["version"] = version
        pods = _pods(SGLangDeploymentSpec.model_validate(doc["spec"]), RDMA)
        assert dialect in _flags(pods["prefill"]) and dialect in _flags(pods["decode"])
        assert ("--disaggregation-decode-tp 16" in _flags(pods["prefill"])) == (version == "0.5.9")
        assert "--disaggregation-ib-device mlx5_bond_0,mlx5_bond_1,mlx5_bond_2,mlx5_bond_3" in _flags(pods["decode"])


def test_the_operators_gpu_and_rdma_amounts_win_over_a_stored_template() -> None:
    """Issue 37: a CR stored before the rule on the `sglang` entry's resources (or read without it) named 8 RDMA
    devices where the operator renders 1, one GPU where parallelism gives 2, and AMD GPUs beside them. The merge
    keeps the operator's amounts and adds only what the template may request (cpu, memory, storage, hugepages)."""
    main = {"name": "sglang", "resources": {
        "requests": {"rdma/ib": "8", "nvidia.com/gpu": "1", "amd.com/gpu": "2", "cpu": "4", "hugepages-2Mi": "1Gi"},
        "limits": {"rdma/ib": "8", "nvidia.com/gpu": "1", "amd.com/gpu": "2", "hugepages-2Mi": "1Gi"}}}  # fmt: skip
    spec = _spec(pd(template={"spec": {"containers": [main]}}))
    pods = _pods(spec, RDMA)
    prefill = _main(pods["p"])["resources"]
    assert prefill["requests"] == {"nvidia.com/gpu": "2", "rdma/ib": "1", "cpu": "4", "hugepages-2Mi": "1Gi"}
    assert prefill["limits"] == {"nvidia.com/gpu": "2", "rdma/ib": "1", "hugepages-2Mi": "1Gi"}
    assert _main(pods["d"])["resources"]["limits"] == {"nvidia.com/gpu": "1", "rdma/ib": "1", "hugepages-2Mi": "1Gi"}
