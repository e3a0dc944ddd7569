"""The one bounded pool every reconcile and autoscaling pass runs in, and the timing of the next pass.

Each SGLangDeployment's loops are coroutines (they hold no thread while they wait); a pass itself is blocking I/O
(the kubernetes client; HTTP calls to routers, workers and Prometheus wait on `httpcall`'s one loop) and runs in
this pool, so the number of threads is fixed by the settings (`OperatorSettings.workers`), whatever the number of
CRs. Passes beyond the pool's size wait in its queue; how many wait and for how long are the metrics
`sglang_operator_workqueue_depth` and `..._wait_seconds`.
"""

import asyncio
import enum
import functools
import itertools
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Final, TypeVar

from .. import metrics
from ..settings import DEFAULT_WORKERS

BACKOFF_BASE_SECONDS: Final = 1.0
BACKOFF_MAX_SECONDS: Final = 60.0

T = TypeVar("T")


class Priority(enum.IntEnum):
    """Which pass goes first when passes wait for a thread (lower first; equal ones in arrival order)."""

    REGISTRATION = 0
    """A worker or router pod has just turned Ready: until a pass registers the worker (or fills the router), a
    replica the fleet pays for serves nothing."""
    EVENT = 1
    """Something else changed (a spec, a scale target, a pod's other state, a new CR)."""
    RESYNC = 2
    """Nothing asked for it: the periodic pass."""


def backoff_seconds(failures: int, resync: float) -> float:
    """The wait before the next pass: the resync period after a good pass (`failures` 0), else exponential from
    `BACKOFF_BASE_SECONDS`, capped at `BACKOFF_MAX_SECONDS` (a CR whose passes keep failing costs one pass a minute,
    not one per resync). Pure."""
    if failures <= 0:
        return resync
    return float(min(BACKOFF_BASE_SECONDS * 2.0 ** min(failures - 1, 30), BACKOFF_MAX_SECONDS))


class PriorityPool:
    """A fixed number of threads taking work by `Priority`, then in arrival order.

    With hundreds of CRs resyncing, a plain FIFO makes a Ready worker wait for its CR's pass behind every resync
    queued before it (docs/scale.md: the registration time at N = 200 was that wait). In a creation burst every pass
    is an event's, so events alone do not order it: the passes due to register (a worker or router pod has just
    turned Ready) go first, then the other events' passes, then resyncs. Lower tiers are never starved for long:
    they only wait while higher ones arrive faster than the pool drains them."""

    def __init__(self, workers: int, name: str) -> None:
        self._queue: queue.PriorityQueue[tuple[int, int, Any]] = queue.PriorityQueue()
        self._order = itertools.count()
        self._threads = [threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True) for i in range(workers)]
        for thread in self._threads:
            thread.start()

    def submit(self, fn: Callable[..., T], *args: Any, priority: Priority = Priority.RESYNC) -> Future[T]:
        future: Future[T] = Future()
        self._queue.put((int(priority), next(self._order), (future, functools.partial(fn, *args))))
        return future

    def shutdown(self) -> None:
        for _ in self._threads:
            self._queue.put((len(Priority), next(self._order), None))
        for thread in self._threads:
            thread.join(timeout=10)

    def _work(self) -> None:
        while True:
            _, _, item = self._queue.get()
            if item is None:
                return
            future, call = item
            if not future.set_running_or_notify_cancel():
                continue  # cancelled while it waited
            try:
                future.set_result(call())
            except BaseException as exc:  # the caller's await raises it
                future.set_exception(exc)


_pools: list[PriorityPool] = []


def start_pool(workers: int) -> PriorityPool:
    """The one pool of this process, started with `workers` threads (the runner, from the settings) before any loop
    runs; started once: a second call returns the first pool."""
    if not _pools:
        _pools.append(PriorityPool(workers, "sglang-pass"))
    return _pools[0]


def shared_pool() -> PriorityPool:
    """The process's pool; one of the default size when the runner did not start one (tests, one-off passes)."""
    return start_pool(DEFAULT_WORKERS)


_waiting = 0
_waiting_lock = threading.Lock()


def _queued(delta: int) -> None:
    global _waiting
    with _waiting_lock:
        _waiting += delta
        metrics.QUEUE_DEPTH.set(_waiting)


def _timed(fn: Callable[[], T], submitted: float) -> T:
    _queued(-1)
    metrics.QUEUE_WAIT_SECONDS.observe(time.monotonic() - submitted)
    return fn()


class Preempted(Exception):
    """The work was taken back from the queue before a thread started it: its caller asked for it (`preempt`)."""


async def run_in_pool(
    fn: Callable[[], T],
    pool: ThreadPoolExecutor | PriorityPool | None = None,
    priority: Priority = Priority.RESYNC,
    preempt: asyncio.Event | None = None,
) -> T:
    """Run `fn` in the shared pool and await it, counting the time it waits for a worker; work of a higher
    `priority` goes first (see `PriorityPool`).

    `preempt`: when it is set while `fn` still waits for a thread, `fn` is taken back and `Preempted` raised, so the
    caller can submit fresher, more urgent work instead (a CR's loop whose pod has just turned Ready, while its
    event's pass still queues: that pass would run on an older snapshot, and the registration would wait for it).
    Once a thread has started `fn`, it runs to the end.

    A cancelled caller (kopf stops the CR's daemon) leaves a started pass to finish in its thread: a pass is
    bounded (every call has a deadline), and stopping it half way would leave nothing better behind."""
    _queued(+1)
    pool = pool or shared_pool()
    if isinstance(pool, PriorityPool):
        submitted = pool.submit(_timed, fn, time.monotonic(), priority=priority)
    else:
        submitted = pool.submit(_timed, fn, time.monotonic())
    result: asyncio.Future[T] = asyncio.wrap_future(submitted)
    try:
        if preempt is not None and await _preempted(result, preempt) and submitted.cancel():
            _queued(-1)
            raise Preempted
        return await result
    except asyncio.CancelledError:
        if submitted.cancelled():  # cancelled before a worker took it: it no longer waits
            _queued(-1)
        raise


async def _preempted(result: asyncio.Future[Any], preempt: asyncio.Event) -> bool:
    """Wait until `result` is done or `preempt` is set, whichever comes first; True for `preempt`."""
    signal = asyncio.ensure_future(preempt.wait())
    try:
        await asyncio.wait({result, signal}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        signal.cancel()
    return not result.done()
