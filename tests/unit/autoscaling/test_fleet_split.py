"""The autoscaler over worker groups: the policy's decision in units of the first group's replica, split into
replicas per group within each group's bounds and the GPU budget."""

import time
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sglang_operator.api.groups import worker_groups
from sglang_operator.api.limits import MAX_REPLICAS
from sglang_operator.api.validation import parse_spec
from sglang_operator.autoscaling.fleet_split import (
    GroupShape,
    Split,
    group_fleet_state,
    shapes,
    split_capacity,
    unit_bounds,
    units,
)

# The seed's fleet: group a one tp=4 replica of 16 slots, group b tp=2 replicas of 8 slots.
A = GroupShape("a", concurrency=16, gpus=4, min_replicas=1, max_replicas=2)
B = GroupShape("b", concurrency=8, gpus=2, min_replicas=0, max_replicas=4)
SMALL_FIRST = GroupShape("b", concurrency=8, gpus=1, min_replicas=0, max_replicas=4)


def test_minimums_first_then_the_most_requests_per_gpu() -> None:
    assert split_capacity(0, [A, B], None).replicas == {"a": 1, "b": 0}
    # b serves 8 requests per GPU, a 4: b grows first, until its maximum
    cheap_b = GroupShape("b", concurrency=8, gpus=1, min_replicas=0, max_replicas=2)
    assert split_capacity(24, [A, cheap_b], None).replicas == {"a": 1, "b": 1}
    assert split_capacity(40, [A, cheap_b], None).replicas == {"a": 2, "b": 2}


def test_ties_go_to_the_group_declared_first() -> None:
    assert split_capacity(32, [A, B], None).replicas == {"a": 2, "b": 0}
    assert split_capacity(40, [A, B], None).replicas == {"a": 2, "b": 1}


def test_the_gpu_budget_and_maximums_cap_the_split_and_say_so() -> None:
    split = split_capacity(1000, [A, B], max_gpus=10)
    assert split.replicas == {"a": 2, "b": 1} and split.short
    assert sum(g.gpus * split.replicas[g.name] for g in (A, B)) <= 10
    full = split_capacity(1000, [A, B], None)
    assert full.replicas == {"a": 2, "b": 4} and full.short


@given(st.integers(0, 200), st.integers(0, 200), st.sampled_from([None, 8, 12, 16]))
def test_more_demand_never_takes_a_replica_from_a_group(low: int, high: int, budget: int | None) -> None:
    low, high = min(low, high), max(low, high)
    before, after = split_capacity(low, [A, B], budget), split_capacity(high, [A, B], budget)
    assert all(after.replicas[name] >= count for name, count in before.replicas.items())
    for split in (before, after):
        assert all(g.min_replicas <= split.replicas[g.name] <= g.max_replicas for g in (A, B))
        assert budget is None or sum(g.gpus * split.replicas[g.name] for g in (A, B)) <= max(budget, 4)
        assert split.short or split.capacity >= low


def test_bounds_and_state_in_units() -> None:
    assert units([A, B], {"a": 1, "b": 2}) == 2.0
    raw = {"model": {"path": "m"}, "replicas": 2, "autoscaling": {"enabled": True, "maxGPUs": 8},
           "workerGroups": [{"name": "a", "replicas": 1, "parallelism": {"tp": 4},
                             "engine": {"maxRunningRequests": 16}, "autoscaling": {"minReplicas": 1, "maxReplicas": 2}},
                            {"name": "b", "parallelism": {"tp": 2}, "engine": {"maxRunningRequests": 8},
                             "autoscaling": {"minReplicas": 1, "maxReplicas": 4}}]}  # fmt: skip
    spec, errors = parse_spec(raw)
    assert spec is not None, errors
    found = shapes(worker_groups(spec))
    assert [(g.name, g.concurrency, g.gpus) for g in found] == [("a", 16, 4), ("b", 8, 2)]
    bounds = unit_bounds(spec.autoscaling, found)
    assert (bounds.min_replicas, bounds.max_replicas, bounds.max_gpus) == (2, 4, None)
    status: dict[str, Any] = {"groups": [{"name": "a", "readyReplicas": 1, "replicas": 1},
                                         {"name": "b", "readyReplicas": 1, "replicas": 2}]}  # fmt: skip
    state = group_fleet_state(found, {"a": 1, "b": 2}, status)
    assert (state.desired, state.ready, state.starting, state.concurrency_per_replica) == (2, 1, 1, 16)


