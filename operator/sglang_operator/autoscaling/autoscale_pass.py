"""One autoscaling pass for one SGLangDeployment: read metrics and the fleet, decide, write `status.autoscaler`.

The autoscaler never writes `spec` (Git keeps owning it, so ArgoCD sees no drift): the reconciler reads
`status.autoscaler.desiredReplicas`, unless `recommendOnly` makes that count a recommendation beside
`spec.replicas`. The pass writes only when the decision or its memory changed, and uses the object's
resourceVersion so it never overwrites a status the reconciler wrote in between.

Status fields have one owner each: the autoscaler writes `autoscaler`, `qps` (the printer column, from its own
observation) and the `MetricsAvailable` condition; the reconciler writes everything else. Conditions are one list
in a merge patch, so each writer sends the list it read with only its own conditions changed, guarded by the
resourceVersion: a list the other writer changed in between is never sent back.
"""

import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kubernetes import client

from .. import metrics
from ..api.constants import (
    ANNOTATION_WARM,
    COMPONENT_WORKER,
    GROUP,
    LABEL_COMPONENT,
    LABEL_DEPLOYMENT,
    LABEL_REPLICA,
    PLURAL,
    VERSION,
)
from ..api.groups import worker_groups
from ..api.spec import AutoscalingSpec, SGLangDeploymentSpec
from ..api.validation import parse_spec
from ..desired import desired_replicas, group_targets
from ..observed import owned_by
from ..prometheus.access import prometheus_access
from ..prometheus.client import fetch_samples
from ..runtime.conditions import condition, merge_conditions
from ..runtime.kube import API_TIMEOUT
from ..runtime.writer import Writer
from ..settings import OperatorSettings
from ..topology import topology
from .fleet_split import group_fleet_state, shapes, split_capacity, unit_bounds
from .pd_pass import pd_pass, pd_scale_event
from .policy import decide
from .signals import Decision, FleetState, Samples, envelope_from_state, history_from_state, history_to_state

HISTORY_LENGTH = 20
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AutoscalePass:
    decision: Decision | None
    wrote: bool


def _fmt(value: float) -> str:
    return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"


def _warm_ready(pod: dict[str, Any]) -> bool:
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    return (meta.get("annotations") or {}).get(ANNOTATION_WARM) == "true" and any(
        isinstance(c, dict) and c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )


def fleet_state(
    body: dict[str, Any],
    pods: list[dict[str, Any]],
    spec: SGLangDeploymentSpec,
    gpus_per_replica: int,
    concurrency: int,
) -> FleetState:
    """The fleet as the policy sees it. `desired` is the count the reconciler follows (`desired_replicas`, the one
    rule for who owns the count): the autoscaler's last decision when it owns the fleet, `spec.replicas` when it only
    recommends (its decisions do not change the fleet, so the next one must start from the fleet that runs)."""
    status = body.get("status") or {}
    desired, _ = desired_replicas(spec, status)
    warm_ready = {
        ((pod.get("metadata") or {}).get("labels") or {}).get(LABEL_REPLICA) for pod in pods if _warm_ready(pod)
    }
    ready = int(status.get("readyReplicas") or 0)
    serving = int(status.get("replicas") or 0)
    return FleetState(
        desired=desired,
        ready=ready,
        starting=max(serving - ready, 0),
        warm=len(warm_ready),
        gpus_per_replica=gpus_per_replica,
        concurrency_per_replica=concurrency,
    )


def autoscaler_status(
    previous: dict[str, Any], decision: Decision, now: datetime, recommend_only: bool = False
) -> dict[str, Any]:
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    scaled = decision.replicas != previous.get("desiredReplicas")
    history = list(previous.get("history") or [])
    if scaled or not history:
        history.append({"time": stamp, "replicas": decision.replicas, "reason": decision.reason, "mode": decision.mode})
    return {
        "desiredReplicas": decision.replicas,
        "recommendOnly": recommend_only,  # always written: a merge patch keeps a key it does not name
        "warmReplicas": decision.warm_replicas,
        "lastScaleTime": stamp if scaled else previous.get("lastScaleTime", stamp),
        "reason": decision.reason,
        "mode": decision.mode,
        "observed": {key: _fmt(value) for key, value in decision.observed.items()},
        "history": history[-HISTORY_LENGTH:],
        "state": history_to_state(decision.history, decision.envelope),
    }


