"""The replica planner over the situations a fleet meets: scale, rollout, drain, failure, warm replicas."""

from sglang_operator.api.spec import UpdateStrategy
from sglang_operator.controller.planner import BURST_PODS, Event, Targets, plan_replicas
from sglang_operator.observed import PodView, ReplicaView

REV, OLD = "new", "old"


def pod(rank: int = 0, ready: bool = True, phase: str = "Running", nodes: int = 1, draining: float | None = None,
        warm: bool = False, deleting: bool = False) -> PodView:  # fmt: skip
    return PodView(name=f"p{rank}", rank=rank, phase=phase, ready=ready, ip="127.1.0.1", port=30000,
                   deleting=deleting, restarts=0, replica_nodes=nodes, draining_since=draining, warm=warm)  # fmt: skip


def replica(index: int, revision: str = REV, **kwargs: object) -> ReplicaView:
    return ReplicaView(index=index, revision=revision, pods={0: pod(**kwargs)})  # type: ignore[arg-type]


def targets(active: int, warm: int = 0, surge: int = 1, unavailable: int = 0, drain: int = 60) -> Targets:
    strategy = UpdateStrategy(max_surge=surge, max_unavailable=unavailable, drain_timeout_seconds=drain)
    return Targets(active=active, warm=warm, revision=REV, strategy=strategy)


def test_scale_up_from_nothing_creates_all_missing() -> None:
    plan = plan_replicas([], targets(3), {}, set(), now=0)
    assert plan.create_active == [0, 1, 2] and not plan.drain


def test_steady_state_plans_nothing() -> None:
    plan = plan_replicas([replica(0), replica(1)], targets(2), {}, set(), now=0)
    assert plan.empty and plan.events == [] and plan.drain_event is None


def test_new_indices_fill_gaps() -> None:
    plan = plan_replicas([replica(1)], targets(3), {}, set(), now=0)
    assert plan.create_active == [0, 2]


def test_scale_in_drains_not_ready_then_least_loaded() -> None:
    replicas = [replica(0), replica(1, ready=False), replica(2), replica(3)]
    plan = plan_replicas(replicas, targets(2), {0: 5, 2: 0, 3: 9}, set(), now=0)
    assert sorted(plan.drain) == [1, 2]
    assert not plan.delete


def test_scale_in_event_names_the_drains_that_start() -> None:
    plan = plan_replicas([replica(0), replica(1), replica(2)], targets(1), {0: 4, 1: 0, 2: 1}, set(), now=0)
    assert plan.drain_event == Event("ScalingDown", "draining replicas [1, 2] (scale to 1)")
    plan.drain = [2]  # the reconciler held back 1: a router has not applied its removal yet
    assert plan.drain_event == Event("ScalingDown", "draining replicas [2] (scale to 1)")
    plan.drain = []
    assert plan.drain_event is None  # nothing starts draining on this pass, so nothing is announced


def test_removal_under_way_is_chosen_again() -> None:
    """A replica one router already dropped stays the one to drain, even when it is not the least loaded: picking
    another would re-register it and start a second removal."""
    replicas = [replica(0), replica(1), replica(2)]
    assert plan_replicas(replicas, targets(2), {0: 1, 1: 5, 2: 3}, set(), now=0).drain == [0]
    plan = plan_replicas(replicas, targets(2), {0: 1, 1: 5, 2: 3}, set(), now=0, off_router=frozenset({1}))
    assert plan.drain == [1]


def test_drain_waits_for_deregistration_and_zero_in_flight() -> None:
    draining = [replica(0), replica(1, draining=100.0)]
    assert plan_replicas(draining, targets(1), {1: 0}, set(), now=110).delete == []  # still on a router
    assert plan_replicas(draining, targets(1), {1: 3}, {1}, now=110).delete == []  # requests in flight
    assert plan_replicas(draining, targets(1), {1: 0}, {1}, now=101).delete == []  # still settling
    assert plan_replicas(draining, targets(1), {1: 0}, {1}, now=110).delete == [1]


def test_drain_timeout_deletes_anyway() -> None:
    draining = [replica(0), replica(1, draining=100.0)]
    plan = plan_replicas(draining, targets(1, drain=60), {1: 4}, set(), now=161)
    assert plan.delete == [1]
    assert "timed out" in plan.events[0].message


