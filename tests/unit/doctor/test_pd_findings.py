"""The prefill/decode diagnoses as pure functions: each fires with evidence that names its numbers, holds (None) on
unknown inputs, and finds nothing in a colocated fleet or a healthy one."""

from dataclasses import replace
from typing import Any

import pytest
from pydantic import ValidationError

from sglang_operator.api.diagnostics import DiagnosticsSpec, DiagnosticThresholds
from sglang_operator.api.status import DiagnosticFinding
from sglang_operator.doctor.diagnose import diagnose, load_imbalance
from sglang_operator.doctor.hysteresis import evolve
from sglang_operator.doctor.model import (
    FINDING_TYPES,
    PD_FINDING_TYPES,
    BootstrapProbe,
    FleetFacts,
    LaunchFacts,
    PodFacts,
    ReplicaMetrics,
    RouterView,
)
from sglang_operator.doctor.pd_diagnose import (
    bootstrap_unreachable,
    handoff_stuck,
    rendezvous_failures,
    role_skew,
    role_unavailable,
)

NOW = 1_800_000_000.0
TH = DiagnosticThresholds()
SPEC = LaunchFacts(page_size="64", kv_cache_dtype="", transfer_backend="mooncake", version="0.5.23")
PREFILL, DECODE_0, DECODE_1 = "chat-p-0-0", "chat-d-0-0", "chat-d-1-0"
ROUTER = "chat-router-7c9d-x2"


def pod(name: str, role: str, **kw: Any) -> PodFacts:
    values: dict[str, Any] = {
        "name": name, "replica": name.split("-")[2], "rank": 0, "node": f"node-{name}", "created": NOW - 3600,
        "scheduled": NOW - 3599, "started": NOW - 3598, "ready": True, "ready_since": NOW - 3500,
        "group": role, "role": role, "launch": SPEC,
    }  # fmt: skip
    values.update(kw)
    return PodFacts(**values)


PODS = (pod(PREFILL, "prefill"), pod(DECODE_0, "decode"), pod(DECODE_1, "decode"))
URLS = {name: f"http://10.0.0.{i}:30000" for i, name in enumerate((PREFILL, DECODE_0, DECODE_1))}


def fleet(*pods: PodFacts, listed: tuple[str, ...] | None = None, **kw: Any) -> FleetFacts:
    """A disaggregated fleet whose one router lists `listed` (default: every pod)."""
    pods = pods or PODS
    names = [p.name for p in pods] if listed is None else listed
    values: dict[str, Any] = {
        "now": NOW, "pods": pods, "policy": "cache_aware", "disaggregated": True, "pod_urls": URLS,
        "routers": (RouterView(ROUTER, {URLS[n]: True for n in names}),), "role_replicas": {"prefill": 1, "decode": 2},
        "launch": SPEC, "bootstrap": (BootstrapProbe(PREFILL, "http://10.0.0.0:8998/health"),),
    }  # fmt: skip
    values.update(kw)
    return FleetFacts(**values)


def colocated(*pods: PodFacts, **kw: Any) -> FleetFacts:
    return fleet(*pods, disaggregated=False, **kw)


def metrics(**kw: Any) -> ReplicaMetrics:
    """A healthy PD fleet's readings over 600s."""
    values: dict[str, Any] = {
        "window_seconds": 600, "rendezvous_failures": {},
        "prealloc_queue": {DECODE_0: 0.0, DECODE_1: 1.0}, "prealloc_growth": {DECODE_0: 0.0, DECODE_1: 1.0},
        "prealloc_lowest": {DECODE_0: 0.0, DECODE_1: 0.0},
        "running_mean": {PREFILL: 1.2, DECODE_0: 6.0, DECODE_1: 5.5}, "bootstrap_queue_mean": {PREFILL: 0.3},
    }  # fmt: skip
    values.update(kw)
    return ReplicaMetrics(**values)


REFUSED = BootstrapProbe(PREFILL, "http://10.0.0.0:8998/health", "GET http://10.0.0.0:8998/health: connection refused")


