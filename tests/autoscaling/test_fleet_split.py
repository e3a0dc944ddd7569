"""The autoscaler over worker groups: the policy's decision in units of the first group's replica, split into
replicas per group within each group's bounds and the GPU budget."""

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sglang_operator.api.groups import worker_groups
from sglang_operator.api.validation import parse_spec
from sglang_operator.autoscaling.fleet_split import (
    GroupShape,
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