def test_rollout_surges_then_drains_old_keeping_availability() -> None:
    old = [replica(0, OLD), replica(1, OLD)]
    first = plan_replicas(old, targets(2, surge=1, unavailable=0), {}, set(), now=0)
    assert first.create_active == [2] and first.drain == []
    starting = [*old, replica(2, ready=False)]
    assert plan_replicas(starting, targets(2), {}, set(), now=0).empty
    ready = [*old, replica(2)]
    second = plan_replicas(ready, targets(2), {0: 3, 1: 1}, set(), now=0)
    assert second.drain == [1]  # least loaded old replica
    assert second.drain_event == Event("RollingOut", "draining old-revision replicas [1]")
    assert second.create_active == []  # surge room is used up until the drain finishes


def test_rollout_in_place_with_max_unavailable() -> None:
    old = [replica(0, OLD), replica(1, OLD)]
    plan = plan_replicas(old, targets(2, surge=0, unavailable=1), {}, set(), now=0)
    assert len(plan.drain) == 1 and plan.create_active == []
    after = [replica(0, OLD), replica(1, OLD, draining=1.0)]
    plan = plan_replicas(after, targets(2, surge=0, unavailable=1), {1: 2}, set(), now=2)
    assert plan.create_active == [2] and plan.drain == []


def test_failed_single_node_replica_is_recreated() -> None:
    plan = plan_replicas([replica(0, phase="Failed"), replica(1)], targets(2), {}, set(), now=0)
    assert plan.delete == [0] and plan.create_active == [2]
    assert plan.events[0].reason == "ReplicaReplaced"


def test_multinode_replica_with_missing_rank_restarts_as_gang() -> None:
    broken = ReplicaView(index=0, revision=REV, pods={0: pod(0, nodes=2)})
    whole = ReplicaView(index=1, revision=REV, pods={0: pod(0, nodes=2), 1: pod(1, nodes=2)})
    plan = plan_replicas([broken, whole], targets(2), {}, set(), now=0)
    assert plan.delete == [0] and plan.create_active == [2]
    assert plan.events[0].reason == "GangRestart"


def test_warm_replica_promoted_on_scale_up_and_replenished() -> None:
    replicas = [replica(0), replica(1, warm=True)]
    plan = plan_replicas(replicas, targets(2, warm=1), {}, set(), now=0)
    assert plan.promote == [1] and plan.create_active == [] and plan.create_warm == [2]


def test_surplus_warm_replicas_are_deleted_without_drain() -> None:
    replicas = [replica(0), replica(1, warm=True), replica(2, warm=True)]
    plan = plan_replicas(replicas, targets(1, warm=1), {}, set(), now=0)
    assert len(plan.delete) == 1 and plan.drain == []


def test_scale_to_zero_drains_everything() -> None:
    plan = plan_replicas([replica(0), replica(1)], targets(0), {}, set(), now=0)
    assert sorted(plan.drain) == [0, 1]


def test_one_pass_creates_drains_and_deletes_at_most_a_burst() -> None:
    """The planner does not rely on validation's bound on replicas: 2**63 - 1 plans one burst of work."""
    huge = Targets(2**63 - 1, 2**63 - 1, "r1", UpdateStrategy(), burst=32)
    plan = plan_replicas([], huge, {}, set(), now=0)
    assert plan.create_active == list(range(32)) and plan.create_warm == []
    assert any("more on later passes" in e.message for e in plan.events)
    many = [replica(i) for i in range(100)]
    assert len(plan_replicas(many, targets(0), {}, set(), now=0).drain) == BURST_PODS


def test_an_unknown_load_is_not_zero_the_drain_waits_for_its_timeout() -> None:
    draining = [replica(0), replica(1, draining=100.0)]
    unknown = {1: "GET http://w1/v1/loads: HTTP 500"}
    assert plan_replicas(draining, targets(1, drain=60), {}, {1}, now=110, unknown_loads=unknown).delete == []
    timed_out = plan_replicas(draining, targets(1, drain=60), {}, {1}, now=161, unknown_loads=unknown)
    assert timed_out.delete == [1]
    assert [e.message for e in timed_out.events if e.reason == "Drained"] == [
        "replica 1 drain timed out after 60s (in-flight requests unknown: GET http://w1/v1/loads: HTTP 500);"
        " deleting it"
    ]
