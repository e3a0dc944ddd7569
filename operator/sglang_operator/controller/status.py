"""Status as a pure function of what one reconcile pass observed and did.

Conditions use the standard shape; a condition keeps its lastTransitionTime unless its status flips, so a pass
that changes nothing produces an identical status (and the writer then skips the patch).
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .. import names
from ..api.constants import COMPONENT_WORKER, LABEL_COMPONENT, LABEL_DEPLOYMENT, LABEL_WORKER_GROUP
from ..api.groups import fleet_shape
from ..api.spec import SGLangDeploymentSpec
from ..observed import ReplicaView
from ..runtime.conditions import condition, merge_conditions
from ..topology import topology


@dataclass(frozen=True)
class RouterObservation:
    """What the routers held: `registered` is the smallest count of desired workers on any router pod."""

    enabled: bool
    ready_pods: int
    registered: int
    synced: bool
    error: str | None = None
    note: str | None = None
    """Why lists that match the routed workers do not count as synced (a prefill/decode router with one role
    missing answers every request with 503)."""


@dataclass(frozen=True)
class Problem:
    """Something that keeps a pass from doing its job, shown as `Degraded` (reason, message) and posted as one
    Warning event when it first appears or changes: a step that failed (`ReconcileError`), a child name taken by an
    object the CR does not own (`NameCollision`), a child kind the cluster does not serve (`ChildKindUnavailable`)."""

    reason: str
    message: str


PROBLEM_REASONS = ("ReconcileError", "PolicyViolation", "NameCollision", "ChildKindUnavailable")


def worker_selector(name: str, group: str = "") -> str:
    """The fleet's workers, or one worker group's (the group /scale sizes, so an HPA counts its pods only)."""
    selector = f"{LABEL_DEPLOYMENT}={name},{LABEL_COMPONENT}={COMPONENT_WORKER}"
    return f"{selector},{LABEL_WORKER_GROUP}={group}" if group else selector


@dataclass(frozen=True)
class GroupObservation:
    """One worker group as a pass saw it: its effective spec, desired count and revision, its replicas."""

    name: str
    spec: SGLangDeploymentSpec
    desired: int
    revision: str
    replicas: list[ReplicaView]
    registered: int = 0
    """Its replicas that every router pod lists."""
    elastic: bool = True
    """Sized by spec.replicas (what /scale reports)."""
    retired: bool = False
    """A group the spec no longer has (its replicas drain); counted in the fleet, not listed."""
    role: str | None = None
    """prefill or decode in a disaggregated fleet."""


@dataclass(frozen=True)
class _Counts:
    serving: list[ReplicaView]
    ready: list[ReplicaView]
    updated: list[ReplicaView]
    draining: list[ReplicaView]
    old: list[ReplicaView]
    gpus: int

    @staticmethod
    def of(group: GroupObservation) -> "_Counts":
        replicas = group.replicas
        serving = [r for r in replicas if r.draining_since is None and not r.warm and not r.deleting and not r.failed]
        return _Counts(
            serving=serving,
            ready=[r for r in serving if r.ready],
            updated=[r for r in serving if r.revision == group.revision],
            draining=[r for r in replicas if r.draining_since is not None and not r.deleting],
            old=[r for r in serving if r.revision != group.revision],
            gpus=topology(group.spec).gpus_per_replica * len([r for r in replicas if not r.deleting]),
        )


def compute_status(
    *,
    name: str,
    namespace: str,
    generation: int,
    spec: SGLangDeploymentSpec,
    groups: Sequence[GroupObservation],
    router: RouterObservation,
    failed_replicas: int,
    previous: Mapping[str, Any],
    now: str,
    problems: Sequence[Problem] = (),
    cutting_over: str | None = None,
) -> dict[str, Any]:
    """The fleet's status over its worker groups (one implicit group for a spec without `workerGroups`, whose
    status reads exactly as before groups existed). `cutting_over`: what a prefill/decode fleet's cut-over to a new
    KV epoch waits for (`controller/cutover.py`), Progressing's message while it lasts."""
    counts = {id(g): _Counts.of(g) for g in groups}
    listed = [g for g in groups if not g.retired]
    desired = sum(g.desired for g in listed)
    parts = ("serving", "ready", "updated", "draining", "old")
    serving, ready, updated, draining, old = ([r for g in groups for r in getattr(counts[id(g)], p)] for p in parts)
    named = any(g.name for g in listed)
    revision = "" if named else listed[0].revision
    at_revision = f"at revision {revision}" if not named else "at their group's revision"

    all_ready = len(ready) >= desired and len(serving) == desired and not old
    router_ok = not router.enabled or (router.ready_pods > 0 and router.synced)
    if cutting_over:
        progress = ("CuttingOver", cutting_over)
    elif old:
        progress = ("RollingOut", f"{len(updated)}/{desired} replicas {at_revision}")
    elif draining:
        progress = ("Draining", f"{len(draining)} replicas draining")
    elif len(serving) != desired or len(ready) < desired:
        progress = ("Scaling", f"{len(ready)}/{desired} replicas ready")
    else:
        progress = ("Stable", f"{desired} replicas {at_revision}")
    if problems:
        degraded = (problems[0].reason, "; ".join(p.message for p in problems))
    elif router.error:
        degraded = ("RouterUnreachable", router.error)
    elif failed_replicas:
        degraded = ("ReplicaFailed", f"{failed_replicas} replicas failed and are being recreated")
    else:
        degraded = ("AsExpected", "no failures observed")

    conditions = [
        condition("Ready", all_ready and router_ok, "AllReplicasReady" if all_ready and router_ok else "NotReady",
                  f"{len(ready)}/{desired} replicas ready" + ("" if router_ok else "; router not synced"),
                  generation, now),
        condition("Progressing", progress[0] != "Stable", progress[0], progress[1], generation, now),
        condition("Degraded", degraded[0] != "AsExpected", degraded[0], degraded[1], generation, now),
        condition("RouterSynced", router_ok, "Synced" if router_ok else "OutOfSync",
                  "router disabled" if not router.enabled else
                  f"{router.registered} workers registered on {router.ready_pods} router pods"
                  + (f"; {router.note}" if router.note else "")
                  + (f"; {router.error}" if router.error else ""), generation, now),
    ]  # fmt: skip
    scaled = next((g for g in listed if g.elastic), None)
    status: dict[str, Any] = {
        "observedGeneration": generation,
        "replicas": len(counts[id(scaled)].serving) if scaled is not None and named else len(serving),
        "readyReplicas": len(ready),
        "updatedReplicas": len(updated),
        "ready": f"{len(ready)}/{desired}",
        "shape": fleet_shape(spec),
        "registeredWorkers": router.registered,
        "gpusPerReplica": topology((scaled or listed[0]).spec).gpus_per_replica,
        "totalGPUs": sum(c.gpus for c in counts.values()),
        "selector": worker_selector(name, scaled.name if scaled is not None and named else ""),
        "endpoint": names.router_endpoint(name, namespace, spec.router.port) if spec.router.enabled else "",
        "revision": revision,
        "conditions": merge_conditions(list(previous.get("conditions") or []), conditions),
    }
    if named:
        status["groups"] = [_group_status(g, counts[id(g)]) for g in listed]
    elif previous.get("groups"):
        status["groups"] = []
    return status


