"""Router membership I/O: read every ready router pod's worker list, then add and remove workers to match.

Each router pod keeps its own list, so each is read and corrected on its own; a restarted router pod comes back
empty and is refilled on the next pass.
"""

import time
from dataclasses import dataclass, field
from typing import Any

from .. import metrics
from ..router.client import DEFAULT_TIMEOUT_SECONDS, RouterClient, RouterError, RouterWorker
from ..router.membership import plan_membership
from .status import RouterObservation


@dataclass
class RouterState:
    """What each reachable router pod listed at the start of the pass."""

    lists: dict[str, list[RouterWorker]] = field(default_factory=dict)  # base URL -> workers
    errors: list[str] = field(default_factory=list)
    api_key: str | None = None
    worker_api_key: str | None = None
    """The workers' key, handed to each router with the worker so the router can call it."""

    def registered_urls(self) -> set[str]:
        """URLs at least one router lists."""
        return {worker.url for workers in self.lists.values() for worker in workers}

    def listed_everywhere(self) -> set[str]:
        """URLs every reachable router lists."""
        listed = [{worker.url for worker in workers} for workers in self.lists.values()]
        return set.intersection(*listed) if listed else set()


def _ready_router_urls(router_pods: list[dict[str, Any]]) -> list[str]:
    urls = []
    for pod in router_pods:
        status, meta = pod.get("status") or {}, pod["metadata"]
        conditions = {c["type"]: c["status"] for c in status.get("conditions") or []}
        if meta.get("deletionTimestamp") or conditions.get("Ready") != "True" or not status.get("podIP"):
            continue
        container = ((pod.get("spec") or {}).get("containers") or [{}])[0]
        port = next((p.get("containerPort") for p in container.get("ports") or [] if p.get("name") == "http"), None)
        port = port if isinstance(port, int) and 0 < port < 65536 else 30000
        urls.append(f"http://{status['podIP']}:{port}")
    return sorted(urls)


REMOVAL_CONFIRM_SECONDS = 10.0


def _routable(workers: list[RouterWorker]) -> list[RouterWorker]:
    """smg keeps a removed worker listed as `draining` for a few seconds; it routes nothing there any more."""
    return [worker for worker in workers if worker.status != "draining"]


def _still_routable(routers: dict[str, RouterClient], removed: dict[str, tuple[RouterWorker, ...]]) -> set[str]:
    """smg queues removals (202) and applies them within about a second (longer when busy). Waiting here means a
    replica is only marked draining once no router can still pick it; URLs still routable at the deadline are
    returned so the caller leaves them for the next pass."""
    deadline = time.monotonic() + REMOVAL_CONFIRM_SECONDS
    pending = {base: {w.id for w in workers} for base, workers in removed.items()}
    while True:
        for base in list(pending):
            # Each read ends by the loop's deadline too (a slow router cannot stretch the wait call by call).
            routers[base].timeout = max(0.1, min(DEFAULT_TIMEOUT_SECONDS, deadline - time.monotonic()))
            try:
                pending[base] &= {w.id for w in _routable(routers[base].list_workers())}
            except RouterError:
                pending[base] = set()  # an unreachable router routes nothing
            if not pending[base]:
                del pending[base]
        if not pending or time.monotonic() >= deadline:
            return {w.url for base, ids in pending.items() for w in removed[base] if w.id in ids}
        time.sleep(0.1)


def observe_routers(
    router_pods: list[dict[str, Any]], api_key: str | None, worker_api_key: str | None = None
) -> RouterState:
    state = RouterState(api_key=api_key, worker_api_key=worker_api_key)
    for base_url in _ready_router_urls(router_pods):
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
    """URLs whose removal a router has not applied yet: not safe to drain on this pass."""
    changed: bool = False
    """Some router was sent an addition or removal: the observation shows the lists from before."""


def sync_routers(state: RouterState, desired_urls: list[str]) -> SyncResult:
    """Make every observed router list equal `desired_urls`."""
    failures = list(state.errors)
    unconfirmed: set[str] = set()
    synced, changed = not state.errors, False
    registered_counts = []
    desired = set(desired_urls)
    routers = {base: RouterClient(base, state.api_key) for base in state.lists}
    removed: dict[str, tuple[RouterWorker, ...]] = {}
    try:
        # Every router gets its removals and additions first; confirmation waits once, for all of them together.
        for base_url, workers in state.lists.items():
            plan = plan_membership(desired, workers)
            registered_counts.append(len({w.url for w in workers} & desired))
            if plan.empty:
                continue
            synced, changed = False, True
            operation = "deregister"
            try:
                for worker in plan.remove:
                    routers[base_url].remove_worker(worker.id)
                    metrics.count_router_operation(operation, ok=True)
                if plan.remove:
                    removed[base_url] = plan.remove
                operation = "register"
                for url in plan.add:
                    routers[base_url].add_worker(url, state.worker_api_key)
                    metrics.count_router_operation(operation, ok=True)
            except RouterError as exc:
                metrics.count_router_operation(operation, ok=False)
                failures.append(str(exc))
        if removed:
            unconfirmed = _still_routable(routers, removed)
    finally:
        for router in routers.values():
            router.close()
    observation = RouterObservation(
        enabled=True,
        ready_pods=len(state.lists),
        registered=min(registered_counts) if registered_counts else 0,
        synced=synced and bool(state.lists),
        error="; ".join(failures) if failures else None,
    )
    return SyncResult(observation, failures, unconfirmed, changed)