# -- BootstrapUnreachable --------------------------------------------------------------------------------------------
def test_a_ready_prefill_whose_bootstrap_port_refuses_is_reported_with_the_probe_and_the_routers() -> None:
    found = bootstrap_unreachable(fleet(bootstrap=(REFUSED,)))
    assert found is not None and [(c.type, c.subject, c.replica, c.node) for c in found] == [
        ("BootstrapUnreachable", PREFILL, "0", f"node-{PREFILL}")
    ]
    assert found[0].evidence == (
        "its bootstrap server did not answer this evaluation's probe (GET http://10.0.0.0:8998/health: connection "
        f"refused); the replica is Ready and router pod(s) {ROUTER} list it, so every request they pair with it fails"
    )
    assert "--disaggregation-bootstrap-port 8998" in found[0].action and "mooncake" in found[0].action
    assert "RDMA device" in found[0].action and f"delete pod {PREFILL}" in found[0].action


def test_the_bootstrap_action_names_no_rdma_device_for_the_tcp_backend() -> None:
    tcp = replace(SPEC, transfer_backend="mooncake_tcp")
    prefill = pod(PREFILL, "prefill", launch=tcp)
    found = bootstrap_unreachable(fleet(prefill, *PODS[1:], bootstrap=(REFUSED,))) or []
    assert "mooncake_tcp transfer backend" in found[0].action and "RDMA" not in found[0].action


def test_a_prefill_no_router_lists_is_still_reported_and_an_answering_one_is_not() -> None:
    found = bootstrap_unreachable(fleet(bootstrap=(REFUSED,), listed=(DECODE_0,))) or []
    assert found[0].evidence.endswith("the replica is Ready and no router lists it")
    assert bootstrap_unreachable(fleet()) == []


def test_a_prefill_left_unrouted_for_its_closed_bootstrap_port_is_not_also_uneven_load() -> None:
    unrouted, even = fleet(listed=(DECODE_0, DECODE_1)), metrics(load=dict.fromkeys((PREFILL, DECODE_0, DECODE_1), 1.0))
    assert [c.subject for c in load_imbalance(even, unrouted, TH) or []] == [PREFILL]
    assert load_imbalance(even, replace(unrouted, bootstrap=(REFUSED,)), TH) == []


def test_bootstrap_probes_not_finished_are_unknown_and_a_colocated_fleet_has_none() -> None:
    assert bootstrap_unreachable(fleet(bootstrap=None)) is None
    assert bootstrap_unreachable(colocated(bootstrap=(REFUSED,))) == []
    assert bootstrap_unreachable(colocated(bootstrap=None)) == []


# -- RendezvousFailures ----------------------------------------------------------------------------------------------
def test_rendezvous_failures_rising_on_a_router_pod_are_reported_by_leg_and_phase() -> None:
    readings = {
        (ROUTER, "prefill", "probe"): 3.02,
        (ROUTER, "decode", "transfer"): 0.98,
        ("other", "prefill", "probe"): 0.0,
    }
    found = rendezvous_failures(metrics(rendezvous_failures=readings), fleet())
    assert found is not None and [(c.type, c.subject) for c in found] == [("RendezvousFailures", ROUTER)]
    assert found[0].evidence == (
        f"smg_pd_rendezvous_failures_total rose by 4 over 600s on router pod {ROUTER}: 1 in phase transfer (decode "
        "leg), 3 in phase probe (prefill leg); each failure in another phase is a request whose prefill and decode "
        "did not complete the KV handoff"
    )
    assert "phase probe: a prefill's bootstrap port refused" in found[0].action
    assert "phase transfer: the KV handoff failed" in found[0].action


def test_failure_counts_that_overflow_their_sum_are_reported_not_raised() -> None:
    """Issue 37: a router pod's counter is the tenant's to forge; two increases of 1e308 sum to infinity, and
    round() raised OverflowError out of the doctor's pass."""
    readings = {(ROUTER, "prefill", "probe"): 1e308, (ROUTER, "decode", "transfer"): 1e308}
    found = rendezvous_failures(metrics(rendezvous_failures=readings), fleet()) or []
    assert found[0].evidence.startswith(
        f"smg_pd_rendezvous_failures_total rose by inf over 600s on router pod {ROUTER}"
    )
    assert "in phase probe (prefill leg)" in found[0].evidence


