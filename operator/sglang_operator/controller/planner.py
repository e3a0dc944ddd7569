"""Decide what to do with the replicas of one deployment. Pure: observed replicas in, a plan out.

The life of a replica: created (warm or active) -> ready -> registered on the routers -> draining (deregistered,
finishing in-flight requests) -> deleted. Every step is visible in the cluster (labels and annotations on its pods),
so a restarted operator continues where the last one stopped.

Rollouts work like a Deployment's: new-revision replicas are surged up to `maxSurge` above the desired count, and an
old replica is drained only while the ready, registered replicas stay at or above `replicas - maxUnavailable`.
"""

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from ..api.spec import UpdateStrategy
from ..observed import ReplicaView

# A request the router dispatched just before the removal may still be in transit to the worker and not yet
# counted in its load; "nothing in flight" is trusted only after this long.
DRAIN_SETTLE_SECONDS = 3.0
BURST_PODS = 32
"""Pods created (or deleted) in one pass at most, like a Deployment controller's burst: the next pass continues. No
spec, however large its replica count, makes one pass do unbounded work."""


@dataclass(frozen=True)
class Targets:
    active: int
    warm: int
    revision: str
    strategy: UpdateStrategy
    burst: int = BURST_PODS
    """Replicas created, drained and deleted per pass at most, each (the reconciler divides `BURST_PODS` by the
    pods per replica)."""


@dataclass(frozen=True)
class Event:
    reason: str
    message: str
    warning: bool = False


@dataclass
class Plan:
    create_active: list[int] = field(default_factory=list)
    create_warm: list[int] = field(default_factory=list)
    promote: list[int] = field(default_factory=list)
    drain: list[int] = field(default_factory=list)
    delete: list[int] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    """Events of everything but the drains, whose event follows `drain` (see `drain_event`)."""
    finished_drains: dict[int, bool] = field(default_factory=dict)
    """Draining replicas deleted by this plan -> whether their drain timed out (else: drained)."""
    drain_reason: str = ""
    drain_message: str = ""
    """The drain event's message, with `{replicas}` for the replicas that start draining."""

    @property
    def empty(self) -> bool:
        return not (self.create_active or self.create_warm or self.promote or self.drain or self.delete)

    @property
    def drain_event(self) -> Event | None:
        """The event for the drains that start on this pass, built from `drain` as it is when posted.

        The reconciler holds back a drain whose removal a router has not confirmed yet (the next pass decides
        again); deriving the event from the final list means such a replica is announced once, when its drain
        really starts, not on every pass that waits for the router.
        """
        if not self.drain:
            return None
        return Event(self.drain_reason, self.drain_message.format(replicas=sorted(self.drain)))


def _free_indices(used: Iterable[int]) -> Iterator[int]:
    taken, candidate = set(used), 0
    while True:
        if candidate not in taken:
            yield candidate
        candidate += 1


def _removal_order(
    replicas: list[ReplicaView], loads: Mapping[int, int], off_router: frozenset[int]
) -> list[ReplicaView]:
    """Not-ready replicas first, then those some router no longer lists (a removal already under way, or never
    registered: either way the least traffic), then the least loaded, then the newest index.

    Preferring a removal under way keeps the choice stable from pass to pass: a drain held back until every
    router confirms it is picked again, instead of another replica (which would re-register the first one).
    """
    return sorted(replicas, key=lambda r: (r.ready, r.index not in off_router, loads.get(r.index, 0), -r.index))


