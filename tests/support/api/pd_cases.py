"""The prefill/decode rules' table: (field, message fragment, failing patch, passing patch), one case per rule of
`disaggregation_rules`. `test_validation.CASES` includes it, so `validate`, the per-group derivation and the real API
server (`e2e/tests/test_crd_admission.py`) all check these, with the same field and message."""

from __future__ import annotations

from typing import Any

PREFILL: dict[str, Any] = {"name": "p", "role": "prefill", "replicas": 1, "parallelism": {"tp": 2}}
DECODE: dict[str, Any] = {"name": "d", "role": "decode", "replicas": 2, "parallelism": {}}
PLAIN: dict[str, Any] = {"name": "x", "replicas": 1, "parallelism": {}}


def pd(disaggregation: dict[str, Any] | None = None, **top: Any) -> dict[str, Any]:
    """A small disaggregated fleet (1 prefill tp=2, 2 decode tp=1) with `top` merged over it."""
    return {"disaggregation": disaggregation or {}, "workerGroups": [PREFILL, DECODE], **top}


def _v(version: str, **engine: Any) -> dict[str, Any]:
    return {"engine": {"version": version, **engine}}


PD_CASES: list[tuple[str, str, dict[str, Any], dict[str, Any]]] = [
    ("spec.workerGroups", "either every worker group has a role",
     {"workerGroups": [PREFILL, PLAIN]}, {"workerGroups": [PLAIN, {**PLAIN, "name": "y"}]}),
    ("spec.disaggregation", "needs workerGroups with roles",
     {"disaggregation": {}}, pd()),
    ("spec.workerGroups", "which needs spec.disaggregation",
     {"workerGroups": [PREFILL, DECODE]}, pd()),
    ("spec.workerGroups", "at least one prefill group and one decode group",
     {"disaggregation": {}, "workerGroups": [DECODE, {**DECODE, "name": "e"}]}, pd()),
    ("spec.disaggregation.transferBackend", "cannot be fake",
     pd({"transferBackend": "fake"}), pd({"transferBackend": "nixl"})),
    ("spec.disaggregation.transferBackend", "mooncake_tcp is accepted from",
     pd({"transferBackend": "mooncake_tcp"}, **_v("0.5.12")), pd({"transferBackend": "mooncake_tcp"}, **_v("0.5.13"))),
    ("spec.disaggregation.decodeAllocationPolicy", "is accepted from",
     pd({"decodeAllocationPolicy": "early"}, **_v("0.5.21")), pd({"decodeAllocationPolicy": "early"}, **_v("0.5.22"))),
    ("spec.disaggregation.decodeAllocationPolicy", "prefill_complete needs the mooncake backend",
     pd({"decodeAllocationPolicy": "prefill_complete"}),
     pd({"decodeAllocationPolicy": "prefill_complete"}, workerGroups=[
         {**PREFILL, "parallelism": {"tp": 1}}, DECODE])),
    ("spec.disaggregation.bootstrapPort", "other than engine.port",
     pd({"bootstrapPort": 30000}), pd({"bootstrapPort": 9000})),
    ("spec.disaggregation.ibDevice", "must not contain '$('",
     pd({"ibDevice": "$(HF_TOKEN)"}), pd({"ibDevice": "mlx5_0,mlx5_1"})),
    ("spec.disaggregation.pageSize", "at most 4096",
     pd({"pageSize": 0}), pd({"pageSize": 64})),
    ("spec.disaggregation.kvCacheDtype", "is not accepted by the SGLang release",
     pd({"kvCacheDtype": "fp4_e2m1"}), pd({"kvCacheDtype": "fp8_e4m3"})),
    ("spec.engine.args", "a disaggregated fleet sets --page-size",
     pd(engine={"args": ["--page-size", "32"]}),
     pd({"pageSize": 32}, engine={"args": ["--chunked-prefill-size", "4096"]})),
    ("spec.workerGroups", "tells each prefill server the decode shape",
     pd(workerGroups=[PREFILL, DECODE, {**DECODE, "name": "e", "parallelism": {"tp": 2}}], **_v("0.5.9")),
     pd(workerGroups=[PREFILL, DECODE, {**DECODE, "name": "e", "parallelism": {"tp": 2}}], **_v("0.5.10"))),
    ("spec.workerGroups", "neither is a multiple of the other",
     pd(workerGroups=[{**PREFILL, "parallelism": {"tp": 3}}, {**DECODE, "parallelism": {"tp": 2}}], **_v("0.5.9")),
     pd(workerGroups=[{**PREFILL, "parallelism": {"tp": 4}}, {**DECODE, "parallelism": {"tp": 2}}], **_v("0.5.9"))),
    ("spec.router.enabled", "a disaggregated fleet needs its router",
     pd(router={"enabled": False}), pd(router={"enabled": True})),
    ("spec.inferencePool.enabled", "cannot serve a disaggregated fleet",
     pd(inferencePool={"enabled": True, "endpointPickerRef": {"name": "epp"}}), pd(inferencePool={"enabled": False})),
    ("spec.router.prefillPolicy", "applies only to a disaggregated fleet",
     {"router": {"prefillPolicy": "cache_aware"}}, pd(router={"prefillPolicy": "cache_aware"})),
    ("spec.router.decodePolicy", "applies only to a disaggregated fleet",
     {"router": {"decodePolicy": "least_load"}}, pd(router={"decodePolicy": "least_load"})),
    ("spec.router.prefillPolicy", "Power-of-two policy for prefill",
     pd(router={"prefillPolicy": "power_of_two"}), pd(router={"prefillPolicy": "bucket"})),
    ("spec.router.decodePolicy", "Power-of-two policy for decode",
     pd(router={"decodePolicy": "power_of_two"}), pd(router={"decodePolicy": "round_robin"})),
    ("spec.router.decodePolicy", "cannot be bucket",
     pd(router={"decodePolicy": "bucket"}), pd(router={"decodePolicy": "cache_aware"})),
    ("spec.disaggregation.bootstrapPort", "outside the ports SGLang binds for attention DP",
     pd(workerGroups=[{**PREFILL, "parallelism": {"tp": 2, "attentionDP": 2}}, DECODE], engine={"port": 8765}),
     pd(workerGroups=[PREFILL, {**DECODE, "parallelism": {"tp": 2, "attentionDP": 2}}], engine={"port": 8765})),
    ("spec.disaggregation.pageSize", "a size the attention backend named in engine.args takes",
     pd({"pageSize": 32}, engine={"args": ["--attention-backend", "flashmla"]}),
     pd({"pageSize": 64}, engine={"args": ["--attention-backend", "flashmla"]})),
]  # fmt: skip