def test_probe_failures_alone_are_refused_registrations_not_requests() -> None:
    found = rendezvous_failures(metrics(rendezvous_failures={(ROUTER, "prefill", "probe"): 2.0}), fleet()) or []
    assert found[0].evidence.endswith("each failure is a registration whose bootstrap port refused smg's probe, "
                                      "not a request")  # fmt: skip


def test_no_rise_or_extrapolation_noise_is_no_finding_and_an_unread_counter_is_unknown() -> None:
    assert rendezvous_failures(metrics(), fleet()) == []
    assert rendezvous_failures(metrics(rendezvous_failures={(ROUTER, "prefill", "probe"): 0.3}), fleet()) == []
    assert rendezvous_failures(metrics(rendezvous_failures=None), fleet()) is None
    assert rendezvous_failures(None, fleet()) is None
    rising = metrics(rendezvous_failures={(ROUTER, "prefill", "probe"): 5.0})
    assert rendezvous_failures(rising, colocated()) == []


# -- RoleSkew --------------------------------------------------------------------------------------------------------
def test_a_decode_left_from_an_older_spec_is_reported_with_both_roles_values_and_named_in_the_action() -> None:
    old = pod(DECODE_1, "decode", launch=replace(SPEC, page_size="32", version="0.5.22"))
    found = role_skew(fleet(PODS[0], PODS[1], old))
    assert found is not None and [(c.type, c.subject) for c in found] == [("RoleSkew", "")]
    assert found[0].evidence == (
        f"page size (--page-size): prefill 64 ({PREFILL}); decode 32 ({DECODE_1}), 64 ({DECODE_0}) | "
        f"SGLang version (image): prefill 0.5.23 ({PREFILL}); decode 0.5.22 ({DECODE_1}), 0.5.23 ({DECODE_0}); "
        f"listed together by router pod(s) {ROUTER}, as the pods run now"
    )
    assert f"(page size 64, SGLang version 0.5.23) are {DECODE_1};" in found[0].action


def test_a_kv_dtype_set_on_one_role_only_is_skew_against_the_default() -> None:
    fp8 = pod(PREFILL, "prefill", launch=replace(SPEC, kv_cache_dtype="fp8_e4m3"))
    found = role_skew(fleet(fp8, PODS[1], PODS[2])) or []
    assert found[0].evidence.startswith(
        f"KV-cache dtype (--kv-cache-dtype): prefill fp8_e4m3 ({PREFILL}); decode SGLang's default ({DECODE_0}, "
        f"{DECODE_1})"
    )
    assert f"(KV-cache dtype SGLang's default) are {PREFILL};" in found[0].action


def test_skewed_pods_no_router_pairs_are_no_finding_and_without_router_lists_it_is_unknown() -> None:
    old = pod(DECODE_1, "decode", launch=replace(SPEC, page_size="32"))
    assert role_skew(fleet(PODS[0], PODS[1], old, listed=(PREFILL, DECODE_0))) == []  # a cut-over's new set
    assert role_skew(fleet(PODS[0], PODS[1], old, listed=(DECODE_0, DECODE_1))) == []  # no prefill to pair with
    assert role_skew(fleet(PODS[0], PODS[1], old, routers=(RouterView(ROUTER, None),))) is None
    assert role_skew(fleet(PODS[0], PODS[1], old, routers=())) is None
    assert role_skew(colocated(PODS[0], PODS[1], old)) == []
    assert role_skew(fleet()) == []


