"""`autoscaling.recommendOnly`: the autoscaler decides and reports, `spec.replicas` keeps the count.

The pieces that make it so are pure: the reconciler's count (`desired_replicas`), the fleet the policy starts from
(`fleet_state`), the status it writes and the event it sends. The local cluster runs the whole mode
(`e2e/tests/test_autoscaling.py::test_recommend_only_reports_and_hands_over`).
"""

from datetime import UTC, datetime
from typing import Any

from sglang_operator.api.constants import ANNOTATION_WARM
from sglang_operator.api.validation import parse_spec
from sglang_operator.autoscaling.autoscale_pass import autoscaler_status, fleet_state, scale_event
from sglang_operator.autoscaling.signals import Decision
from sglang_operator.desired import desired_replicas

NOW = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)


def spec(**autoscaling: Any) -> Any:
    parsed, errors = parse_spec({"model": {"path": "m"}, "replicas": 2, "autoscaling": autoscaling})
    assert not errors and parsed is not None
    return parsed


def body(replicas: int, decided: int | None, ready: int, serving: int) -> dict[str, Any]:
    autoscaler = {} if decided is None else {"desiredReplicas": decided}
    return {
        "spec": {"replicas": replicas},
        "status": {"replicas": serving, "readyReplicas": ready, "autoscaler": autoscaler},
    }


def warm_pod(replica: str) -> dict[str, Any]:
    return {
        "metadata": {"labels": {"sglang.ai/replica": replica}, "annotations": {ANNOTATION_WARM: "true"}},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


def decision(replicas: int) -> Decision:
    return Decision(
        replicas=replicas,
        reason="scaling up 2 -> 5: 100 req/s",
        mode="normal",
        recommendation=replicas,
        metrics_available=True,
        observed={"qps": 100.0},
        warm_replicas=1,
        promote=0,
        history=(),
    )


def test_the_field_parses_and_defaults_to_owning_the_count() -> None:
    assert spec(enabled=True).autoscaling.recommend_only is False
    assert spec(enabled=True, recommendOnly=True).autoscaling.recommend_only is True


def test_reconciler_follows_spec_replicas_and_runs_no_warm_replicas_when_recommending() -> None:
    status = {"autoscaler": {"desiredReplicas": 7, "warmReplicas": 1}}
    assert desired_replicas(spec(enabled=True, maxReplicas=10, warmReplicas=1), status) == (7, 1)
    assert desired_replicas(spec(enabled=True, maxReplicas=10, warmReplicas=1, recommendOnly=True), status) == (2, 0)
    assert desired_replicas(spec(enabled=False), status) == (2, 0)


def test_policy_starts_from_the_fleet_that_runs_when_recommending() -> None:
    cr = body(replicas=2, decided=7, ready=1, serving=2)
    owning = fleet_state(cr, [warm_pod("5")], spec(enabled=True, maxReplicas=10), gpus_per_replica=1, concurrency=32)
    recommending = fleet_state(
        cr, [], spec(enabled=True, maxReplicas=10, recommendOnly=True), gpus_per_replica=1, concurrency=32
    )
    assert (owning.desired, owning.ready, owning.starting, owning.warm) == (7, 1, 1, 1)
    assert (recommending.desired, recommending.ready, recommending.starting, recommending.warm) == (2, 1, 1, 0)


def test_status_marks_the_count_as_a_recommendation_and_clears_the_mark_on_handover() -> None:
    recommended = autoscaler_status({}, decision(5), NOW, recommend_only=True)
    assert recommended["desiredReplicas"] == 5
    assert recommended["recommendOnly"] is True
    assert recommended["history"][-1]["replicas"] == 5
    # Status is merge-patched, so the mark must be written as False (not left out) once the autoscaler owns the count.
    owning = autoscaler_status(recommended, decision(5), NOW)
    assert owning["recommendOnly"] is False
    assert owning["lastScaleTime"] == recommended["lastScaleTime"]


def test_event_says_what_runs_instead_when_recommending() -> None:
    reason, message = scale_event(2, decision(5), running=2, recommend_only=True)
    assert reason == "AutoscalerRecommendation"
    assert message.startswith("recommends 5 replicas (was 2; spec.replicas 2 sets the count): scaling up 2 -> 5")
    reason, message = scale_event(2, decision(5), running=5, recommend_only=False)
    assert (reason, message) == ("Autoscaled", "desired replicas 2 -> 5: scaling up 2 -> 5: 100 req/s")
