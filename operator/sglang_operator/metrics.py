"""The operator's own metrics (prometheus_client), exported at `/metrics` by `sglang-operator run --metrics-port`.

One module owns every metric's name, help and labels, so dashboards, alerts and tests read one list. Call sites use
the small functions below, never the metric objects, so a label set stays consistent. Label values are bounded:
`result` and `reason` come from fixed vocabularies, never from free text (an error message would make one series per
distinct message).
"""

import contextlib

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
LEADER = Gauge(f"{_PREFIX}_leader", "1 while this replica holds the leader Lease, else 0.", registry=REGISTRY)


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


def autoscaler_decided(namespace: str, name: str, replicas: int, mode: str) -> None:
    AUTOSCALER_DESIRED.labels(namespace=namespace, name=name).set(replicas)
    AUTOSCALER_DECISIONS.labels(mode=mode or "unknown").inc()


def forget_deployment(namespace: str, name: str) -> None:
    """Drop a deleted CR's per-deployment series, so hundreds of short-lived fleets leave none behind."""
    with contextlib.suppress(KeyError):
        AUTOSCALER_DESIRED.remove(namespace, name)


def count_api_request(verb: str, code: int | str) -> None:
    API_REQUESTS.labels(verb=verb.lower(), code=str(code)).inc()
