"""Per-CR loops the operator starts itself, not as kopf daemons, so that a standby replica runs kopf (its watches and
indexes filled, ready to lead at once) without writing anything.

A kopf daemon makes kopf add its finalizer to every CR it sees and remove it on deletion: two replicas running kopf
with daemons would both write. Here kopf only watches (indexes and `on.event` handlers, which write nothing), and the
`Supervisor` runs each loop kind it was given (reconcile, autoscaler, doctor: the entry point composes them) for every
CR that wants one, once this replica leads. The finalizer (`sglang.ai/operator`) is the leader's, as kopf kept it:
added to a CR first seen without it, removed from a deleted CR once its loops have stopped, so a CR is never gone
while one of its loops still writes.

The decisions (`wanted_loops`, `finalizer_patch`) are pure; `Supervisor` holds the tasks and is driven from the
event loop only (no lock).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from ..api.constants import GROUP
from .workqueue import Priority, run_in_pool

log = logging.getLogger(__name__)

FINALIZER: Final = f"{GROUP}/operator"
STOP_TIMEOUT_SECONDS: Final = 10.0
"""A stopped loop has this long to end by itself before it is cancelled (kopf's `cancellation_timeout`)."""
FINALIZER_RETRY_SECONDS: Final = 5.0
"""A finalizer write that failed is tried again after this long (an event of the CR may retry it sooner)."""

CRKey = tuple[str, str]  # (namespace, name)
LoopKey = tuple[str, str, str]  # (kind, namespace, name)


class Stopped:
    """kopf's `DaemonStopped` for our loops: falsy while the loop should run, truthy once it must end."""

    def __init__(self) -> None:
        self._stopped = False

    def __bool__(self) -> bool:
        return self._stopped

    def set(self) -> None:
        self._stopped = True


class Live(Mapping[str, Any]):
    """A read-only view that reads the CR (or a part of it) as the watch last showed it at every access: what a kopf
    daemon's `body` and `spec` were. The bodies it reads are replaced per event, never changed in place."""

    def __init__(self, read: Callable[[], Mapping[str, Any]]) -> None:
        self._read = read

    def __getitem__(self, key: str) -> Any:
        return self._read()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._read())

    def __len__(self) -> int:
        return len(self._read())


LoopFn = Callable[..., Awaitable[None]]
"""`fn(stopped=Stopped, name=str, namespace=str, body=Live, spec=Live, **indexes)`: what a kopf daemon was given."""


@dataclass(frozen=True)
class LoopKind:
    """One loop per CR for which `wanted(body)` holds; `run` gets what a kopf daemon got (indexes by name)."""

    name: str
    run: LoopFn
    wanted: Callable[[Mapping[str, Any]], bool]


# -- decisions ---------------------------------------------------------------------------------------------------
def deleting(body: Mapping[str, Any]) -> bool:
    return bool((body.get("metadata") or {}).get("deletionTimestamp"))


def wanted_loops(kinds: Sequence[LoopKind], body: Mapping[str, Any] | None) -> frozenset[str]:
    """The loop kinds a CR should have running: none once it is gone or being deleted. Pure."""
    if body is None or deleting(body):
        return frozenset()
    return frozenset(kind.name for kind in kinds if kind.wanted(body))


def finalizer_patch(body: Mapping[str, Any], finalizer: str = FINALIZER) -> list[dict[str, Any]] | None:
    """The JSON patch the leader sends for its finalizer now: add it to a live CR without it, remove it from a deleted
    CR (the caller asks only once the CR's loops have stopped); None when nothing is due. The patch first tests the
    `resourceVersion` it was decided on, so a concurrent change of the CR (another finalizer, another writer) makes
    the API server refuse it (422) instead of losing that change; the change's own event decides again. Pure."""
    metadata = body.get("metadata") or {}
    finalizers = list(metadata.get("finalizers") or [])
    test = {"op": "test", "path": "/metadata/resourceVersion", "value": metadata.get("resourceVersion")}
    if deleting(body):
        if finalizer not in finalizers:
            return None
        return [test, {"op": "remove", "path": f"/metadata/finalizers/{finalizers.index(finalizer)}"}]
    if finalizer in finalizers:
        return None
    if "finalizers" not in metadata:
        return [test, {"op": "add", "path": "/metadata/finalizers", "value": [finalizer]}]
    return [test, {"op": "add", "path": "/metadata/finalizers/-", "value": finalizer}]