@pytest.mark.parametrize("bad", [None, "x", [1], {"name": "a", "readyReplicas": -1}, {"name": "a", "replicas": True}])
def test_status_that_does_not_parse_counts_nothing(bad: Any) -> None:
    state = group_fleet_state([A, B], {"a": 1}, {"groups": [bad]})
    assert (state.ready, state.starting) == (0, 0)


def one_at_a_time(needed: int, groups: Sequence[GroupShape], max_gpus: int | None, max_replicas: int) -> Split:
    """The split as the module docstring states it, one replica per step: the reference `split_capacity` must
    equal."""
    counts = {g.name: g.min_replicas for g in groups}
    capacity = sum(g.concurrency * g.min_replicas for g in groups)
    gpus = sum(g.gpus * g.min_replicas for g in groups)
    order = sorted(range(len(groups)), key=lambda i: (-groups[i].concurrency / max(1, groups[i].gpus), i))
    while capacity < needed:
        grow = next(
            (groups[i] for i in order
             if counts[groups[i].name] < groups[i].max_replicas and sum(counts.values()) < max_replicas
             and (max_gpus is None or gpus + groups[i].gpus <= max_gpus)),
            None,
        )  # fmt: skip
        if grow is None:
            return Split(counts, capacity, short=True)
        counts[grow.name] += 1
        capacity += grow.concurrency
        gpus += grow.gpus
    return Split(counts, capacity, short=False)


SHAPE = st.builds(
    lambda name, c, gpus, low, extra: GroupShape(name, c, gpus, low, low + extra),
    st.just(""), st.integers(1, 64), st.integers(0, 8), st.integers(0, 3), st.integers(0, 12),
)  # fmt: skip


@given(
    st.lists(SHAPE, min_size=1, max_size=5),
    st.integers(0, 600),
    st.one_of(st.none(), st.integers(0, 60)),
    st.integers(0, 40),
)
def test_the_direct_split_is_the_one_replica_at_a_time_split(
    shapes_: list[GroupShape], needed: int, budget: int | None, bound: int
) -> None:
    groups = [GroupShape(f"g{i}", g.concurrency, g.gpus, g.min_replicas, g.max_replicas) for i, g in enumerate(shapes_)]
    assert split_capacity(needed, groups, budget, bound) == one_at_a_time(needed, groups, budget, bound)


def test_the_split_stays_within_the_fleets_bound_in_microseconds() -> None:
    """Issue 37: each group's maxReplicas is capped, not their sum; 8 groups of 512 split a demand one replica at a
    time, thousands of steps per pass. The split now holds the fleet's bound and costs O(groups)."""
    groups = [GroupShape(f"g{i}", 8 + i, 1 + i % 2, 0, MAX_REPLICAS) for i in range(8)]
    started = time.perf_counter()
    split = split_capacity(10**9, groups, None)
    took = time.perf_counter() - started
    assert sum(split.replicas.values()) == MAX_REPLICAS and split.short
    assert took < 0.005, f"one split took {took * 1000:.1f} ms"
    assert sum(split_capacity(10**9, groups, 600).replicas.values()) == MAX_REPLICAS
    floors = [GroupShape(g.name, g.concurrency, g.gpus, 100, MAX_REPLICAS) for g in groups]
    assert split_capacity(10**9, floors, None).replicas == {g.name: 100 for g in floors}  # minimums stay
