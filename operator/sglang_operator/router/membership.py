"""Which workers to add to and remove from one router pod so that its list equals the desired set. Pure.

An entry is keyed on (url, worker type, bootstrap port): smg checks neither the type nor the port (a decode server
registered as prefill is used as one; a prefill registered with another port sends decode servers there), and a
PATCH of either answers 202 and changes nothing (shared/reference/pd.md). So an entry listed with the wrong type or
port is removed, and its URL registered again once the removal is applied (smg answers 409 to a URL it still lists).
"""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .client import REGULAR, RouterWorker, WorkerType


@dataclass(frozen=True)
class DesiredWorker:
    """One worker a router should list: a regular one in a colocated fleet; in a prefill/decode fleet a prefill
    with its bootstrap port, or a decode."""

    url: str
    worker_type: WorkerType = REGULAR
    bootstrap_port: int | None = None

    def matches(self, listed: RouterWorker) -> bool:
        return (listed.url, listed.worker_type, listed.bootstrap_port) == (
            self.url, self.worker_type, self.bootstrap_port)  # fmt: skip


def desired_workers(entries: Iterable[str | DesiredWorker]) -> dict[str, DesiredWorker]:
    """URL -> its desired entry; a bare URL is a regular worker (a colocated fleet). Pure."""
    wanted: dict[str, DesiredWorker] = {}
    for entry in entries:
        worker = entry if isinstance(entry, DesiredWorker) else DesiredWorker(entry)
        wanted[worker.url] = worker
    return wanted


@dataclass(frozen=True)
class MembershipPlan:
    add: tuple[str, ...]
    """URLs the router does not list: registered now."""
    remove: tuple[RouterWorker, ...]
    replace: tuple[str, ...] = ()
    """URLs the router lists only with the wrong type or port: registered again once their removal is applied."""

    @property
    def empty(self) -> bool:
        return not self.add and not self.remove and not self.replace


def plan_membership(desired: Iterable[str | DesiredWorker], observed: Iterable[RouterWorker]) -> MembershipPlan:
    """Keep exactly one matching entry per desired worker; remove unknown URLs, entries of the wrong type or port,
    and duplicates (keeping the healthiest)."""
    wanted = desired_workers(desired)
    keep: dict[str, RouterWorker] = {}
    remove: list[RouterWorker] = []
    for worker in sorted(observed, key=lambda w: (not w.healthy, w.id)):
        entry = wanted.get(worker.url)
        if entry is None or worker.url in keep or not entry.matches(worker):
            remove.append(worker)
        else:
            keep[worker.url] = worker
    missing = wanted.keys() - keep.keys()
    removed_urls = {w.url for w in remove}
    return MembershipPlan(
        add=tuple(sorted(missing - removed_urls)),
        remove=tuple(sorted(remove, key=lambda w: w.id)),
        replace=tuple(sorted(missing & removed_urls)),
    )


def registered(desired: Mapping[str, DesiredWorker], observed: Iterable[RouterWorker]) -> int:
    """How many desired workers the router lists as desired (URL, type and port). Pure."""
    return len({w.url for w in observed if w.url in desired and desired[w.url].matches(w)})


def missing_roles(observed: Iterable[RouterWorker]) -> list[str]:
    """The roles a prefill/decode router lists no worker of: it serves only once it lists at least one prefill and
    one decode (smg answers 503 otherwise). Pure."""
    types = {w.worker_type for w in observed}
    return [role for role in ("prefill", "decode") if role not in types]
