"""The diagnoses as pure functions: literals in, candidates out; no finding without evidence."""

import math
from typing import Any

import pytest

from sglang_operator.api.diagnostics import DiagnosticsSpec, DiagnosticThresholds
from sglang_operator.doctor.diagnose import (
    cache_hit_spread,
    diagnose,
    load_imbalance,
    scale_ups,
    slow_replicas,
    slow_scale_up,
    slow_starts,
)
from sglang_operator.doctor.model import FleetFacts, PodFacts, ReplicaMetrics, RouterView, ScaleUp

NOW = 1_800_000_000.0
TH = DiagnosticThresholds()


def pod(i: int, **kw: Any) -> PodFacts:
    values: dict[str, Any] = {
        "name": f"chat-abc-{i}-0", "replica": str(i), "rank": 0, "node": f"node-{i}", "created": NOW - 3600,
        "scheduled": NOW - 3599, "started": NOW - 3598, "ready": True, "ready_since": NOW - 3500,
    }  # fmt: skip
    values.update(kw)
    return PodFacts(**values)


def fleet(*pods: PodFacts, **kw: Any) -> FleetFacts:
    policy = kw.pop("policy", "round_robin")
    return FleetFacts(now=NOW, pods=pods or tuple(pod(i) for i in range(3)), policy=policy, **kw)


def per_pod(*values: float) -> dict[str, float]:
    return {f"chat-abc-{i}-0": v for i, v in enumerate(values)}


def metrics(**kw: Any) -> ReplicaMetrics:
    base: dict[str, Any] = {"window_seconds": 300, "requests": per_pod(100, 100, 100)}
    base.update(kw)
    return ReplicaMetrics(**base)


# -- load imbalance --------------------------------------------------------------------------------------------------
def test_a_replica_holding_four_times_the_others_load_under_round_robin_is_reported() -> None:
    found = load_imbalance(metrics(load=per_pod(1.0, 4.2, 1.1)), fleet(), TH)
    assert found is not None and [(c.type, c.subject, c.replica) for c in found] == [
        ("LoadImbalance", "chat-abc-1-0", "1")
    ]
    assert "4.2 requests running + queued" in found[0].evidence and "round_robin" in found[0].evidence
    assert "least_load" in found[0].action


def test_even_load_and_idle_fleets_report_nothing() -> None:
    assert load_imbalance(metrics(load=per_pod(2.0, 2.5, 1.8)), fleet(), TH) == []
    assert load_imbalance(metrics(load=per_pod(0.05, 0.6, 0.04)), fleet(), TH) == []  # 12x, but < minLoad apart


def test_cache_aware_spread_within_the_routers_balance_thresholds_is_by_design() -> None:
    loads = metrics(load=per_pod(1.0, 40.0, 1.0))
    assert load_imbalance(loads, fleet(policy="cache_aware"), TH) == []
    found = load_imbalance(metrics(load=per_pod(1.0, 80.0, 1.0)), fleet(policy="cache_aware"), TH)
    assert found is not None and [c.subject for c in found] == ["chat-abc-1-0"]
    assert "--balance-abs-threshold 64" in found[0].action
    tuned = fleet(policy="cache_aware", balance_abs_threshold=8.0)
    assert [c.subject for c in load_imbalance(loads, tuned, TH) or []] == ["chat-abc-1-0"]


def test_a_ready_replica_a_router_does_not_list_or_marks_unhealthy_is_reported_even_without_metrics() -> None:
    urls = {f"chat-abc-{i}-0": f"http://10.0.0.{i}:30000" for i in range(3)}
    routers = (RouterView("r1", {urls["chat-abc-0-0"]: True, urls["chat-abc-1-0"]: False}), RouterView("r2", None))
    found = load_imbalance(None, fleet(routers=routers, pod_urls=urls), TH)
    assert found is not None
    assert {c.subject: c.evidence for c in found} == {
        "chat-abc-1-0": "Ready but marked unhealthy by router pod(s) r1: it gets no requests from them; router "
        "policy round_robin, sticky sessions off",
        "chat-abc-2-0": "Ready but not listed by router pod(s) r1: it gets no requests from them; router policy "
        "round_robin, sticky sessions off",
    }
    assert load_imbalance(None, fleet(), TH) is None  # nothing known: unknown, not healthy


def test_replicas_of_different_worker_groups_are_not_compared() -> None:
    pods = (pod(0, group="tp4"), pod(1, group="tp2"), pod(2, group="tp2"))
    assert load_imbalance(metrics(load=per_pod(8.0, 1.0, 1.2)), fleet(*pods), TH) == []


# -- slow replicas ---------------------------------------------------------------------------------------------------
def test_a_replica_with_four_times_the_inter_token_latency_is_slow_with_its_node_and_gpu() -> None:
    gpu = {"chat-abc-0-0": "NVIDIA H200", "chat-abc-1-0": "NVIDIA H200", "chat-abc-2-0": "NVIDIA H200"}
    found = slow_replicas(metrics(itl=per_pod(0.010, 0.041, 0.011), gpu_model=gpu), fleet(), TH)
    assert found is not None and [(c.subject, c.node) for c in found] == [("chat-abc-1-0", "node-1")]
    assert "inter-token latency 41 ms vs 10.5 ms median of the other replicas (3.9x)" in found[0].evidence
    assert "node node-1, GPU NVIDIA H200" in found[0].evidence
    assert "node-1" in found[0].action


