"""The operator's own metrics (prometheus_client), exported at `/metrics` by `sglang-operator run --metrics-port`.

One module owns every metric's name, help and labels, so dashboards, alerts and tests read one list. Call sites use
the small functions below, never the metric objects, so a label set stays consistent. Label values are bounded:
`result` and `reason` come from fixed vocabularies, never from free text (an error message would make one series per
distinct message).
"""

import contextlib
from collections.abc import Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

REGISTRY = CollectorRegistry(auto_describe=True)
_PREFIX = "sglang_operator"

RECONCILE_SECONDS = Histogram(
    f"{_PREFIX}_reconcile_duration_seconds",
    "Duration of one reconcile pass of one SGLangDeployment.",
    ["result"],  # ok | error | invalid
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
    registry=REGISTRY,
)
RECONCILE_ERRORS = Counter(
    f"{_PREFIX}_reconcile_errors_total",
    "Failed reconcile steps, by reason (ReconcileError, NameCollision, PolicyViolation, InvalidSpec, ...).",
    ["reason"],
    registry=REGISTRY,
)
QUEUE_DEPTH = Gauge(
    f"{_PREFIX}_workqueue_depth", "Reconcile passes waiting for a worker of the shared pool.", registry=REGISTRY
)
QUEUE_WAIT_SECONDS = Histogram(
    f"{_PREFIX}_workqueue_wait_seconds",
    "Time a pass waited for a worker of the shared pool.",
    buckets=(0.001, 0.01, 0.05, 0.1, 0.5, 1, 2, 5, 10, 30),
    registry=REGISTRY,
)
ROUTER_OPERATIONS = Counter(
    f"{_PREFIX}_router_operations_total",
    "Worker registrations and deregistrations sent to router pods, by operation (register | deregister) and "
    "result (ok | failed).",
    ["operation", "result"],
    registry=REGISTRY,
)
DRAINS = Counter(
    f"{_PREFIX}_drains_total",
    "Replica drains, by event (started | completed | timed_out).",
    ["event"],
    registry=REGISTRY,
)
DRAIN_SECONDS = Histogram(
    f"{_PREFIX}_drain_duration_seconds",
    "From a replica's drain start to its deletion.",
    ["result"],  # completed | timed_out
    buckets=(1, 5, 10, 30, 60, 120, 300, 600, 1800),
    registry=REGISTRY,
)
AUTOSCALER_DESIRED = Gauge(
    f"{_PREFIX}_autoscaler_desired_replicas",
    "The autoscaler's latest decision per SGLangDeployment.",
    ["namespace", "name"],
    registry=REGISTRY,
)
AUTOSCALER_DECISIONS = Counter(
    f"{_PREFIX}_autoscaler_decisions_total",
    "Autoscaler decisions, by mode (the policy's rule that decided: steady, bursty, panic, hold, ...).",
    ["mode"],
    registry=REGISTRY,
)
API_REQUESTS = Counter(
    f"{_PREFIX}_kubernetes_requests_total",
    "Requests the operator sent to the Kubernetes API, by verb and HTTP status code.",
    ["verb", "code"],
    registry=REGISTRY,
)
DIAGNOSTIC_FINDINGS = Gauge(
    f"{_PREFIX}_diagnostic_findings",
    "Findings the fleet doctor reports per SGLangDeployment, by type (LoadImbalance, SlowReplica, CacheHitSpread, "
    "SlowStart, SlowScaleUp; in a prefill/decode fleet BootstrapUnreachable, RendezvousFailures, RoleSkew, "
    "RoleUnavailable, HandoffStuck).",
    ["namespace", "name", "type"],
    registry=REGISTRY,
)
LEADER = Gauge(f"{_PREFIX}_leader", "1 while this replica holds the leader Lease, else 0.", registry=REGISTRY)
FLEET_REPLICAS = Gauge(
    f"{_PREFIX}_fleet_replicas",
    "Replicas of one SGLangDeployment as its last reconcile pass saw them, by state (desired | serving | ready | "
    "updated | registered): what its status reports, for alerts and dashboards.",
    ["namespace", "name", "state"],
    registry=REGISTRY,
)
FLEET_ROLE_REPLICAS = Gauge(
    f"{_PREFIX}_fleet_role_replicas",
    "Replicas of each role (prefill | decode) of a prefill/decode SGLangDeployment, by state (desired | ready), "
    "summed over the role's worker groups: a role with none ready fails every request.",
    ["namespace", "name", "role", "state"],
    registry=REGISTRY,
)
FLEET_CONDITION = Gauge(
    f"{_PREFIX}_fleet_condition",
    "1 while the SGLangDeployment's condition (Ready, Progressing, Degraded, RouterSynced, MetricsAvailable) is "
    "True, 0 while it is False.",
    ["namespace", "name", "condition"],
    registry=REGISTRY,
)
AUTOSCALER_RECOMMENDED = Gauge(
    f"{_PREFIX}_autoscaler_recommended_replicas",
    "What the signals alone ask for, before stabilisation, step limits and bounds, per SGLangDeployment.",
    ["namespace", "name"],
    registry=REGISTRY,
)
AUTOSCALER_LIMIT = Gauge(
    f"{_PREFIX}_autoscaler_limit_replicas",
    "The autoscaler's upper bound on serving replicas, by bound (maxReplicas, or maxGPUs / GPUs per replica).",
    ["namespace", "name", "bound"],
    registry=REGISTRY,
)
_CONDITIONS = ("Ready", "Progressing", "Degraded", "RouterSynced", "MetricsAvailable")
_FLEET_STATES = {
    "serving": "replicas",
    "ready": "readyReplicas",
    "updated": "updatedReplicas",
    "registered": "registeredWorkers",
}