def autoscale_once(
    api: client.ApiClient,
    settings: OperatorSettings,
    namespace: str,
    name: str,
    now: datetime | None = None,
    body: dict[str, Any] | None = None,
    pods: list[dict[str, Any]] | None = None,
) -> AutoscalePass:
    """One pass. `body` and `pods`: the CR and its pods from the operator's watch caches (the daemon passes them);
    read from the API when not given. A disaggregated fleet is decided per role (`pd_pass`), and written alike."""
    if body is None:
        custom = client.CustomObjectsApi(api)
        body = dict(custom.get_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, name, _request_timeout=API_TIMEOUT))  # fmt: skip
    spec, _ = parse_spec(body.get("spec"))
    if spec is None or not spec.autoscaling.enabled:
        return AutoscalePass(None, False)
    now = now or datetime.now(UTC)
    core = client.CoreV1Api(api)
    if spec.disaggregation is not None:
        outcome = _disaggregated(core, settings, namespace, name, spec, body, now)
    else:
        outcome = _colocated(core, settings, namespace, name, spec, body, pods, now)
    return _write(api, namespace, name, body, outcome, now)


@dataclass(frozen=True)
class _Outcome:
    decision: Decision
    status: dict[str, Any]
    """`status.autoscaler` to write."""
    error: str | None
    event: tuple[str, str] | None
    """The event of a changed decision, if it changed."""


def _disaggregated(
    core: client.CoreV1Api,
    settings: OperatorSettings,
    namespace: str,
    name: str,
    spec: SGLangDeploymentSpec,
    body: dict[str, Any],
    now: datetime,
) -> _Outcome:
    """A prefill/decode fleet's decision: one per role, split across each role's groups (`pd_pass`)."""
    previous_status = body.get("status") or {}
    decided = pd_pass(core, settings, namespace, name, spec, previous_status, now)
    decision, new = decided.decision, decided.status
    limits = {"maxReplicas": sum(g.max_replicas for g in worker_groups(spec))}
    metrics.autoscaler_decided(namespace, name, decision.replicas, decision.mode, None, limits)
    event = pd_scale_event(previous_status.get("autoscaler") or {}, new, spec.autoscaling.recommend_only)
    return _Outcome(decision, new, decided.error, event)


def _colocated(
    core: client.CoreV1Api,
    settings: OperatorSettings,
    namespace: str,
    name: str,
    spec: SGLangDeploymentSpec,
    body: dict[str, Any],
    pods: list[dict[str, Any]] | None,
    now: datetime,
) -> _Outcome:
    """A colocated fleet's decision: one count for the fleet, split across its worker groups when it has any."""
    shape = topology(spec)
    uid = body["metadata"]["uid"]
    if pods is None:
        selector = f"{LABEL_DEPLOYMENT}={name}"
        listed = core.list_namespaced_pod(namespace, label_selector=selector, _request_timeout=API_TIMEOUT).items
        pods = [dict(core.api_client.sanitize_for_serialization(pod)) for pod in listed]
    pods = [
        pod for pod in pods
        if ((pod.get("metadata") or {}).get("labels") or {}).get(LABEL_COMPONENT) == COMPONENT_WORKER
        and owned_by(pod, uid)
    ]  # fmt: skip
    recommend_only = spec.autoscaling.recommend_only
    previous_status = body.get("status") or {}
    previous = previous_status.get("autoscaler") or {}
    group_shapes = shapes(worker_groups(spec)) if spec.worker_groups else []
    if group_shapes:  # the fleet's capacity in units of the first group's replica (`fleet_split`)
        targets = {name: active for name, (active, _) in group_targets(spec, previous_status).items()}
        current = group_fleet_state(group_shapes, targets, previous_status)
        policy_spec = unit_bounds(spec.autoscaling, group_shapes)
    else:
        current = fleet_state(body, pods, spec, shape.gpus_per_replica, shape.concurrency_per_replica)
        policy_spec = spec.autoscaling
    samples, error = read_metrics(core, namespace, name, spec.autoscaling, now.timestamp(), settings)
    state = previous.get("state")
    history, envelope = history_from_state(state), envelope_from_state(state)
    decision = decide(current, samples, policy_spec, history, now.timestamp(), envelope)
    limits = {"maxReplicas": spec.autoscaling.max_replicas}
    if spec.autoscaling.max_gpus is not None:
        limits["maxGPUs"] = spec.autoscaling.max_gpus // max(1, shape.gpus_per_replica)
    metrics.autoscaler_decided(namespace, name, decision.replicas, decision.mode, decision.recommendation, limits)
    new = autoscaler_status(previous, decision, now, recommend_only)
    if group_shapes:
        split = split_capacity(decision.replicas * group_shapes[0].concurrency, group_shapes, spec.autoscaling.max_gpus)
        new["groups"] = split.replicas
    event = None
    if decision.replicas != previous.get("desiredReplicas"):
        event = scale_event(previous.get("desiredReplicas"), decision, current.desired, recommend_only)
    return _Outcome(decision, new, error, event)


