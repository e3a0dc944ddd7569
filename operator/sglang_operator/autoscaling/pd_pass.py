"""The autoscaling pass of a prefill/decode fleet: the roles as the policy sees them, their readings, the decision
(`roles.decide_pd`) and what it writes to `status.autoscaler`. `autoscale_pass.autoscale_once` calls it for a fleet
with `spec.disaggregation`, and writes what it returns as it writes a colocated fleet's decision.

Status: `groups` is the split per group (what the reconciler follows, unless `recommendOnly`), `roles` each role's
replicas, the signal that decided and the reason, `desiredReplicas` the groups' replicas together, and `state.roles`
each role's memory (its recent recommendations, as a colocated fleet's `state`).
"""

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kubernetes import client

from ..api.groups import worker_groups
from ..api.spec import AutoscalingSpec, Role, SGLangDeploymentSpec
from ..desired import group_targets
from ..prometheus.access import prometheus_access
from ..prometheus.roles import ROLES, PdReading, RoleReading, fetch_role_samples
from ..settings import OperatorSettings
from ..topology import topology
from .fleet_split import group_fleet_state
from .roles import PdDecision, RoleFleet, decide_pd, role_shapes
from .signals import Decision, Mode, Recommendation, history_from_state, history_to_state

HISTORY_LENGTH = 20


@dataclass(frozen=True)
class PdPass:
    """What one pass decided: the summary `autoscale_once` reports and logs, and the status to write."""

    decision: Decision
    status: dict[str, Any]
    error: str | None
    """What Prometheus did not answer, for `MetricsAvailable` (None: every role read)."""


def pd_fleets(spec: SGLangDeploymentSpec, status: Mapping[str, Any]) -> dict[Role, RoleFleet]:
    """Each role's groups, in units of its first group's replica, counted from the replicas the reconciler follows
    now (`group_targets`: the autoscaler's split, or the spec's counts when it only recommends) and status."""
    groups = worker_groups(spec)
    targets = {name: active for name, (active, _) in group_targets(spec, status, groups=groups).items()}
    fleets = {}
    for role in ROLES:
        mine = [g for g in groups if g.role == role]
        shapes, rate = role_shapes(mine, spec.autoscaling)
        fleets[role] = RoleFleet(
            role=role,
            shapes=shapes,
            current=group_fleet_state(shapes, targets, status),
            concurrency=max(1, topology(mine[0].spec).concurrency_per_replica),
            prefill_rate=rate,
        )
    return fleets


def role_memory(state: Mapping[str, Any] | None) -> dict[Role, tuple[Recommendation, ...]]:
    """Each role's memory from `status.autoscaler.state.roles`; anything malformed is dropped."""
    roles = (state or {}).get("roles")
    roles = roles if isinstance(roles, dict) else {}
    return {role: history_from_state(r if isinstance(r := roles.get(role), dict) else None) for role in ROLES}


def read_pd_metrics(
    core: client.CoreV1Api,
    namespace: str,
    name: str,
    autoscaling: AutoscalingSpec,
    now: float,
    settings: OperatorSettings,
) -> PdReading:
    """Both roles' readings through the same gate as a colocated fleet's (`prometheus_access`)."""
    url, credentials, error = prometheus_access(core, namespace, autoscaling, settings)
    if url is None or credentials is None:
        return PdReading({role: RoleReading(None, error) for role in ROLES})
    return fetch_role_samples(url, namespace, name, autoscaling, now, credentials=credentials)


def pd_pass(
    core: client.CoreV1Api,
    settings: OperatorSettings,
    namespace: str,
    name: str,
    spec: SGLangDeploymentSpec,
    previous_status: Mapping[str, Any],
    now: datetime,
) -> PdPass:
    """Read, decide, and the status to write."""
    previous = previous_status.get("autoscaler") or {}
    reading = read_pd_metrics(core, namespace, name, spec.autoscaling, now.timestamp(), settings)
    samples = {role: reading.roles[role].samples for role in ROLES}
    fleets = pd_fleets(spec, previous_status)
    decision = decide_pd(fleets, samples, spec.autoscaling, role_memory(previous.get("state")), now.timestamp())
    summary = summarise(decision)
    status = pd_autoscaler_status(previous, decision, summary, reading.qps, now, spec.autoscaling.recommend_only)
    errors = [
        reading.roles[role].error or f"{role}: {decision.roles[role].reason}"
        for role in ROLES
        if reading.roles[role].error or not decision.roles[role].metrics_available
    ]
    return PdPass(summary, status, "; ".join(errors) or None)


def summarise(decision: PdDecision) -> Decision:
    """The decision as one fleet's: its replicas the groups' together, its reason both roles', its mode the most
    urgent role's, its metrics available only when both roles read."""
    roles = decision.roles
    modes = {d.mode for d in roles.values()}
    mode: Mode = "panic" if "panic" in modes else "normal" if "normal" in modes else "hold"
    total = sum(decision.groups.values())
    return Decision(
        replicas=total,
        reason="; ".join(f"{role}: {roles[role].reason}" for role in ROLES),
        mode=mode,
        recommendation=total,
        metrics_available=all(d.metrics_available for d in roles.values()),
    )


def _fmt(value: float) -> str:
    return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"


def pd_autoscaler_status(
    previous: Mapping[str, Any],
    decision: PdDecision,
    summary: Decision,
    qps: float | None,
    now: datetime,
    recommend_only: bool,
) -> dict[str, Any]:
    """`status.autoscaler` of a disaggregated fleet (the colocated one's fields, plus `roles`)."""
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    scaled = decision.groups != previous.get("groups") or summary.replicas != previous.get("desiredReplicas")
    history = list(previous.get("history") or [])
    if scaled or not history:
        history.append({"time": stamp, "replicas": summary.replicas, "reason": summary.reason, "mode": summary.mode})
    observed = {} if qps is None else {"qps": _fmt(qps)}
    if decision.prefill_share is not None:
        observed["prefillGPUShare"] = _fmt(decision.prefill_share)
    return {
        "desiredReplicas": summary.replicas,
        "recommendOnly": recommend_only,  # always written: a merge patch keeps a key it does not name
        "warmReplicas": 0,
        "lastScaleTime": stamp if scaled else previous.get("lastScaleTime", stamp),
        "reason": summary.reason,
        "mode": summary.mode,
        "observed": observed,
        "history": history[-HISTORY_LENGTH:],
        "state": {"roles": {role: history_to_state(decision.roles[role].history) for role in ROLES}},
        "groups": decision.groups,
        "roles": {
            role: {
                "desiredReplicas": decision.replicas[role],
                "signal": d.signal,
                "reason": d.reason,
                "mode": d.mode,
                "observed": {key: _fmt(value) for key, value in d.observed.items()},
            }
            for role, d in decision.roles.items()
        },
    }


def pd_scale_event(
    previous: Mapping[str, Any], status: Mapping[str, Any], recommend_only: bool
) -> tuple[str, str] | None:
    """(reason, message) of the event for a changed split, or None when no group's count changed."""
    after: dict[str, int] = status["groups"]
    if previous.get("groups") == after:
        return None
    roles = status["roles"]
    was = previous.get("roles")
    was = was if isinstance(was, dict) else {}
    counts = ", ".join(
        f"{role} {(was.get(role) or {}).get('desiredReplicas', '?')} -> {roles[role]['desiredReplicas']}"
        for role in ROLES
    )
    if recommend_only:
        return (
            "AutoscalerRecommendation",
            f"recommends {counts} (the groups' replicas set the count): {status['reason']}",
        )
    return "Autoscaled", f"desired replicas {counts}: {status['reason']}"