def observe_pass(seconds: float, result: str) -> None:
    RECONCILE_SECONDS.labels(result=result).observe(seconds)


def count_error(reason: str) -> None:
    RECONCILE_ERRORS.labels(reason=reason).inc()


def count_router_operation(operation: str, ok: bool) -> None:
    ROUTER_OPERATIONS.labels(operation=operation, result="ok" if ok else "failed").inc()


def drain_started() -> None:
    DRAINS.labels(event="started").inc()


def drain_finished(seconds: float, timed_out: bool) -> None:
    result = "timed_out" if timed_out else "completed"
    DRAINS.labels(event=result).inc()
    DRAIN_SECONDS.labels(result=result).observe(seconds)


def autoscaler_decided(
    namespace: str,
    name: str,
    replicas: int,
    mode: str,
    recommendation: int | None = None,
    limits: Mapping[str, int] | None = None,
) -> None:
    """One decision; `recommendation` (the signals' count before bounds) and `limits` (bound -> replicas:
    `maxReplicas`, and `maxGPUs` when set) let an alert tell a fleet capped by its bounds."""
    AUTOSCALER_DESIRED.labels(namespace=namespace, name=name).set(replicas)
    AUTOSCALER_DECISIONS.labels(mode=mode or "unknown").inc()
    if recommendation is not None:
        AUTOSCALER_RECOMMENDED.labels(namespace=namespace, name=name).set(recommendation)
    for bound in ("maxReplicas", "maxGPUs"):
        if limits is not None and bound in limits:
            AUTOSCALER_LIMIT.labels(namespace=namespace, name=name, bound=bound).set(limits[bound])
        else:
            with contextlib.suppress(KeyError):
                AUTOSCALER_LIMIT.remove(namespace, name, bound)


def fleet_status(namespace: str, name: str, status: Mapping[str, Any]) -> None:
    """Record a pass's status of one SGLangDeployment: the replica counts it has (desired is the denominator of
    `status.ready`, "ready/desired") and its conditions. A failed pass's status carries conditions only: the
    counts keep their last values, as the CR's status does."""
    ready = str(status.get("ready") or "")
    counts = {state: status.get(key) for state, key in _FLEET_STATES.items()}
    if ready.partition("/")[2].isdigit():
        counts["desired"] = int(ready.partition("/")[2])
    for state, value in counts.items():
        if isinstance(value, int) and not isinstance(value, bool):
            FLEET_REPLICAS.labels(namespace=namespace, name=name, state=state).set(value)
    for (role, state), value in _role_counts(status).items():
        FLEET_ROLE_REPLICAS.labels(namespace=namespace, name=name, role=role, state=state).set(value)
    for cond in status.get("conditions") or []:
        if isinstance(cond, Mapping) and cond.get("status") in ("True", "False") and cond.get("type") in _CONDITIONS:
            FLEET_CONDITION.labels(namespace=namespace, name=name, condition=cond["type"]).set(
                1 if cond["status"] == "True" else 0
            )


_ROLES = ("prefill", "decode")


def _role_counts(status: Mapping[str, Any]) -> dict[tuple[str, str], int]:
    """(role, desired | ready) -> replicas over the role's groups (`status.groups[].role`); empty for a colocated
    fleet."""
    counts: dict[tuple[str, str], int] = {}
    for group in status.get("groups") or []:
        role = group.get("role") if isinstance(group, Mapping) else None
        if role not in _ROLES:
            continue
        for state, key in (("desired", "desiredReplicas"), ("ready", "readyReplicas")):
            value = group.get(key)
            if isinstance(value, int) and not isinstance(value, bool):
                counts[(role, state)] = counts.get((role, state), 0) + value
    return counts


def forget_deployment(namespace: str, name: str) -> None:
    """Drop the autoscaler's series of a CR whose autoscaler stopped (deleted, or autoscaling switched off), so
    hundreds of short-lived fleets leave none behind."""
    for gauge, rest in ((AUTOSCALER_DESIRED, [()]), (AUTOSCALER_RECOMMENDED, [()]),
                        (AUTOSCALER_LIMIT, [("maxReplicas",), ("maxGPUs",)])):  # fmt: skip
        for labels in rest:
            with contextlib.suppress(KeyError):
                gauge.remove(namespace, name, *labels)


def forget_fleet(namespace: str, name: str) -> None:
    """Drop a CR's fleet series when its reconcile loop stops (the CR was deleted, or this replica stopped leading:
    only the leader reports fleets)."""
    for state in ("desired", *_FLEET_STATES):
        with contextlib.suppress(KeyError):
            FLEET_REPLICAS.remove(namespace, name, state)
    for role in _ROLES:
        for state in ("desired", "ready"):
            with contextlib.suppress(KeyError):
                FLEET_ROLE_REPLICAS.remove(namespace, name, role, state)
    for cond in _CONDITIONS:
        with contextlib.suppress(KeyError):
            FLEET_CONDITION.remove(namespace, name, cond)


def count_api_request(verb: str, code: int | str) -> None:
    API_REQUESTS.labels(verb=verb.lower(), code=str(code)).inc()


def diagnostic_findings(namespace: str, name: str, kind: str, count: int) -> None:
    """The fleet doctor's reported findings of one type for one SGLangDeployment."""
    DIAGNOSTIC_FINDINGS.labels(namespace=namespace, name=name, type=kind).set(count)


def forget_diagnostics(namespace: str, name: str, kinds: tuple[str, ...]) -> None:
    """Drop a fleet's finding series when its doctor stops (CR deleted or diagnostics disabled)."""
    for kind in kinds:
        with contextlib.suppress(KeyError):
            DIAGNOSTIC_FINDINGS.remove(namespace, name, kind)
