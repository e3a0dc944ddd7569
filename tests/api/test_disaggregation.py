"""Prefill/decode fleets at the API: what `validate` refuses beyond the rule table (`pd_cases`, run by
test_validation and at admission), the owned flags, the switch between modes, the RDMA policy, and each group's
role as the renderer reads it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from sglang_operator.api.disaggregation_rules import check_transition
from sglang_operator.api.groups import PdRole, fleet_shape, worker_groups
from sglang_operator.api.spec import SGLangDeploymentSpec
from sglang_operator.api.validation import check_pod_policy, parse_spec
from sglang_operator.kvepoch import kv_epoch
from sglang_operator.settings import PodPolicy
from tests.api.pd_cases import DECODE, PREFILL, pd
from tests.api.test_validation import with_model

REPO = Path(__file__).resolve().parents[2]


def _spec(patch: dict[str, Any]) -> Any:
    spec, errors = parse_spec(with_model(patch))
    assert errors == [] and spec is not None
    return spec


def _errors(patch: dict[str, Any]) -> list[tuple[str, str]]:
    return [(e.field, e.message) for e in parse_spec(with_model(patch))[1]]


@pytest.mark.parametrize(
    ("args_field", "patch", "flag", "owner"),
    [
        ("spec.engine.args", {"engine": {"args": ["--disaggregation-mode", "prefill"]}}, "--disaggregation-mode",
         "workerGroups[].role"),
        ("spec.engine.args", {"engine": {"args": ["--disaggregation-bootstrap-port=9"]}},
         "--disaggregation-bootstrap-port", "disaggregation.bootstrapPort"),
        ("spec.router.args", {"router": {"args": ["--pd-disaggregation"]}}, "--pd-disaggregation", "disaggregation"),
        ("spec.router.args", {"router": {"args": ["--prefill", "http://x:1"]}}, "--prefill", "prefill worker"),
        ("spec.router.args", {"router": {"args": ["--decode-policy", "random"]}}, "--decode-policy",
         "router.decodePolicy"),
    ],
)  # fmt: skip
def test_pd_flags_are_owned(args_field: str, patch: dict[str, Any], flag: str, owner: str) -> None:
    """A group that put `--disaggregation-mode prefill` in its args used to be registered as a regular worker."""
    errors = _errors(patch)
    assert len(errors) == 1
    field, message = errors[0]
    assert field == args_field and flag in message and owner in message


def test_router_tuning_flags_of_pd_stay_free() -> None:
    assert _errors(pd(router={"args": ["--prefill-max-inflight-requests-per-worker", "8"]})) == []
    assert _errors(pd(engine={"args": ["--disaggregation-decode-enable-radix-cache"]})) == []


def test_switching_between_colocated_and_pd_is_refused_on_update() -> None:
    colocated, disaggregated = _spec({}), _spec(pd())
    assert [e.field for e in check_transition(colocated, disaggregated)] == ["spec.disaggregation"]
    assert [e.field for e in check_transition(disaggregated, colocated)] == ["spec.disaggregation"]
    assert check_transition(disaggregated, _spec(pd(router={"decodePolicy": "least_load"}))) == []
    assert check_transition(colocated, _spec({"replicas": 3})) == []


@pytest.mark.parametrize(
    "changed",
    [pd({"pageSize": 32}), pd({"kvCacheDtype": "fp8_e4m3"}), pd({"transferBackend": "nixl"}),
     pd(engine={"version": "0.5.22"}), pd(engine={"image": "lmsysorg/sglang:v0.5.23-cu129"}),
     {**pd(), "model": {"path": "org/other"}}, {**pd(), "model": {"path": "org/model", "revision": "v2"}}],
)  # fmt: skip
def test_a_pd_fleet_may_change_its_kv_contract(changed: dict[str, Any]) -> None:
    """The operator cuts such a change over whole (controller/cutover.py), so the update is accepted, and it is a
    new KV epoch."""
    new = SGLangDeploymentSpec.model_validate({"model": {"path": "org/model"}, **changed})
    assert check_transition(_spec(pd()), new) == []
    assert kv_epoch(new) != kv_epoch(_spec(pd()))


def test_kv_over_rdma_needs_the_admins_rdma_resource() -> None:
    rdma, tcp = _spec(pd({"transferBackend": "mooncake"})), _spec(pd({"transferBackend": "mooncake_tcp"}))
    refused = check_pod_policy(rdma, PodPolicy())
    assert [e.field for e in refused] == ["spec.disaggregation.transferBackend"]
    assert "--rdma-resource" in refused[0].message
    assert check_pod_policy(rdma, PodPolicy(rdma_resource="rdma/ib")) == []
    assert check_pod_policy(tcp, PodPolicy()) == []
    assert check_pod_policy(_spec({}), PodPolicy()) == []


def test_each_group_carries_its_role_and_0_5_9_prefill_the_decode_shape() -> None:
    shaped = {**DECODE, "parallelism": {"tp": 4, "attentionDP": 4}}
    old = worker_groups(_spec(pd(workerGroups=[PREFILL, shaped], engine={"version": "0.5.9"})))
    assert [(g.name, g.pd) for g in old] == [("p", PdRole("prefill", (4, 4))), ("d", PdRole("decode"))]
    new = worker_groups(_spec(pd(workerGroups=[PREFILL, shaped])))
    assert [g.pd for g in new] == [PdRole("prefill"), PdRole("decode")]
    assert [g.role for g in worker_groups(_spec({"workerGroups": [{**PREFILL, "role": None}]}))] == [None]


@pytest.mark.parametrize("version", ["0.5.9", "0.5.23"])
def test_the_deepseek_pd_example_validates_for_each_release(version: str) -> None:
    doc = yaml.safe_load((REPO / "examples" / "deepseek-v3-pd.yaml").read_text())
    doc["spec"]["engine"]["version"] = version
    spec, errors = parse_spec(doc["spec"])
    assert errors == [] and spec is not None
    assert check_pod_policy(spec, PodPolicy(rdma_resource="rdma/ib")) == []


def test_the_shape_column_says_each_groups_shape_and_role() -> None:
    """A tp=4 + tp=2 fleet printed `TP 1  DP 1`, the unused top-level defaults; the SHAPE column names each."""
    assert fleet_shape(_spec({"parallelism": {"tp": 2, "dp": 2}})) == "tp2 dp2"
    mixed = {"workerGroups": [{"name": "a", "replicas": 1, "parallelism": {"tp": 4}},
                              {"name": "b", "replicas": 2, "parallelism": {"tp": 2}}]}  # fmt: skip
    assert fleet_shape(_spec(mixed)) == "a: tp4, b: tp2"
    big = {"tp": 16, "attentionDP": 16, "ep": 16, "moeA2ABackend": "deepep", "nnodes": 2}
    assert fleet_shape(_spec(pd(workerGroups=[{**PREFILL, "parallelism": big}, DECODE]))) == (
        "p (prefill): tp16 adp16 ep16 2n, d (decode): tp1"
    )
