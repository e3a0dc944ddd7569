"""The autoscaler over worker groups: one decision for the fleet's capacity, split across the groups. Pure.

The policy decides in replicas of one size. For a fleet of groups that size is the first group's replica (its
concurrency C1, its GPUs), the "unit": the policy sees the fleet's capacity in units (Σ replicas x C / C1), its
bounds in units (each group's min and max replicas, converted), and no GPU budget (the split keeps it). Its decision
of N units is N x C1 concurrent requests, which `split_capacity` turns into replicas per group:

1. every group starts at its `autoscaling.minReplicas`;
2. while the fleet holds fewer requests than needed, one replica more for the group that serves the most requests
   per GPU (ties: the group declared first) among those below their `maxReplicas` whose replica still fits the GPU
   budget (`autoscaling.maxGPUs`) and the fleet's bound (`MAX_REPLICAS` replicas in all).

So a larger count never takes a replica away from a group (the split is monotone in demand), scale-down releases
the least efficient groups' replicas first, and no split leaves a group's bounds, the budget or the fleet's bound (it
falls short of the demand instead, and says so).

Step 2 is computed a group at a time, not a replica at a time: the group first in that order keeps taking replicas
until the demand is met or its maximum, the budget or the fleet's bound stops it, and a group the budget stopped
stays stopped (the budget left only shrinks), so each group takes min(its room, the replicas the demand still asks
of it, the replicas the budget and the bound still allow) in turn. A split costs O(groups), whatever the counts.
"""

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..api.groups import WorkerGroup
from ..api.limits import MAX_REPLICAS
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


def split_capacity(
    needed: int, groups: Sequence[GroupShape], max_gpus: int | None, max_replicas: int = MAX_REPLICAS
) -> Split:
    """Replicas per group holding at least `needed` concurrent requests, by the rule in the module docstring, with
    at most `max_replicas` replicas in all (the fleet's bound; the groups' minimums are kept even above it)."""
    counts = {g.name: g.min_replicas for g in groups}
    capacity = sum(g.concurrency * g.min_replicas for g in groups)
    gpus = sum(g.gpus * g.min_replicas for g in groups)
    total = sum(counts.values())
    by_efficiency = sorted(range(len(groups)), key=lambda i: (-groups[i].concurrency / max(1, groups[i].gpus), i))
    for i in by_efficiency:
        if capacity >= needed:
            break
        g = groups[i]
        room = min(g.max_replicas - counts[g.name], max_replicas - total)
        if max_gpus is not None and (max_gpus < gpus or g.gpus > 0):  # a replica of no GPUs fits while the rest do
            room = min(room, (max_gpus - gpus) // g.gpus if g.gpus > 0 else 0)
        asked = -(-(needed - capacity) // g.concurrency) if g.concurrency > 0 else room
        take = max(0, min(room, asked))
        counts[g.name] += take
        capacity += take * g.concurrency
        gpus += take * g.gpus
        total += take
    return Split(counts, capacity, short=capacity < needed)


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
