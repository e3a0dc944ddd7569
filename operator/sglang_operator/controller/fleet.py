"""A fleet's worker groups as one pass sees them: which pods belong to which group, how many replicas each group
should run, and what each group's plan needs. Pure.

A group the spec no longer has (a group removed, or the implicit group's pods once groups are declared) is
"retired": it wants no replica, so its replicas drain and go like an old revision's.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..api.constants import LABEL_WORKER_GROUP
from ..api.groups import WorkerGroup, worker_groups
from ..api.spec import SGLangDeploymentSpec
from ..desired import group_targets
from ..observed import ReplicaView, group_replicas
from ..render import revision_hash
from .planner import BURST_PODS, Targets


@dataclass(frozen=True)
class GroupPass:
    """One group as a pass observes it: what it should run and what it runs (its loads and plan are the pass's
    later steps' results, kept beside it by group name)."""

    group: WorkerGroup
    revision: str
    active: int
    warm: int
    replicas: list[ReplicaView]
    retired: bool = False

    @property
    def name(self) -> str:
        return self.group.name

    def needs_loads(self) -> list[ReplicaView]:
        """Replicas whose in-flight count the plan needs: draining ones, and serving ones when some may go."""
        serving = [r for r in self.replicas if r.draining_since is None and not r.warm]
        may_go = len(serving) > self.active or any(r.revision != self.revision for r in serving)
        return [r for r in self.replicas if r.draining_since is not None] + (serving if may_go else [])

    def targets(self) -> Targets:
        per_replica = max(1, self.group.spec.parallelism.nnodes)
        return Targets(self.active, self.warm, self.revision, self.group.spec.update_strategy,
                       burst=max(1, BURST_PODS // per_replica))  # fmt: skip


def pod_group(pod: Mapping[str, Any]) -> str:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    value = labels.get(LABEL_WORKER_GROUP, "")
    return value if isinstance(value, str) else ""


def group_passes(
    spec: SGLangDeploymentSpec,
    status: Mapping[str, Any],
    pods: list[dict[str, Any]],
    scaled: Mapping[str, int] | None = None,
) -> list[GroupPass]:
    """Every group of the spec, then every retired group that still has pods, each with its own pods."""
    by_group: dict[str, list[dict[str, Any]]] = {}
    for pod in pods:
        by_group.setdefault(pod_group(pod), []).append(pod)
    groups = worker_groups(spec)
    targets = group_targets(spec, status, scaled, groups)
    passes = []
    for group in groups:
        active, warm = targets[group.name]
        replicas = group_replicas(by_group.pop(group.name, []))
        passes.append(GroupPass(group, revision_hash(group.spec, group.pd), active, warm, replicas))
    for name in sorted(by_group):
        retired = WorkerGroup(name, spec, elastic=False, min_replicas=0, max_replicas=0)
        passes.append(GroupPass(retired, "", 0, 0, group_replicas(by_group[name]), retired=True))
    return passes