def _group_status(group: GroupObservation, counts: _Counts) -> dict[str, Any]:
    return {
        "name": group.name,
        **({"role": group.role} if group.role else {}),
        "desiredReplicas": group.desired,
        "replicas": len(counts.serving),
        "readyReplicas": len(counts.ready),
        "updatedReplicas": len(counts.updated),
        "registeredWorkers": group.registered,
        "gpusPerReplica": topology(group.spec).gpus_per_replica,
        "revision": group.revision,
    }


def status_changed(previous: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    return any(previous.get(key) != value for key, value in new.items())


def failed_pass_status(previous: Mapping[str, Any], problem: Problem, generation: int, now: str) -> dict[str, Any]:
    """The status of a pass that stopped at a failed step: everything observed before stays as it was (a partial
    observation would misreport the fleet), `Degraded` says what failed."""
    degraded = condition("Degraded", True, problem.reason, problem.message, generation, now)
    return {"conditions": merge_conditions(list(previous.get("conditions") or []), [degraded])}


def problem_event(previous: Mapping[str, Any], new: Mapping[str, Any]) -> Problem | None:
    """The Warning event to post for this pass: one when `Degraded` turns to a problem or to another problem,
    none while the same problem persists (a stuck pass does not post one event per pass). Pure."""

    def degraded(status: Mapping[str, Any]) -> tuple[str, str, str] | None:
        for c in status.get("conditions") or []:
            if isinstance(c, dict) and c.get("type") == "Degraded":
                return str(c.get("status")), str(c.get("reason")), str(c.get("message"))
        return None

    after = degraded(new)
    if after is None or after[0] != "True" or after[1] not in PROBLEM_REASONS or degraded(previous) == after:
        return None
    return Problem(after[1], after[2])