# -- RoleUnavailable -------------------------------------------------------------------------------------------------
def test_no_ready_decode_while_prefill_is_ready_is_reported_with_each_decode_pods_state() -> None:
    starting = pod(DECODE_0, "decode", created=NOW - 120, ready=False, ready_since=None)
    leaving = pod(DECODE_1, "decode", serving=False)
    found = role_unavailable(fleet(PODS[0], starting, leaving))
    assert [(c.type, c.subject) for c in found] == [("RoleUnavailable", "")]
    assert found[0].evidence == (
        "no Ready decode replica while 1 prefill replica(s) are, so the router answers 503 to every request; decode "
        f"replicas now: {DECODE_0} not Ready 120s after creation, {DECODE_1} leaving (draining or deleted); the spec "
        "asks for 2"
    )
    assert "see why the decode pods are not Ready" in found[0].action


def test_the_action_says_whether_the_spec_or_the_operator_left_a_role_empty() -> None:
    zero = role_unavailable(fleet(*PODS[1:], role_replicas={"prefill": 0, "decode": 2}))
    assert zero[0].evidence.startswith("no Ready prefill replica while 2 decode replica(s) are")
    assert "replicas now: none; the spec asks for 0" in zero[0].evidence
    assert zero[0].action.startswith("the spec asks for no prefill replica")
    missing = role_unavailable(fleet(*PODS[1:]))
    assert missing[0].action.startswith("the operator runs no prefill pod")


def test_a_fleet_with_nothing_ready_a_healthy_one_and_a_colocated_one_have_no_unavailable_role() -> None:
    down = tuple(replace(p, ready=False, ready_since=None) for p in PODS)
    assert role_unavailable(fleet(*down)) == []
    assert role_unavailable(fleet()) == []
    assert role_unavailable(colocated(PODS[0])) == []


# -- HandoffStuck ----------------------------------------------------------------------------------------------------
IDLE_PREFILL = {"running_mean": {PREFILL: 0.0, DECODE_0: 0.0, DECODE_1: 0.0}, "bootstrap_queue_mean": {PREFILL: 0.0}}


def test_a_decode_prealloc_queue_growing_while_prefill_idles_is_a_stuck_handoff() -> None:
    readings = metrics(
        prealloc_queue={DECODE_0: 14.0, DECODE_1: 0.0}, prealloc_growth={DECODE_0: 12.0, DECODE_1: 0.0}, **IDLE_PREFILL
    )
    found = handoff_stuck(readings, fleet(), TH)
    assert found is not None and [(c.type, c.subject, c.replica) for c in found] == [("HandoffStuck", DECODE_0, "0")]
    assert found[0].evidence == (
        "its prealloc queue grew by 12 to 14 requests over 600s while every prefill replica idled: at most 0 running "
        f"and 0 in the bootstrap queue on average on prefill pod(s) {PREFILL}"
    )
    assert "RendezvousFailures" in found[0].action and f"delete pod {DECODE_0}" in found[0].action


def test_a_prealloc_queue_that_never_emptied_is_stuck_even_once_it_stopped_growing() -> None:
    plateau = metrics(
        prealloc_queue={DECODE_0: 12.0},
        prealloc_growth={DECODE_0: 0.0},
        prealloc_lowest={DECODE_0: 9.0},
        **IDLE_PREFILL,
    )
    found = handoff_stuck(plateau, fleet(), TH) or []
    assert found[0].evidence.startswith("its prealloc queue never emptied (lowest 9, now 12 requests) over 600s")


def test_a_busy_prefill_a_drained_queue_small_growth_or_a_prefill_without_reading_is_no_stuck_handoff() -> None:
    growing = {"prealloc_queue": {DECODE_0: 14.0}, "prealloc_growth": {DECODE_0: 12.0}}
    assert handoff_stuck(metrics(**growing), fleet(), TH) == []  # prefill runs 1.2 on average
    assert handoff_stuck(metrics(**growing, running_mean={PREFILL: 0.05}), fleet(), TH) == []  # bootstrap 0.3
    drained = {"prealloc_queue": {DECODE_0: 0.0}, "prealloc_growth": {DECODE_0: 12.0}}
    assert handoff_stuck(metrics(**{**IDLE_PREFILL, **drained}), fleet(), TH) == []
    small = {"prealloc_queue": {DECODE_0: 1.0}, "prealloc_growth": {DECODE_0: 1.0}}
    assert handoff_stuck(metrics(**{**IDLE_PREFILL, **small}), fleet(), TH) == []
    unread = {**IDLE_PREFILL, "bootstrap_queue_mean": {}}
    assert handoff_stuck(metrics(**growing, **unread), fleet(), TH) == []
    tuned = DiagnosticThresholds(prealloc_queue_growth=20)
    assert handoff_stuck(metrics(**{**IDLE_PREFILL, **growing}), fleet(), tuned) == []


