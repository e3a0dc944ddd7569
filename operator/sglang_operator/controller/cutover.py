"""A prefill/decode fleet's cut-over from one KV epoch to the next: which replicas keep serving, and when the router
Service moves. Pure.

Within one router no order of additions and removals avoids both a pair of an old prefill and a new decode and a
moment with one role missing (smg answers 503 then), so a change of what a KV handoff depends on (`kvepoch.py`)
switches between two routers, at the Service (docs/pd.md, "Rollouts"):

1. the new epoch's routers start in the idle router slot; every group creates its new replicas in full while the
   serving generation's are held (`held_replicas`); each router lists only workers of its own epoch;
2. once every group's new replicas are ready and listed by every new router, with both roles, and as many new
   router pods are ready as the spec asks for (`switch_check`), the router Service's selector moves to the new
   epoch: one write;
3. the old generation is held SETTLE_SECONDS more, for clients (kube-proxy, gateways) still sending on the old
   routers' endpoints, then drains like any old revision; its router slot goes once none of its workers is left.
"""

from collections.abc import Sequence
from dataclasses import dataclass

from ..kvepoch import Cutover
from ..observed import ReplicaView, operator_stamp
from ..router.membership import missing_roles
from .fleet import GroupPass
from .routers import RouterState

SETTLE_SECONDS = 15.0
"""How long the old generation keeps serving after the Service moved: an endpoint change reaches kube-proxy and
gateways within seconds, and a request already on an old router finishes on an old pair meanwhile."""


def settling(cutover: Cutover, now: float) -> bool:
    """The Service moved to the serving epoch less than SETTLE_SECONDS ago."""
    since = operator_stamp(cutover.since)
    return since is not None and 0 <= now - since < SETTLE_SECONDS


def held_replicas(cutover: Cutover | None, replicas: Sequence[ReplicaView], now: float) -> frozenset[int]:
    """The replicas that keep serving whatever their group's rollout bounds: the serving epoch's during a cut-over,
    every other epoch's while the switch settles."""
    if cutover is None:
        return frozenset()
    if cutover.in_progress:
        return frozenset(r.index for r in replicas if cutover.of(r.epoch) == cutover.serving)
    if settling(cutover, now):
        return frozenset(r.index for r in replicas if cutover.of(r.epoch) != cutover.desired)
    return frozenset()


@dataclass(frozen=True)
class SwitchCheck:
    ready: bool
    note: str
    """What status says of the cut-over while it waits."""


def switch_check(
    cutover: Cutover, groups: Sequence[GroupPass], routers: RouterState, router_replicas: int
) -> SwitchCheck:
    """Whether the router Service may move to the desired epoch: every group's new replicas ready and listed by
    every reachable router of that epoch, with both roles, no router unreachable, and `router_replicas` of them."""
    new_routers = routers.of_epoch(cutover.desired)
    listed = routers.listed_by_all(cutover.desired)
    wanted = ready = 0
    for group in groups:
        if group.retired:
            continue
        wanted += group.active
        serving = [
            r for r in group.replicas
            if r.revision == group.revision and cutover.of(r.epoch) == cutover.desired and r.ready and not r.warm
            and r.draining_since is None and r.url in listed
        ]  # fmt: skip
        ready += min(group.active, len(serving))
    both_roles = all(not missing_roles(routers.lists[base]) for base in new_routers)
    ok = not routers.errors and len(new_routers) >= router_replicas and both_roles and ready >= wanted > 0
    note = (
        f"cutting over to KV epoch {cutover.desired}: {ready}/{wanted} new replicas ready and listed by "
        f"{len(new_routers)}/{router_replicas} new router pods; the router Service stays on epoch {cutover.serving} "
        "until all are"
    )
    return SwitchCheck(ok, note)
