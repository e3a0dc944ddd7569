"""Router membership I/O: read every ready router pod's worker list, then add and remove workers to match.

Each router pod keeps its own list, so each is read and corrected on its own; a restarted router pod comes back
empty and is refilled on the next pass. An entry of the wrong type or bootstrap port (a prefill/decode fleet) is
removed and, once the router applied that, registered again as it should be (`membership.plan_membership`).
"""

import contextlib
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .. import metrics
from ..observed import pod_epoch
from ..router.client import DEFAULT_TIMEOUT_SECONDS, RouterClient, RouterError, RouterWorker
from ..router.membership import (
    DesiredWorker,
    MembershipPlan,
    desired_workers,
    missing_roles,
    plan_membership,
    registered,
)
from .status import RouterObservation


@dataclass
class RouterState:
    """What each reachable router pod listed at the start of the pass."""

    lists: dict[str, list[RouterWorker]] = field(default_factory=dict)  # base URL -> workers
    errors: list[str] = field(default_factory=list)
    """One message per ready router pod whose list could not be read: what it lists is unknown, not empty."""
    api_key: str | None = None
    worker_api_key: str | None = None
    """The workers' key, handed to each router with the worker so the router can call it."""
    epochs: dict[str, str] = field(default_factory=dict)
    """Base URL -> the router pod's KV epoch (a prefill/decode fleet's; "" in a colocated fleet): a router lists only
    the workers of its own epoch (`kvepoch.py`)."""

    @property
    def every_router_read(self) -> bool:
        """Every ready router pod's list was read: only then is a URL that none lists off every router (one that
        timed out may still route to any worker)."""
        return not self.errors

    def registered_urls(self) -> set[str]:
        """URLs at least one router lists."""
        return {worker.url for workers in self.lists.values() for worker in workers}

    def listed_by_all(self, epoch: str) -> set[str]:
        """URLs every reachable router of `epoch` lists (none when no router of it is reachable)."""
        listed = [{w.url for w in self.lists[base]} for base in self.of_epoch(epoch)]
        return set.intersection(*listed) if listed else set()

    def listed_everywhere(self) -> set[str]:
        """URLs every reachable router of their epoch lists (in a colocated fleet: every reachable router)."""
        return set().union(*(self.listed_by_all(epoch) for epoch in {self.epochs.get(b, "") for b in self.lists}))

    def of_epoch(self, epoch: str) -> list[str]:
        """The reachable routers of `epoch`, by base URL."""
        return [base for base in self.lists if self.epochs.get(base, "") == epoch]


