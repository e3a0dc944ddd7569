"""The autoscaler over worker groups: one decision for the fleet's capacity, split across the groups. Pure.

The policy decides in replicas of one size. For a fleet of groups that size is the first group's replica (its
concurrency C1, its GPUs), the "unit": the policy sees the fleet's capacity in units (Σ replicas x C / C1), its
bounds in units (each group's min and max replicas, converted), and no GPU budget (the split keeps it). Its decision
of N units is N x C1 concurrent requests, which `split_capacity` turns into replicas per group:

1. every group starts at its `autoscaling.minReplicas`;
2. while the fleet holds fewer requests than needed, one replica more for the group that serves the most requests
   per GPU (ties: the group declared first) among those below their `maxReplicas` whose replica still fits the GPU
   budget (`autoscaling.maxGPUs`).

So a larger count never takes a replica away from a group (the split is monotone in demand), scale-down releases
the least efficient groups' replicas first, and no split leaves a group's bounds or the budget (it falls short of
the demand instead, and says so).
"""

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..api.groups import WorkerGroup
from ..api.spec import AutoscalingSpec
from ..topology import topology
from .signals import FleetState


@dataclass(frozen=True)
class GroupShape:
    name: str
    concurrency: int
    gpus: int
    min_replicas: int
    max_replicas: int


@dataclass(frozen=True)
class Split:
    replicas: dict[str, int]
    capacity: int
    """Requests the split holds at once."""
    short: bool
    """Bounds or the GPU budget kept the split below what was needed."""


def shapes(groups: Sequence[WorkerGroup]) -> list[GroupShape]:
    return [
        GroupShape(g.name, max(1, topology(g.spec).concurrency_per_replica), topology(g.spec).gpus_per_replica,
                   g.min_replicas, g.max_replicas)
        for g in groups
    ]  # fmt: skip


def split_capacity(needed: int, groups: Sequence[GroupShape], max_gpus: int | None) -> Split:
    """Replicas per group holding at least `needed` concurrent requests, by the rule in the module docstring."""
    counts = {g.name: g.min_replicas for g in groups}
    capacity = sum(g.concurrency * g.min_replicas for g in groups)
    gpus = sum(g.gpus * g.min_replicas for g in groups)
    by_efficiency = sorted(range(len(groups)), key=lambda i: (-groups[i].concurrency / max(1, groups[i].gpus), i))
    while capacity < needed:
        grow = next(
            (groups[i] for i in by_efficiency
             if counts[groups[i].name] < groups[i].max_replicas
             and (max_gpus is None or gpus + groups[i].gpus <= max_gpus)),
            None,
        )  # fmt: skip
        if grow is None:
            return Split(counts, capacity, short=True)
        counts[grow.name] += 1
        capacity += grow.concurrency
        gpus += grow.gpus
    return Split(counts, capacity, short=False)


def units(groups: Sequence[GroupShape], replicas: dict[str, int]) -> float:
    """The capacity of `replicas` per group in units (the first group's replica)."""
    unit = groups[0].concurrency
    return sum(g.concurrency * replicas.get(g.name, 0) for g in groups) / unit


def unit_bounds(spec: AutoscalingSpec, groups: Sequence[GroupShape]) -> AutoscalingSpec:
    """The autoscaling spec the policy sees: the groups' bounds in units and no GPU budget (the split keeps it),
    rounded so that the policy never asks for more than the groups can hold."""
    low = units(groups, {g.name: g.min_replicas for g in groups})
    high = units(groups, {g.name: g.max_replicas for g in groups})
    low_units = math.ceil(low)
    return spec.model_copy(update={"min_replicas": low_units, "max_replicas": max(low_units, int(high)),
                                   "max_gpus": None})  # fmt: skip


def group_fleet_state(
    groups: Sequence[GroupShape], targets: dict[str, int], status: Mapping[str, Any], warm: int = 0
) -> FleetState:
    """The fleet in units: `targets` the replicas per group the reconciler follows now, `status` the CR's (its
    per-group ready and serving counts)."""
    observed = {g.get("name"): g for g in status.get("groups") or [] if isinstance(g, dict)}

    def count(name: str, key: str) -> int:
        value = (observed.get(name) or {}).get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0

    ready = math.floor(units(groups, {g.name: count(g.name, "readyReplicas") for g in groups}))
    serving = math.ceil(units(groups, {g.name: count(g.name, "replicas") for g in groups}))
    return FleetState(
        desired=math.ceil(units(groups, targets)),
        ready=ready,
        starting=max(serving - ready, 0),
        warm=warm,
        gpus_per_replica=groups[0].gpus,
        concurrency_per_replica=groups[0].concurrency,
    )
