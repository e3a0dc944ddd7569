"""What one reconcile pass carries from step to step, and its pure steps.

The pass (`reconcile.Reconciler`) is a chain: children -> observe -> decide -> sync routers -> switch -> apply
replicas -> report. Each step returns a frozen value that the next steps read; none edits what an earlier step
decided. The pure ones live here: `decide` (each group's plan, who is routed, who is in the InferencePool),
`drains_now` (which planned drains start after the routers' removals), `observations` (what status reports of each
group).
"""

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import cached_property
from typing import Any

from ..api.spec import SGLangDeploymentSpec
from ..kvepoch import Cutover
from ..observed import ReplicaView
from ..render import Owner
from ..router.membership import DesiredWorker
from .cutover import held_replicas
from .fleet import GroupPass
from .inferencepool import pool_members
from .loads import Loads
from .planner import Plan, plan_replicas
from .routers import RouterState
from .scaletargets import ScaleTargetVerdict
from .status import GroupObservation, RouterObservation


@dataclass(frozen=True)
class PassContext:
    """What the whole pass reads, built once at its start: the CR as the snapshot shows it, parsed."""

    body: dict[str, Any]
    spec: SGLangDeploymentSpec
    owner: Owner
    now: datetime
    pods: list[dict[str, Any]]
    """Every labelled pod of the CR (workers and routers), from the snapshot."""
    children: dict[tuple[str, str], dict[str, Any]]
    """(kind, name) -> each child the CR may own that exists (trimmed, `state.trim_child`)."""
    scale_targets: list[dict[str, Any]]

    @property
    def namespace(self) -> str:
        return self.owner.namespace

    @property
    def name(self) -> str:
        return self.owner.name

    @property
    def stamp(self) -> str:
        return self.now.strftime("%Y-%m-%dT%H:%M:%SZ")

    @property
    def generation(self) -> int:
        return int(self.body["metadata"].get("generation") or 0)

    @property
    def previous(self) -> dict[str, Any]:
        """The status the snapshot shows (what this pass's status is compared with)."""
        return self.body.get("status") or {}

    @cached_property
    def pods_by_name(self) -> dict[str, dict[str, Any]]:
        """The snapshot's pods by name, built once per pass."""
        return {str((p.get("metadata") or {}).get("name")): p for p in self.pods}


@dataclass(frozen=True)
class Seen:
    """The observe step's result: the fleet's groups and replicas, their loads, and the routers' lists."""

    groups: list[GroupPass]
    loads: Mapping[str, Loads]
    """In-flight requests per group (only where the plan needs them)."""
    routers: RouterState | None
    """Each ready router pod's list; None without a router."""
    verdicts: list[ScaleTargetVerdict]
    """Each scale target's verdict, for its status."""
    bootstrap_ports: Mapping[str, int] = field(default_factory=dict)
    """Prefill replica URL -> the port of its bootstrap server (a prefill/decode fleet)."""
    bootstrapped: frozenset[str] = frozenset()
    """Prefill replica URLs whose bootstrap server answered on this pass (only those no router lists are read)."""
    cutover: Cutover | None = None
    """Where a prefill/decode fleet's routers stand between KV epochs (the children step read it); None: colocated."""

    @cached_property
    def still_listed(self) -> set[str]:
        """URLs at least one router lists."""
        return self.routers.registered_urls() if self.routers is not None else set()

    @cached_property
    def every_router_read(self) -> bool:
        """No router, or every ready router pod's list was read: only then is a URL no list shows off every router."""
        return self.routers is None or self.routers.every_router_read

    @cached_property
    def everywhere(self) -> set[str]:
        """URLs every router lists."""
        return self.routers.listed_everywhere() if self.routers is not None else set()


@dataclass(frozen=True)
class Decided:
    """The decide step's result: what each group should do and what the routers and the pool should hold."""

    plans: Mapping[str, Plan]
    routed: list[DesiredWorker]
    """The workers every router should list: ready, serving, not leaving (warm ones only once promoted), each with
    its group's role; a prefill only once its bootstrap server answered (or a router lists it already)."""
    members: set[str]
    """Rank-0 pods in the InferencePool: registered everywhere, not leaving."""
    epochs: Mapping[str, str] | None = None
    """Routed URL -> its KV epoch, whose routers alone list it (a prefill/decode fleet); None: every router."""

    @cached_property
    def routed_urls(self) -> set[str]:
        return {worker.url for worker in self.routed}


@dataclass(frozen=True)
class RouterSync:
    """The router step's result."""

    observation: RouterObservation
    changed: bool
    """Workers were added or removed without a failure: status shows the lists from before, a follow-up is due."""
    drains: Mapping[str, list[int]]
    """Per group, the planned drains that start now: a replica a router still lists (or may list: a router that
    could not be read) waits for the next pass."""


