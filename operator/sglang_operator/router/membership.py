"""Which workers to add to and remove from one router pod so that its list equals the desired set. Pure."""

from collections.abc import Iterable
from dataclasses import dataclass

from .client import RouterWorker


@dataclass(frozen=True)
class MembershipPlan:
    add: tuple[str, ...]
    remove: tuple[RouterWorker, ...]

    @property
    def empty(self) -> bool:
        return not self.add and not self.remove


def plan_membership(desired_urls: Iterable[str], observed: Iterable[RouterWorker]) -> MembershipPlan:
    """Keep exactly one entry per desired URL; remove unknown URLs and duplicates (keeping the healthiest)."""
    desired = set(desired_urls)
    keep: dict[str, RouterWorker] = {}
    remove: list[RouterWorker] = []
    for worker in sorted(observed, key=lambda w: (not w.healthy, w.id)):
        if worker.url not in desired or worker.url in keep:
            remove.append(worker)
        else:
            keep[worker.url] = worker
    add = tuple(sorted(desired - keep.keys()))
    return MembershipPlan(add=add, remove=tuple(sorted(remove, key=lambda w: w.id)))
