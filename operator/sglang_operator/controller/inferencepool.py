"""Which worker pods carry the InferencePool membership label, and which pods' label must change. Pure.

A replica is a member while its rank-0 pod may take requests from a Gateway exactly as from the routers: ready,
not warm, not draining, not chosen to leave on this pass, and listed by every router (with the router off: ready).
Only rank-0 pods carry the label (ranks >= 1 serve no HTTP API). The reconciler writes the changes through the pod
bookkeeping apply (`Reconciler._apply_plan`), so a replica whose drain starts loses the label in the very apply that
marks it draining, and one held back from draining (a router has not confirmed its removal) loses it at once.
"""

from collections.abc import Collection, Iterable, Mapping
from typing import Any

from ..api.inferencepool import LABEL_INFERENCE_POOL, POOL_MEMBER
from ..observed import ReplicaView


def pool_members(
    enabled: bool,
    replicas: Iterable[ReplicaView],
    leaving: Collection[int],
    registered: Collection[str] | None,
) -> set[str]:
    """Names of the rank-0 pods that belong in the pool. `leaving`: replicas the plan drains or deletes;
    `registered`: worker URLs every router lists, None when the fleet has no router."""
    if not enabled:
        return set()
    members = set()
    for replica in replicas:
        rank0 = replica.rank0
        if rank0 is None or not replica.ready or replica.warm or replica.draining_since is not None:
            continue
        if replica.index in leaving or (registered is not None and replica.url not in registered):
            continue
        members.add(rank0.name)
    return members


def is_member(pod: Mapping[str, Any] | None) -> bool:
    """Whether a live pod carries the membership label."""
    labels = ((pod or {}).get("metadata") or {}).get("labels") or {}
    return bool(labels.get(LABEL_INFERENCE_POOL) == POOL_MEMBER)


def membership_changes(live: Mapping[str, Mapping[str, Any]], members: Collection[str]) -> dict[str, bool]:
    """Pod name -> whether it must carry the label, for each pod whose label differs from `members`. `live`: the
    CR's worker pods by name, as the snapshot shows them. A terminating pod only ever loses the label."""
    changes: dict[str, bool] = {}
    for name, pod in live.items():
        member = name in members and not ((pod.get("metadata") or {}).get("deletionTimestamp"))
        if member != is_member(pod):
            changes[name] = member
    return changes


def membership_labels(member: bool) -> dict[str, str | None]:
    """The bookkeeping apply's labels for a pod: the membership label, or None (the apply leaves it out: removed)."""
    return {LABEL_INFERENCE_POOL: POOL_MEMBER if member else None}
