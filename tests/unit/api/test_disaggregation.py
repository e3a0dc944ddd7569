"""Prefill/decode fleets at the API: what `validate` refuses beyond the rule table (`pd_cases`, run by
test_validation and at admission), the owned flags, the switch between modes, the RDMA policy, and each group's
role as the renderer reads it."""

from __future__ import annotations

from pathlib import Path
from typing import Any, get_args

import pytest
import yaml

from sglang_operator.api.disaggregation_rules import check_transition
from sglang_operator.api.groups import PdRole, fleet_shape, worker_groups
from sglang_operator.api.releases import DTYPES
from sglang_operator.api.spec import DisaggregationSpec, SGLangDeploymentSpec
from sglang_operator.api.validation import check_pod_policy, parse_spec
from sglang_operator.kvepoch import kv_epoch
from sglang_operator.render import revision_hash
from sglang_operator.settings import PodPolicy
from tests.support.api.pd_cases import DECODE, PREFILL, pd
from tests.unit.api.test_validation import with_model

REPO = Path(__file__).resolve().parents[3]


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
    [pd({"pageSize": 32}), pd({"kvCacheDtype": "fp8_e4m3"}), pd({"dtype": "float16"}), pd({"transferBackend": "nixl"}),
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


_ADP = {"tp": 2, "attentionDP": 2}
_MULTI = {"tp": 16, "attentionDP": 16, "nnodes": 2}


@pytest.mark.parametrize(
    ("prefill", "decode", "port", "refused"),
    [
        # one node: SGLang's ZMQ ports from engine.port + 233 (dist-init, tokenizer, detokenizer, rpc, metrics,
        # scheduler input) and the DP controller's handshake at engine.port + 13
        (_ADP, {}, 30000 + 233, True), (_ADP, {}, 30000 + 238, True), (_ADP, {}, 30000 + 13, True),
        (_ADP, {}, 30000 + 232, False), (_ADP, {}, 30000 + 239, False), (_ADP, {}, 30000 + 14, False),
        # several nodes: the same from the rendezvous port 20000 (20006: the load collector, 0.5.13+) and 20013
        (_MULTI, {}, 20001, True), (_MULTI, {}, 20006, True), (_MULTI, {}, 20013, True),
        (_MULTI, {}, 20007, False), (_MULTI, {}, 20014, False), (_MULTI, {}, 30000 + 233, False),
        # only a prefill serves the bootstrap port, and only attention DP binds these
        ({}, _ADP, 30000 + 233, False), ({"tp": 2, "dp": 2}, {}, 30000 + 233, False),
    ],
)  # fmt: skip
def test_the_bootstrap_port_stays_out_of_sglangs_attention_dp_ports(
    prefill: dict[str, Any], decode: dict[str, Any], port: int, refused: bool
) -> None:
    """Issue 37: with attention DP a prefill binds these ports itself, so a bootstrap server there cannot start."""
    groups = [{**PREFILL, "parallelism": prefill or PREFILL["parallelism"]}, {**DECODE, "parallelism": decode}]
    errors = _errors(pd({"bootstrapPort": port}, workerGroups=groups))
    assert [field for field, _ in errors] == (["spec.disaggregation.bootstrapPort"] if refused else [])


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        (pd(engine={"args": ["--dtype", "float16"]}), "spec.engine.args"),
        (pd(engine={"args": ["--dt=half"]}), "spec.engine.args"),
        (pd(workerGroups=[{**PREFILL, "engine": {"args": ["--dtype", "float16"]}}, DECODE]), "spec.workerGroups"),
    ],
)
def test_dtype_is_part_of_the_kv_contract_in_a_pd_fleet(patch: dict[str, Any], field: str) -> None:
    """Issue 37: with the KV dtype at auto, `--dtype float16` on one group hands fp16 pages to a bf16 decode and
    SGLang notices nothing (it compares the KV dtype strings, "auto" on both); the fleet sets it once, for both."""
    errors = _errors(patch)
    assert [f for f, _ in errors] == [field]
    assert "--dtype in spec.disaggregation.dtype" in errors[0][1]
    assert _errors({"engine": {"args": ["--dtype", "float16"]}}) == []  # a colocated fleet keeps it free


def test_the_dtype_field_offers_the_releases_choices() -> None:
    annotation = DisaggregationSpec.model_fields["dtype"].annotation
    assert set(get_args(get_args(annotation)[0])) == set(DTYPES)


def test_an_unset_dtype_keeps_every_pd_fleets_revisions_and_epoch() -> None:
    """Adding the field must not roll or cut over a running PD fleet on operator upgrade (values before it)."""
    for patch, epoch, revisions in [
        (pd(), "04638b8d87", ["4a7dc77057", "7a5c4f8229"]),
        (pd({"pageSize": 64, "kvCacheDtype": "fp8_e4m3"}), "b1312c5613", ["49bcefe9a6", "7c405beecf"]),
    ]:
        spec = _spec(patch)
        assert kv_epoch(spec) == epoch
        assert [revision_hash(g.spec, g.pd) for g in worker_groups(spec)] == revisions


@pytest.mark.parametrize(
    ("args", "page", "refused"),
    [
        (["--attention-backend", "flashmla"], 32, True), (["--attention-backend=flashmla"], 32, True),
        (["--decode-attention-backend", "cutlass_mla"], 64, True), (["--attention-backend", "trtllm_mla"], 16, True),
        (["--prefill-attention-backend", "hpc_ops"], 128, True), (["--attention-b", "flashmla"], 32, True),
        (["--attention-backend", "cutedsl_mla"], 128, True), (["--attention-backend", "intel_xpu"], 8, True),
        (["--attention-backend", "trtllm_mla"], 32, False), (["--attention-backend", "trtllm_mha"], 128, False),
        (["--attention-backend", "cutlass_mla"], 128, False), (["--attention-backend", "fa3"], 32, False),
        (["--attention-backend", "flashmla"], None, False), (["--tool-call-parser", "flashmla"], 32, False),
        (["--x", "--attention-backend", "flashmla", "--y"], 16, True),
        (["--attention-backend", "flashmlax"], 16, False),
    ],
)  # fmt: skip
def test_a_backend_that_forces_its_page_size_matches_the_fleets(
    args: list[str], page: int | None, refused: bool
) -> None:
    """Issue 37: SGLang replaces --page-size where the attention backend needs its own (flashmla 64, ...): the groups
    that name it would run other pages than the rest."""
    dis = {} if page is None else {"pageSize": page}
    top = [f for f, _ in _errors(pd(dis, engine={"args": args}))]
    group = [f for f, _ in _errors(pd(dis, workerGroups=[PREFILL, {**DECODE, "engine": {"args": args}}]))]
    assert (top, group) == ((["spec.disaggregation.pageSize"], ["spec.workerGroups"]) if refused else ([], []))