def test_a_request_count_that_is_not_finite_is_evidence_not_an_exception() -> None:
    """Issue 37: int() of an infinite count raised OverflowError out of the doctor's pass."""
    found = slow_replicas(metrics(itl=per_pod(0.010, 0.041, 0.011), requests=per_pod(100, math.inf, 100)), fleet(), TH)
    assert found is not None and [c.subject for c in found] == ["chat-abc-1-0"]
    assert "over 300s, inf requests" in found[0].evidence


def test_a_slow_replica_on_another_gpu_model_is_told_to_keep_one_model() -> None:
    gpu = {"chat-abc-0-0": "NVIDIA H200", "chat-abc-1-0": "NVIDIA A10G", "chat-abc-2-0": "NVIDIA H200"}
    found = slow_replicas(metrics(itl=per_pod(0.010, 0.041, 0.011), gpu_model=gpu), fleet(), TH) or []
    assert "different GPU model (NVIDIA A10G; the others: NVIDIA H200)" in found[0].action


def test_too_few_requests_small_differences_and_two_fast_replicas_are_no_evidence() -> None:
    few = metrics(itl=per_pod(0.010, 0.041, 0.011), requests=per_pod(100, 5, 100))
    assert slow_replicas(few, fleet(), TH) == []
    assert slow_replicas(metrics(ttft=per_pod(0.001, 0.004, 0.001)), fleet(), TH) == []  # 4x but 3 ms apart
    assert slow_replicas(metrics(itl=per_pod(0.010, 0.013, 0.011)), fleet(), TH) == []
    assert slow_replicas(metrics(), fleet(), TH) is None


def test_a_slow_first_token_that_a_cold_cache_explains_is_left_to_the_cache_diagnosis() -> None:
    cold = per_pod(0.9, 0.9, 0)
    readings = metrics(ttft=per_pod(0.02, 0.02, 0.2), itl=per_pod(0.01, 0.01, 0.01), cache_hit_rate=cold)
    assert slow_replicas(readings, fleet(), TH) == []
    warm = metrics(ttft=per_pod(0.02, 0.02, 0.2), cache_hit_rate=per_pod(0.9, 0.9, 0.88))
    assert [c.subject for c in slow_replicas(warm, fleet(), TH) or []] == ["chat-abc-2-0"]


def test_in_a_fleet_of_two_the_slow_one_is_measured_against_the_healthy_one() -> None:
    two = fleet(pod(0), pod(1))
    found = slow_replicas(metrics(itl={"chat-abc-0-0": 0.01, "chat-abc-1-0": 0.04}), two, TH) or []
    assert [c.subject for c in found] == ["chat-abc-1-0"]


def test_draining_and_not_ready_replicas_are_not_compared() -> None:
    pods = (pod(0), pod(1, serving=False), pod(2, ready=False, ready_since=None))
    assert slow_replicas(metrics(itl=per_pod(0.01, 0.04, 0.04)), fleet(*pods), TH) == []


# -- cache-hit spread ------------------------------------------------------------------------------------------------
def test_a_cold_replica_under_round_robin_is_told_about_the_policy() -> None:
    found = cache_hit_spread(metrics(cache_hit_rate=per_pod(0.85, 0.8, 0.0)), fleet(), TH)
    assert found is not None and [c.subject for c in found] == ["chat-abc-2-0"]
    assert found[0].evidence == (
        "prefix-cache hit rate 0% vs 82% median of the other replicas over 300s; router policy round_robin, "
        "sticky sessions off"
    )
    assert "--disable-radix-cache" in found[0].action and "router.policy: cache_aware" in found[0].action


def test_under_cache_aware_without_sticky_sessions_the_action_names_them() -> None:
    found = cache_hit_spread(metrics(cache_hit_rate=per_pod(0.85, 0.8, 0.1)), fleet(policy="cache_aware"), TH) or []
    assert "stickySessions" in found[0].action and "router.policy" not in found[0].action


def test_close_hit_rates_and_unknown_rates_report_nothing() -> None:
    assert cache_hit_spread(metrics(cache_hit_rate=per_pod(0.85, 0.8, 0.6)), fleet(), TH) == []
    assert cache_hit_spread(metrics(), fleet(), TH) is None


# -- slow starts -----------------------------------------------------------------------------------------------------
def test_a_slow_start_is_split_into_its_phases_and_blames_the_longest() -> None:
    slow = pod(1, created=NOW - 500, scheduled=NOW - 498, started=NOW - 490, ready_since=NOW - 100)
    found = slow_starts(fleet(pod(0), slow), TH, window=600)
    assert [c.subject for c in found] == ["chat-abc-1-0"]
    assert found[0].evidence == (
        "became Ready after 400s from pod creation (threshold 300s): scheduling 2s, image pull + container start "
        "8s, weight load + warm-up 390s; model cache emptyDir; node node-1"
    )
    assert "persistentVolumeClaim or hostPath" in found[0].action
    scheduling = pod(1, created=NOW - 500, scheduled=NOW - 150, started=NOW - 140, ready_since=NOW - 100)
    assert "free GPUs" in slow_starts(fleet(scheduling), TH, 600)[0].action
    pvc = slow_starts(fleet(slow, cache_type="persistentVolumeClaim"), TH, 600)
    assert "read throughput" in pvc[0].action