# -- the tasks ---------------------------------------------------------------------------------------------------
class Supervisor:
    """Starts and stops the loops of every CR from what the watch shows (`observe`), once this replica leads
    (`lead`). A loop that ends by itself is not started again while its CR keeps wanting it (kopf's rule for a
    daemon that returned); one stopped because it is no longer wanted is started again once it is."""

    def __init__(
        self,
        kinds: Sequence[LoopKind],
        write_patch: Callable[[str, str, list[dict[str, Any]]], None],
        stop_timeout: float = STOP_TIMEOUT_SECONDS,
        retry_seconds: float = FINALIZER_RETRY_SECONDS,
    ) -> None:
        self.kinds, self.write_patch = kinds, write_patch
        self.stop_timeout, self.retry_seconds = stop_timeout, retry_seconds
        self.leading = False
        self.bodies: dict[CRKey, Mapping[str, Any]] = {}
        self.indexes: Mapping[str, Any] = {}
        self.tasks: dict[LoopKey, tuple[asyncio.Task[None], Stopped]] = {}
        self.ended: set[LoopKey] = set()
        self.writes: dict[CRKey, asyncio.Future[None]] = {}  # the finalizer write in flight per CR

    def observe(
        self, namespace: str, name: str, body: Mapping[str, Any] | None, indexes: Mapping[str, Any]
    ) -> Mapping[str, Any] | None:
        """A watch event of a CR (`body` None: it is gone). Returns the body seen before, if any."""
        key = (namespace, name)
        previous = self.bodies.pop(key, None) if body is None else self.bodies.get(key)
        if body is not None:
            self.bodies[key] = body
        self.indexes = indexes
        self._converge(key)
        return previous

    def lead(self) -> None:
        """This replica leads from now on: every known CR gets its loops (and its finalizer)."""
        self.leading = True
        for key in list(self.bodies):
            self._converge(key)

    def running(self, key: CRKey) -> list[str]:
        return sorted(kind for kind, namespace, name in self.tasks if (namespace, name) == key)

    async def stop_all(self) -> None:
        """The operator stops: no new loop or write; every loop is asked to stop, then cancelled after the timeout."""
        self.leading = False
        for _, stopped in self.tasks.values():
            stopped.set()
        tasks = [task for task, _ in self.tasks.values()]
        if tasks:
            _, late = await asyncio.wait(tasks, timeout=self.stop_timeout)
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)

    def _converge(self, key: CRKey) -> None:
        if not self.leading:
            return
        body = self.bodies.get(key)
        wanted = wanted_loops(self.kinds, body)
        for kind in self.kinds:
            loop_key = (kind.name, *key)
            if kind.name not in wanted:
                self.ended.discard(loop_key)
                if loop_key in self.tasks:
                    self._stop(loop_key)
            elif loop_key not in self.tasks and loop_key not in self.ended:
                self._start(kind, key)
        if body is None or key in self.writes or (deleting(body) and self.running(key)):
            return
        patch = finalizer_patch(body)
        if patch is not None:
            self.writes[key] = asyncio.ensure_future(self._write_finalizer(key, patch))

    def _start(self, kind: LoopKind, key: CRKey) -> None:
        namespace, name = key
        last = {"body": self.bodies[key]}

        def current() -> Mapping[str, Any]:
            last["body"] = self.bodies.get(key, last["body"])  # a deleted CR keeps its last body
            return last["body"]

        stopped = Stopped()
        body = Live(current)
        spec = Live(lambda: current().get("spec") or {})
        task = asyncio.ensure_future(
            kind.run(stopped=stopped, name=name, namespace=namespace, body=body, spec=spec, **self.indexes)
        )
        loop_key = (kind.name, *key)
        self.tasks[loop_key] = (task, stopped)
        task.add_done_callback(functools.partial(self._ended, loop_key, stopped))

    def _stop(self, loop_key: LoopKey) -> None:
        task, stopped = self.tasks[loop_key]
        if not stopped:
            stopped.set()
            asyncio.get_running_loop().call_later(self.stop_timeout, task.cancel)

    def _ended(self, loop_key: LoopKey, stopped: Stopped, task: asyncio.Task[None]) -> None:
        if self.tasks.get(loop_key, (None, None))[0] is task:
            del self.tasks[loop_key]
        if not task.cancelled() and task.exception() is not None:
            log.error("%s loop of %s/%s failed", *loop_key, exc_info=task.exception())
        if not stopped:
            self.ended.add(loop_key)
            log.warning("%s loop of %s/%s ended by itself; it starts again once no longer wanted", *loop_key)
        self._converge(loop_key[1:])

    async def _write_finalizer(self, key: CRKey, patch: list[dict[str, Any]]) -> None:
        try:
            await run_in_pool(functools.partial(self.write_patch, *key, patch), priority=Priority.EVENT)
        except Exception as exc:  # 422: the CR changed meanwhile (its event decides again); else retried
            log.info("finalizer of %s/%s not written (%s); deciding again", *key, exc)
            asyncio.get_running_loop().call_later(self.retry_seconds, self._converge, key)
        finally:
            self.writes.pop(key, None)