def plan_replicas(
    replicas: list[ReplicaView],
    targets: Targets,
    loads: Mapping[int, int],
    deregistered: set[int],
    now: float,
    off_router: frozenset[int] = frozenset(),
    unknown_loads: Mapping[int, str] | None = None,
    busy_loads: Mapping[int, str] | None = None,
    held: frozenset[int] = frozenset(),
) -> Plan:
    """`loads`: in-flight requests per replica, only where known; `unknown_loads`: why a replica's load could not
    be read (a draining replica without a known zero waits for its drain timeout); `busy_loads`: which numbers of a
    prefill/decode replica's load are not zero (the timed-out drain's event names them); `deregistered`: replicas
    known to be absent from every router (every ready router pod was read and none lists them: a router that could
    not be read leaves this empty); `off_router`: replicas absent from at least one router; `held`: old-revision
    replicas that keep serving whatever the rollout's bounds (a prefill/decode fleet's serving generation during a
    cut-over, `controller/cutover.py`): the new revision is created in full beside them."""
    notes = {i: f"not empty: {numbers}" for i, numbers in (busy_loads or {}).items()}
    notes |= {i: f"in-flight requests unknown: {why}" for i, why in (unknown_loads or {}).items()}
    plan = _plan_unbounded(replicas, targets, loads, deregistered, now, off_router, notes, held)
    return _within_burst(plan, max(1, targets.burst))


def _within_burst(plan: Plan, burst: int) -> Plan:
    """At most `burst` replicas created, drained and deleted per pass; the rest is decided again next pass."""
    plan.create_active = plan.create_active[:burst]
    plan.create_warm = plan.create_warm[: max(0, burst - len(plan.create_active))]
    plan.drain = plan.drain[:burst]
    plan.delete = plan.delete[:burst]
    return plan


def _plan_unbounded(
    replicas: list[ReplicaView],
    targets: Targets,
    loads: Mapping[int, int],
    deregistered: set[int],
    now: float,
    off_router: frozenset[int],
    load_notes: Mapping[int, str],
    held: frozenset[int],
) -> Plan:
    """The plan before the burst bound, in the order its parts depend on each other: failed replicas go, finished
    drains go, then the serving ones are split by revision and role (active or warm) for the rollout or scale."""
    plan = Plan()
    indices = _free_indices(r.index for r in replicas)
    live = _replace_failed(replicas, plan)
    _delete_finished_drains(live, targets, loads, deregistered, now, load_notes, plan)
    serving = [r for r in live if r.draining_since is None]
    current = [r for r in serving if r.revision == targets.revision]
    old = [r for r in serving if r.revision != targets.revision]
    active = [r for r in current if not r.warm]
    warm = [r for r in current if r.warm]
    plan.delete.extend(r.index for r in old if r.warm)  # old warm replicas carry no traffic: replaced outright
    old = [r for r in old if not r.warm and r.index not in held]
    _promote_warm(active, warm, targets, plan)
    short = targets.active - len(active)
    if old:
        creatable = _roll_out(active, old, short, targets, loads, off_router, plan)
    else:
        creatable = max(short, 0)
        _scale_down(active, short, targets, loads, off_router, plan)
    if any(r.index in held for r in serving):
        creatable = max(short, 0)  # a full surge: the held generation serves until the new one is whole
    _create(creatable, warm, targets, indices, loads, off_router, plan)
    return plan


def _replace_failed(replicas: list[ReplicaView], plan: Plan) -> list[ReplicaView]:
    """The replicas neither being deleted nor failed; a failed one is deleted (and recreated by a later pass)."""
    live = []
    for replica in replicas:
        if replica.deleting:
            continue
        if replica.failed:
            plan.delete.append(replica.index)
            kind = "GangRestart" if replica.size > 1 else "ReplicaReplaced"
            plan.events.append(Event(kind, f"replica {replica.index} failed; recreating it", warning=True))
        else:
            live.append(replica)
    return live