def _ready_routers(router_pods: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(base URL, KV epoch label) of each ready router pod."""
    urls = []
    for pod in router_pods:
        status, meta = pod.get("status") or {}, pod["metadata"]
        conditions = {c["type"]: c["status"] for c in status.get("conditions") or []}
        if meta.get("deletionTimestamp") or conditions.get("Ready") != "True" or not status.get("podIP"):
            continue
        container = ((pod.get("spec") or {}).get("containers") or [{}])[0]
        port = next((p.get("containerPort") for p in container.get("ports") or [] if p.get("name") == "http"), None)
        port = port if isinstance(port, int) and 0 < port < 65536 else 30000
        urls.append((f"http://{status['podIP']}:{port}", pod_epoch(pod)))
    return sorted(urls)


REMOVAL_CONFIRM_SECONDS = 10.0


def _routable(workers: list[RouterWorker]) -> list[RouterWorker]:
    """smg keeps a removed worker listed as `draining` for a few seconds; it routes nothing there any more."""
    return [worker for worker in workers if worker.status != "draining"]


@dataclass
class _Removals:
    """What one router was sent DELETEs for on this pass, while the pass waits for the router to apply them."""

    removed: tuple[RouterWorker, ...]
    replacing: set[str] = field(default_factory=set)
    """URLs to register again (with the right type or port) once no entry of theirs is listed, in any status: smg
    answers 409 to a URL it still lists."""

    def update(self, listed: list[RouterWorker]) -> None:
        """Keep only what `listed` still shows: the removed entries it routes, the URLs it still lists."""
        routable = {w.id for w in _routable(listed)}
        self.removed = tuple(w for w in self.removed if w.id in routable)
        self.replacing &= {w.url for w in listed}

    @property
    def done(self) -> bool:
        return not self.removed and not self.replacing


def _await_removals(routers: dict[str, RouterClient], pending: dict[str, _Removals]) -> set[str]:
    """smg queues removals (202) and applies them within about a second (longer when busy). Waiting here means a
    replica is only marked draining once no router can still pick it, and a wrong entry is registered again only once
    it is gone. `pending` is narrowed in place to what is still listed at the deadline; returns the URLs a router
    still routes then, which the caller leaves for the next pass. A router that cannot be read confirms nothing: its
    removals stay pending (a timed-out read is not an empty list)."""
    deadline = time.monotonic() + REMOVAL_CONFIRM_SECONDS
    waiting = {base for base, removals in pending.items() if not removals.done}
    while waiting:
        for base in sorted(waiting):
            # Each read ends by the loop's deadline too (a slow router cannot stretch the wait call by call).
            routers[base].timeout = max(0.1, min(DEFAULT_TIMEOUT_SECONDS, deadline - time.monotonic()))
            # A failed read is unknown, not empty: the router may still route what it was told to remove (read
            # again until the deadline).
            with contextlib.suppress(RouterError):
                pending[base].update(routers[base].list_workers())
            if pending[base].done:
                waiting.discard(base)
        if not waiting or time.monotonic() >= deadline:
            break
        time.sleep(0.1)
    return {w.url for removals in pending.values() for w in removals.removed}


def observe_routers(
    router_pods: list[dict[str, Any]],
    api_key: str | None,
    worker_api_key: str | None = None,
    epoch_of: Callable[[str], str] = str,
) -> RouterState:
    """`epoch_of`: a router pod's KV epoch from its label (`Cutover.of`: an unlabelled pod is the serving epoch's)."""
    state = RouterState(api_key=api_key, worker_api_key=worker_api_key)
    for base_url, label in _ready_routers(router_pods):
        state.epochs[base_url] = epoch_of(label)
        router = RouterClient(base_url, api_key)
        try:
            state.lists[base_url] = _routable(router.list_workers())
        except RouterError as exc:
            state.errors.append(str(exc))
        finally:
            router.close()
    return state


@dataclass(frozen=True)
class SyncResult:
    observation: RouterObservation
    failures: list[str]
    unconfirmed_removals: set[str]
    """URLs whose removal a router has not applied yet, or could not be sent or confirmed: not safe to drain on this
    pass."""
    changed: bool = False
    """Some router was sent an addition or removal: the observation shows the lists from before."""


def _register(router: RouterClient, urls: Iterable[str], wanted: dict[str, DesiredWorker], key: str | None) -> None:
    for url in urls:
        worker = wanted[url]
        router.add_worker(url, key, worker.worker_type, worker.bootstrap_port)
        metrics.count_router_operation("register", ok=True)


def _send(router: RouterClient, plan: MembershipPlan, wanted: dict[str, DesiredWorker], key: str | None) -> None:
    """One router's removals, then its additions (its re-registrations wait for the removals: `_await_removals`).
    A RouterError is raised on, after its operation is counted as failed."""
    operation = "deregister"
    try:
        for worker in plan.remove:
            router.remove_worker(worker.id)
            metrics.count_router_operation(operation, ok=True)
        operation = "register"
        _register(router, plan.add, wanted, key)
    except RouterError:
        metrics.count_router_operation(operation, ok=False)
        raise


def sync_routers(
    state: RouterState,
    desired: Sequence[str | DesiredWorker],
    disaggregated: bool = False,
    worker_epochs: Mapping[str, str] | None = None,
    serving_epoch: str = "",
) -> SyncResult:
    """Make every observed router list the `desired` workers of its KV epoch (`worker_epochs`: URL -> epoch; None:
    one epoch, every router lists them all; bare URLs: regular workers). Status reports the routers of
    `serving_epoch`, those the router Service selects. In a prefill/decode fleet (`disaggregated`) a router counts as
    synced only when it lists at least one prefill and one decode: smg answers 503 to every request until it does."""
    failures = list(state.errors)
    wanted = desired_workers(desired)
    by_router = {base: _of_epoch(wanted, worker_epochs, state.epochs.get(base, "")) for base in state.lists}
    plans = {base: plan_membership(by_router[base].values(), workers) for base, workers in state.lists.items()}
    routers = {base: RouterClient(base, state.api_key) for base in state.lists}
    pending: dict[str, _Removals] = {}
    unconfirmed: set[str] = set()
    try:
        # Every router gets its removals and additions first; confirmation waits once, for all of them together.
        for base, plan in plans.items():
            if plan.empty:
                continue
            try:
                _send(routers[base], plan, wanted, state.worker_api_key)
            except RouterError as exc:
                failures.append(str(exc))
                unconfirmed |= {worker.url for worker in plan.remove}  # this router may still route them all
                continue
            if plan.remove:
                pending[base] = _Removals(plan.remove, set(plan.replace))
        if pending:
            unconfirmed |= _await_removals(routers, pending)
        failures += _register_again(routers, plans, pending, wanted, state.worker_api_key)
    finally:
        for router in routers.values():
            router.close()
    reported = state.of_epoch(serving_epoch) if worker_epochs is not None else list(state.lists)
    serving = {base: state.lists[base] for base in reported}
    missing = _roles_missing(serving) if disaggregated else []
    observation = RouterObservation(
        enabled=True,
        ready_pods=len(serving),
        registered=min((registered(by_router[base], workers) for base, workers in serving.items()), default=0),
        synced=not state.errors and bool(serving) and all(plan.empty for plan in plans.values()) and not missing,
        error="; ".join(failures) if failures else None,
        note=f"not every router pod lists a {' and a '.join(missing)} worker yet" if missing else None,
    )
    return SyncResult(observation, failures, unconfirmed, changed=any(not plan.empty for plan in plans.values()))


def _of_epoch(
    wanted: dict[str, DesiredWorker], epochs: Mapping[str, str] | None, epoch: str
) -> dict[str, DesiredWorker]:
    """The desired workers a router of `epoch` lists: all of them without epochs (a colocated fleet). Pure."""
    return wanted if epochs is None else {url: w for url, w in wanted.items() if epochs.get(url, "") == epoch}


def _roles_missing(lists: dict[str, list[RouterWorker]]) -> list[str]:
    """The roles some router of a prefill/decode fleet lists no worker of. Pure."""
    return sorted({role for workers in lists.values() for role in missing_roles(workers)})


def _register_again(
    routers: dict[str, RouterClient],
    plans: dict[str, MembershipPlan],
    pending: dict[str, _Removals],
    wanted: dict[str, DesiredWorker],
    key: str | None,
) -> list[str]:
    """Register each replaced URL again on the routers that no longer list it; the failures. A URL still listed at
    the deadline waits for the next pass."""
    failures = []
    for base, removals in pending.items():
        ready = sorted(set(plans[base].replace) - removals.replacing)
        try:
            _register(routers[base], ready, wanted, key)
        except RouterError as exc:
            metrics.count_router_operation("register", ok=False)
            failures.append(str(exc))
    return failures