def _write(
    api: client.ApiClient, namespace: str, name: str, body: dict[str, Any], outcome: _Outcome, now: datetime
) -> AutoscalePass:
    """Write `status.autoscaler`, `qps` and `MetricsAvailable` when any changed, then the event of a changed
    decision."""
    decision, new = outcome.decision, outcome.status
    previous_status = body.get("status") or {}
    generation = int(body["metadata"].get("generation") or 0)
    available = condition(
        "MetricsAvailable",
        decision.metrics_available,
        "MetricsFresh" if decision.metrics_available else "MetricsUnavailable",
        "signals read from Prometheus" if decision.metrics_available else (outcome.error or decision.reason),
        generation,
        now.strftime("%Y-%m-%dT%H:%M:%SZ"),
    )
    conditions = merge_conditions(list(previous_status.get("conditions") or []), [available])
    qps = new["observed"].get("qps")
    if (
        new == previous_status.get("autoscaler")
        and conditions == previous_status.get("conditions")
        and qps == previous_status.get("qps")
    ):
        return AutoscalePass(decision, False)
    writer = Writer(api)
    status = {"autoscaler": with_removals(previous_status.get("autoscaler"), new), "conditions": conditions, "qps": qps}
    if not writer.patch_status(namespace, name, status, body["metadata"]["resourceVersion"]):
        return AutoscalePass(decision, False)  # the reconciler wrote status in between: decide again next interval
    if outcome.event is not None:
        writer.event(body, *outcome.event)
    return AutoscalePass(decision, True)


def with_removals(previous: Any, new: Any) -> Any:
    """`new` as a merge patch over `previous`: a key `previous` has and `new` lacks is sent as null, which deletes it
    (RFC 7386); left out, the merge would keep it, e.g. a role's `observed.backlogReplicas` after its queue emptied,
    and every later pass would see a difference to write."""
    if not isinstance(previous, dict) or not isinstance(new, dict):
        return new
    patch = {key: with_removals(previous.get(key), value) for key, value in new.items()}
    return {**patch, **{key: None for key in previous if key not in new}}


def read_metrics(
    core: client.CoreV1Api,
    namespace: str,
    name: str,
    autoscaling: AutoscalingSpec,
    now: float,
    settings: OperatorSettings,
) -> tuple[Samples | None, str | None]:
    """The deployment's signals; (None, why) without a URL, with credentials that cannot be read, or when an
    essential query failed. A CR's own prometheusURL is read with its own prometheusAuth. The operator's default
    URL is read with the CR's prometheusAuth when it names one, else with the operator's own credentials."""
    url, credentials, error = prometheus_access(core, namespace, autoscaling, settings)
    if url is None or credentials is None:
        return None, error
    return fetch_samples(url, namespace, name, autoscaling, now, credentials=credentials)


def scale_event(before: int | None, decision: Decision, running: int, recommend_only: bool) -> tuple[str, str]:
    """(reason, message) of the event for a changed decision; a recommendation says what runs instead."""
    if recommend_only:
        return "AutoscalerRecommendation", (
            f"recommends {decision.replicas} replicas (was {before}; spec.replicas {running} sets the count): "
            f"{decision.reason}"
        )
    return "Autoscaled", f"desired replicas {before} -> {decision.replicas}: {decision.reason}"