def _delete_finished_drains(
    live: list[ReplicaView],
    targets: Targets,
    loads: Mapping[int, int],
    deregistered: set[int],
    now: float,
    load_notes: Mapping[int, str],
    plan: Plan,
) -> None:
    """A draining replica is deleted once it is off every router with nothing in flight (and the settle time
    passed), or when its drain timeout passed; `load_notes`: what the timed-out drain's event says of a replica's
    load (unknown, or its numbers that are not zero)."""
    timeout = targets.strategy.drain_timeout_seconds
    for replica in live:
        since = replica.draining_since
        if since is None:
            continue
        settled = now - since >= DRAIN_SETTLE_SECONDS
        drained = replica.index in deregistered and loads.get(replica.index) == 0 and settled
        if not drained and now - since < timeout:
            continue
        plan.delete.append(replica.index)
        plan.finished_drains[replica.index] = not drained
        how = "drained" if drained else f"drain timed out after {timeout}s"
        if not drained and replica.index in load_notes:
            how += f" ({load_notes[replica.index]})"
        plan.events.append(Event("Drained", f"replica {replica.index} {how}; deleting it"))


def _promote_warm(active: list[ReplicaView], warm: list[ReplicaView], targets: Targets, plan: Plan) -> None:
    """Warm replicas fill a shortfall of active ones first, ready ones first (moved from `warm` to `active`)."""
    short = targets.active - len(active)
    for replica in sorted(warm, key=lambda r: (not r.ready, r.index))[: min(max(short, 0), max(1, targets.burst))]:
        plan.promote.append(replica.index)
        plan.events.append(Event("Promoted", f"warm replica {replica.index} promoted to serve traffic"))
        warm.remove(replica)
        active.append(replica)


def _roll_out(
    active: list[ReplicaView],
    old: list[ReplicaView],
    short: int,
    targets: Targets,
    loads: Mapping[int, int],
    off_router: frozenset[int],
    plan: Plan,
) -> int:
    """Drain old-revision replicas while at least `active - maxUnavailable` stay ready; returns how many new ones
    may be created within `maxSurge`."""
    surge_room = targets.active + targets.strategy.max_surge - len(active) - len(old)
    min_ready = targets.active - targets.strategy.max_unavailable
    ready_count = sum(r.ready for r in active) + sum(r.ready for r in old)
    for replica in _removal_order(old, loads, off_router):
        if not replica.ready:
            plan.drain.append(replica.index)  # serves nothing, so removing it costs no availability
        elif ready_count - 1 >= min_ready:
            plan.drain.append(replica.index)
            ready_count -= 1
    plan.drain_reason, plan.drain_message = "RollingOut", "draining old-revision replicas {replicas}"
    return max(0, min(short, surge_room))


def _scale_down(
    active: list[ReplicaView],
    short: int,
    targets: Targets,
    loads: Mapping[int, int],
    off_router: frozenset[int],
    plan: Plan,
) -> None:
    """Drain the active replicas beyond the target, in removal order."""
    for replica in _removal_order(active, loads, off_router)[: max(-short, 0)]:
        plan.drain.append(replica.index)
    plan.drain_reason = "ScalingDown"
    plan.drain_message = f"draining replicas {{replicas}} (scale to {targets.active})"


def _create(
    creatable: int,
    warm: list[ReplicaView],
    targets: Targets,
    indices: Iterator[int],
    loads: Mapping[int, int],
    off_router: frozenset[int],
    plan: Plan,
) -> None:
    """New active replicas (never more indices than one pass may create: `_within_burst` trims to the same
    bound), then the warm ones missing, or the surplus warm ones deleted."""
    plan.create_active = [next(indices) for _ in range(min(creatable, max(1, targets.burst)))]
    if creatable:
        later = creatable - len(plan.create_active)
        plan.events.append(Event("ScalingUp", f"creating replicas {plan.create_active} at revision {targets.revision}"
                                 + (f" ({later} more on later passes)" if later else "")))  # fmt: skip
    missing_warm = targets.warm - len(warm)
    plan.create_warm = [next(indices) for _ in range(min(max(missing_warm, 0), max(1, targets.burst)))]
    for replica in _removal_order(warm, loads, off_router)[: max(-missing_warm, 0)]:
        plan.delete.append(replica.index)
