"""The operator's per-fleet series (operator/sglang_operator/metrics.py) that the alerts and the dashboard read: a
pass's status becomes replica counts and condition values, a failed pass keeps the counts, and a stopped loop or
autoscaler drops its series."""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from sglang_operator import metrics


def series(prefix: str, **labels: str) -> dict[tuple[tuple[str, str], ...], float]:
    text = generate_latest(metrics.REGISTRY).decode()
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.startswith(prefix) and labels.items() <= sample.labels.items():
                found[tuple(sorted(sample.labels.items()))] = sample.value
    return found


def condition(type_: str, status: str) -> dict[str, str]:
    return {"type": type_, "status": status, "reason": "r", "message": "m"}


def test_a_pass_status_becomes_counts_and_conditions() -> None:
    metrics.forget_fleet("team-a", "chat")  # the registry is process-wide: other tests' passes of team-a/chat
    status = {
        "replicas": 3, "readyReplicas": 2, "updatedReplicas": 3, "registeredWorkers": 2, "ready": "2/4",
        "conditions": [condition("Ready", "False"), condition("Degraded", "True"), condition("Custom", "True")],
    }  # fmt: skip
    metrics.fleet_status("team-a", "chat", status)
    counts = {dict(k)["state"]: v for k, v in series("sglang_operator_fleet_replicas", name="chat").items()}
    assert counts == {"desired": 4, "serving": 3, "ready": 2, "updated": 3, "registered": 2}
    conditions = {dict(k)["condition"]: v for k, v in series("sglang_operator_fleet_condition", name="chat").items()}
    assert conditions == {"Ready": 0, "Degraded": 1}  # only the operator's own condition types

    # A failed pass: conditions only; the counts stay as they were.
    metrics.fleet_status("team-a", "chat", {"conditions": [condition("Ready", "True")]})
    assert series("sglang_operator_fleet_replicas", name="chat", state="ready")
    assert list(series("sglang_operator_fleet_condition", name="chat", condition="Ready").values()) == [1]

    metrics.forget_fleet("team-a", "chat")
    assert not series("sglang_operator_fleet_", name="chat")


def test_a_pd_fleets_roles_are_counted_each() -> None:
    """A role with no ready replica fails every request even while the fleet's totals look healthy."""
    metrics.forget_fleet("team-a", "pd")
    groups = [
        {"name": "p", "role": "prefill", "desiredReplicas": 1, "readyReplicas": 0},
        {"name": "d", "role": "decode", "desiredReplicas": 2, "readyReplicas": 2},
        {"name": "d2", "role": "decode", "desiredReplicas": 1, "readyReplicas": 1},
    ]
    metrics.fleet_status("team-a", "pd", {"ready": "3/4", "groups": groups})
    roles = {(dict(k)["role"], dict(k)["state"]): v for k, v in series("sglang_operator_fleet_role_replicas",
                                                                          name="pd").items()}  # fmt: skip
    assert roles == {("prefill", "desired"): 1, ("prefill", "ready"): 0, ("decode", "desired"): 3,
                     ("decode", "ready"): 3}  # fmt: skip
    metrics.fleet_status("team-a", "colocated", {"ready": "1/1", "groups": [{"name": "a", "desiredReplicas": 1}]})
    assert not series("sglang_operator_fleet_role_replicas", name="colocated")
    metrics.forget_fleet("team-a", "pd")
    assert not series("sglang_operator_fleet_", name="pd")


def test_autoscaler_series_carry_recommendation_and_bounds_and_go_with_the_autoscaler() -> None:
    metrics.autoscaler_decided("team-a", "big", 4, "normal", 6, {"maxReplicas": 10, "maxGPUs": 4})
    limits = {dict(k)["bound"]: v for k, v in series("sglang_operator_autoscaler_limit_replicas", name="big").items()}
    assert limits == {"maxReplicas": 10, "maxGPUs": 4}
    assert list(series("sglang_operator_autoscaler_recommended_replicas", name="big").values()) == [6]
    metrics.autoscaler_decided("team-a", "big", 4, "normal", 6, {"maxReplicas": 10})  # maxGPUs removed from spec
    assert set(dict(k)["bound"] for k in series("sglang_operator_autoscaler_limit_replicas", name="big")) == {
        "maxReplicas"
    }
    metrics.forget_deployment("team-a", "big")
    assert not series("sglang_operator_autoscaler_", name="big", namespace="team-a")
