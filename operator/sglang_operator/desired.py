"""How many replicas a fleet, and each of its worker groups, should run: from the spec, the autoscaler's decision
in status, and the groups' scale targets. The reconciler acts on it; the autoscaler reads it as the count running
now. Pure.
"""

from collections.abc import Mapping, Sequence
from typing import Any

from .api.groups import WorkerGroup, worker_groups
from .api.spec import SGLangDeploymentSpec


def status_count(value: object) -> int | None:
    """A count from status, which anyone who may patch status can write: non-negative integers only."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def desired_replicas(spec: SGLangDeploymentSpec, status: Mapping[str, Any]) -> tuple[int, int]:
    """(active, warm) of the fleet's count: the autoscaler's from status when it owns the fleet, else
    `spec.replicas`. A recommend-only autoscaler does not own it (its count is for comparison; no warm replicas)."""
    scaling = spec.autoscaling
    if not scaling.enabled or scaling.recommend_only:
        return spec.replicas, 0
    autoscaler = status.get("autoscaler") or {}
    count = status_count(autoscaler.get("desiredReplicas"))
    warm = status_count(autoscaler.get("warmReplicas"))
    count = spec.replicas if count is None else count
    return max(scaling.min_replicas, min(scaling.max_replicas, count)), scaling.warm_replicas if warm is None else warm


def group_targets(
    spec: SGLangDeploymentSpec,
    status: Mapping[str, Any],
    scaled: Mapping[str, int] | None = None,
    groups: Sequence[WorkerGroup] | None = None,
) -> dict[str, tuple[int, int]]:
    """(active, warm) per group name. Without groups: the fleet's count. With groups: when the autoscaler owns the
    fleet, its split (`status.autoscaler.groups`) within each group's bounds; else the group's scale target
    (`scaled`, from `scale_target_counts`), else its own `replicas`, else spec.replicas for the group that has none.
    Warm replicas are a fleet without groups' only. `groups`: `worker_groups(spec)` when the caller has them."""
    groups = worker_groups(spec) if groups is None else groups
    if not spec.worker_groups:
        return {groups[0].name: desired_replicas(spec, status)}
    split = (status.get("autoscaler") or {}).get("groups")
    owned = autoscaler_owns(spec) and isinstance(split, dict)
    targets = {}
    for group in groups:
        decided = status_count(split.get(group.name)) if owned and isinstance(split, dict) else None
        if decided is not None:
            targets[group.name] = (max(group.min_replicas, min(group.max_replicas, decided)), 0)
        else:
            targets[group.name] = ((scaled or {}).get(group.name, group.spec.replicas), 0)
    return targets


def autoscaler_owns(spec: SGLangDeploymentSpec) -> bool:
    return spec.autoscaling.enabled and not spec.autoscaling.recommend_only