def test_a_stuck_handoff_is_unknown_without_its_readings_and_absent_in_a_colocated_fleet() -> None:
    stuck = metrics(prealloc_queue={DECODE_0: 14.0}, prealloc_growth={DECODE_0: 12.0}, **IDLE_PREFILL)
    for field in ("prealloc_queue", "prealloc_growth", "prealloc_lowest", "running_mean", "bootstrap_queue_mean"):
        assert handoff_stuck(replace(stuck, **{field: None}), fleet(), TH) is None
    assert handoff_stuck(None, fleet(), TH) is None
    assert handoff_stuck(stuck, colocated(), TH) == []


# -- all together ----------------------------------------------------------------------------------------------------
def test_a_healthy_pd_fleet_has_no_candidates_and_nothing_unknown() -> None:
    each = dict.fromkeys((PREFILL, DECODE_0, DECODE_1), 0.5)
    dp = {"load": each, "requests": dict.fromkeys(each, 100.0), "itl": each, "ttft": each, "cache_hit_rate": each}
    diagnosis = diagnose(metrics(**dp), fleet(), DiagnosticsSpec())
    assert diagnosis.candidates == () and dict(diagnosis.unknown) == {}


def test_a_colocated_fleet_reports_no_pd_type_even_as_unknown() -> None:
    blind = diagnose(None, colocated(bootstrap=None, routers=()), DiagnosticsSpec(), "no Prometheus URL")
    assert not set(blind.unknown) & set(PD_FINDING_TYPES)


def test_a_pd_fleet_names_why_each_pd_diagnosis_is_unknown() -> None:
    blind = diagnose(None, fleet(bootstrap=None, routers=()), DiagnosticsSpec(), "no Prometheus URL")
    unknown = dict(blind.unknown)
    assert unknown["RendezvousFailures"] == unknown["HandoffStuck"] == "no Prometheus URL"
    assert "bootstrap server was probed" in unknown["BootstrapUnreachable"]
    assert "worker list" in unknown["RoleSkew"]
    assert "RoleUnavailable" not in unknown


def test_a_pd_finding_goes_through_hysteresis_and_is_held_while_its_probe_is_unknown() -> None:
    spec = DiagnosticsSpec()
    failing, unknown = fleet(bootstrap=(REFUSED,)), fleet(bootstrap=None)
    status: Any = None
    reported = []
    for facts in (failing, failing, unknown, failing, unknown, fleet(), fleet(), fleet()):
        evolution = evolve(status, diagnose(metrics(), facts, spec), 3, 3, "2027-01-15T08:00:00Z")
        status = evolution.status
        reported.append([(f["type"], f["pod"]) for f in status["findings"]])
    held = [("BootstrapUnreachable", PREFILL)]
    assert reported == [[], [], [], held, held, held, held, []]  # seen 2, held, seen 3rd: up; held, missed 3: down


def test_status_accepts_every_finding_type_and_the_new_threshold_is_bounded() -> None:
    assert set(PD_FINDING_TYPES) <= set(FINDING_TYPES)
    for kind in FINDING_TYPES:
        DiagnosticFinding.model_validate({"type": kind, "evidence": "e", "action": "a", "since": "t"})
    with pytest.raises(ValidationError):
        DiagnosticThresholds.model_validate({"preallocQueueGrowth": 0.5})
    assert DiagnosticThresholds.model_validate({"preallocQueueGrowth": 8}).prealloc_queue_growth == 8