def _absent(replicas: list[ReplicaView], listed: set[str]) -> frozenset[int]:
    """Indices of the replicas whose URL is not in `listed` (or that have no URL yet)."""
    return frozenset(r.index for r in replicas if r.url is None or r.url not in listed)


def _routed_entry(group: GroupPass, replica: ReplicaView, seen: Seen) -> DesiredWorker | None:
    """How a routed replica is registered: as a regular worker, a decode, or a prefill with its bootstrap port; a
    prefill only once its bootstrap server answered, or while a router lists it already (a read that failed once
    does not take a serving prefill off). None: not yet. Pure."""
    url, role = replica.url, group.group.role
    if url is None:
        return None
    if role is None:
        return DesiredWorker(url)
    if role == "decode":
        return DesiredWorker(url, "decode")
    if url not in seen.bootstrap_ports or (url not in seen.bootstrapped and url not in seen.still_listed):
        return None
    return DesiredWorker(url, "prefill", seen.bootstrap_ports[url])


def decide(spec: SGLangDeploymentSpec, seen: Seen, now: float) -> Decided:
    """Each group's plan from its replicas, loads and the routers' lists; the workers to route and the pool's
    members that follow from it. Pure."""
    still_listed, everywhere, cutover = seen.still_listed, seen.everywhere, seen.cutover
    read_all = seen.every_router_read
    plans: dict[str, Plan] = {}
    routed: list[DesiredWorker] = []
    members: set[str] = set()
    epochs: dict[str, str] | None = None if cutover is None else {}
    for group in seen.groups:
        replicas, loads = group.replicas, seen.loads[group.name]
        # Off every router only when every router was read: one that timed out may still route to any replica.
        deregistered = set(_absent(replicas, still_listed)) if read_all else set()
        plan = plan_replicas(replicas, group.targets(), loads.known, deregistered, now,
                             _absent(replicas, everywhere), unknown_loads=loads.unknown, busy_loads=loads.busy,
                             held=held_replicas(cutover, replicas, now))  # fmt: skip
        plans[group.name] = plan
        leaving = set(plan.drain) | set(plan.delete)
        candidates = [
            r for r in replicas
            if r.url and r.ready and r.draining_since is None and r.index not in leaving
            and (not r.warm or r.index in plan.promote)
        ]  # fmt: skip
        entries = [(r, entry) for r in candidates if (entry := _routed_entry(group, r, seen)) is not None]
        routed += [entry for _, entry in entries]
        if cutover is not None and epochs is not None:
            epochs |= {entry.url: cutover.of(r.epoch) for r, entry in entries}
        registered = everywhere if seen.routers is not None else None
        members |= pool_members(spec.inference_pool.enabled, replicas, leaving, registered)
    return Decided(plans, routed, members, epochs)


def drains_now(seen: Seen, decided: Decided, unconfirmed: set[str]) -> dict[str, list[int]]:
    """Per group, the planned drains whose removal every router applied (`unconfirmed`: URLs a router still
    routes, or whose removal it did not take or confirm); none while a ready router could not be read (it may still
    route any of them). Pure."""
    drains: dict[str, list[int]] = {}
    for group in seen.groups:
        if not seen.every_router_read:
            drains[group.name] = []
            continue
        by_index = {r.index: r for r in group.replicas}
        drains[group.name] = [i for i in decided.plans[group.name].drain if by_index[i].url not in unconfirmed]
    return drains


def applied_plan(decided: Decided, sync: RouterSync, group: str) -> Plan:
    """A group's plan as the pass carries it out: its drains the ones that start now."""
    return replace(decided.plans[group], drain=list(sync.drains[group]))


def observations(seen: Seen, decided: Decided) -> list[GroupObservation]:
    """What status reports of each group. Pure."""
    everywhere = seen.everywhere
    return [
        GroupObservation(
            name=group.name, spec=group.group.spec, desired=group.active, revision=group.revision,
            replicas=group.replicas, elastic=group.group.elastic, retired=group.retired, role=group.group.role,
            registered=sum(1 for r in group.replicas if r.url in everywhere and r.url in decided.routed_urls),
        )
        for group in seen.groups
    ]  # fmt: skip


def merged_plan(plans: list[Plan]) -> Plan:
    """The plans of several groups as one, for what a pass reports (counts, emptiness); each group applied its
    own. Replica indices are per group, so the merged lists may repeat one."""
    if len(plans) == 1:
        return plans[0]
    merged = Plan()
    for plan in plans:
        for part in ("create_active", "create_warm", "promote", "drain", "delete", "events"):
            getattr(merged, part).extend(getattr(plan, part))
    return merged