def test_a_slow_start_is_reported_for_a_window_after_ready_and_while_still_starting() -> None:
    old = pod(1, created=NOW - 1500, scheduled=NOW - 1499, started=NOW - 1498, ready_since=NOW - 1000)
    assert slow_starts(fleet(old), TH, window=600) == []
    starting = pod(2, created=NOW - 400, scheduled=NOW - 399, started=NOW - 398, ready=False, ready_since=None)
    found = slow_starts(fleet(starting), TH, window=600)
    assert found[0].evidence.startswith("not Ready after 400s from pod creation")


def test_a_restarted_pod_is_measured_from_its_last_start() -> None:
    restarted = pod(1, created=NOW - 5000, started=NOW - 100, ready_since=NOW - 50, restarts=2)
    assert slow_starts(fleet(restarted), TH, 600) == []


# -- slow scale-up ---------------------------------------------------------------------------------------------------
def test_a_scale_up_whose_replicas_took_longer_than_the_threshold_is_slow() -> None:
    th = DiagnosticThresholds(slow_scale_up_seconds=60)
    new = pod(1, created=NOW - 200, scheduled=NOW - 199, started=NOW - 198, ready_since=NOW - 90)
    facts = fleet(pod(0), new, scale_ups=(ScaleUp(NOW - 201, 1, 2),), ready_replicas=2)
    found = slow_scale_up(facts, th, window=600)
    assert [(c.type, c.subject) for c in found] == [("SlowScaleUp", "")]
    assert "its 1 new replica(s) were Ready 111s after the decision" in found[0].evidence
    assert "warmReplicas" in found[0].action and "startupSeconds to about 110s" in found[0].action


def test_a_fast_scale_up_after_a_slow_one_clears_it_and_an_old_one_is_forgotten() -> None:
    th = DiagnosticThresholds(slow_scale_up_seconds=60)
    pods = (pod(0), pod(1, created=NOW - 200, ready_since=NOW - 90), pod(2, created=NOW - 30, ready_since=NOW - 25))
    ups = (ScaleUp(NOW - 201, 1, 2), ScaleUp(NOW - 31, 2, 3))
    assert slow_scale_up(fleet(*pods, scale_ups=ups, ready_replicas=3), th, 600) == []
    assert slow_scale_up(fleet(*pods[:2], scale_ups=ups[:1], ready_replicas=2), th, window=60) == []


def test_a_scale_up_still_waiting_past_the_threshold_is_slow() -> None:
    th = DiagnosticThresholds(slow_scale_up_seconds=60)
    waiting = pod(1, created=NOW - 100, ready=False, ready_since=None)
    found = slow_scale_up(fleet(pod(0), waiting, scale_ups=(ScaleUp(NOW - 101, 1, 2),), ready_replicas=1), th, 600)
    assert "0 of its 1 new replica(s) Ready 101s after the decision" in found[0].evidence


def test_scale_ups_are_read_from_the_autoscaler_history() -> None:
    history = [
        {"time": "2027-01-15T08:00:00Z", "replicas": 1},
        {"time": "2027-01-15T08:05:00Z", "replicas": 3},
        {"time": "2027-01-15T08:10:00Z", "replicas": 2},
        {"time": "bad", "replicas": 9},
        {"time": "2027-01-15T08:20:00Z", "replicas": 4},
    ]
    ups = scale_ups(history, recommend_only=False)
    assert [(u.before, u.after) for u in ups] == [(1, 3), (2, 4)]
    assert scale_ups(history, recommend_only=True) == ()
    assert scale_ups("nonsense", recommend_only=False) == ()


# -- all together ----------------------------------------------------------------------------------------------------
def test_a_healthy_fleet_has_no_candidates_and_unknown_inputs_are_named() -> None:
    healthy = metrics(
        load=per_pod(2.0, 2.1, 1.9),
        itl=per_pod(0.010, 0.011, 0.010),
        ttft=per_pod(0.02, 0.021, 0.02),
        cache_hit_rate=per_pod(0.8, 0.82, 0.79),
    )
    assert diagnose(healthy, fleet(), DiagnosticsSpec()).candidates == ()
    blind = diagnose(None, fleet(), DiagnosticsSpec(), "no Prometheus URL")
    assert blind.candidates == ()
    assert dict(blind.unknown) == dict.fromkeys(("LoadImbalance", "SlowReplica", "CacheHitSpread"), "no Prometheus URL")


@pytest.mark.parametrize("field", ["loadImbalanceRatio", "slowReplicaRatio", "minRequests", "slowStartSeconds"])
def test_thresholds_are_bounded(field: str) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        DiagnosticThresholds.model_validate({field: 10**9})
