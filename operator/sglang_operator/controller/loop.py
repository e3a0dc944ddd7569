"""The reconcile loop: one coroutine per SGLangDeployment, registered with the runtime's supervisor by the entry
point (`app.py`), which starts it once this replica leads (a standby runs kopf too, its indexes filled, and writes
nothing).

It holds no thread while it waits. It takes a snapshot of the watch caches on the event loop and runs the pass
(`reconcile.Reconciler.run`) in the shared pool (`runtime.workqueue`), so passes of one CR never overlap and all CRs
together use at most the pool's threads. A good pass is followed by the next after the resync period, a failed one
after an exponential back-off; a pod event or a spec change wakes the loop at once (`runtime.wakeups`), and the
pass goes before others in the pool: first when a worker or router pod has just turned Ready (a registration is
due). Such a pod also takes back the loop's pass still queued, so the registration waits neither for that pass nor
for its older snapshot. The loop reads the CR's body as the watch last showed it (`supervisor.Live`): no GET of the
CR per pass.
"""

import functools
import logging
import time
from collections.abc import Mapping
from typing import Any

from .. import metrics
from ..runtime import wakeups
from ..runtime.kube import api_client
from ..runtime.state import EXPECTATION_TIMEOUT_SECONDS, Expectations, PodKey, spec_unobserved, take_snapshot, unmet
from ..runtime.supervisor import Live, LoopKind, Stopped
from ..runtime.watches import children_view
from ..runtime.workqueue import Preempted, Priority, backoff_seconds, run_in_pool
from ..runtime.writer import possible_children
from ..settings import OperatorSettings
from .reconcile import PassResult, Reconciler

log = logging.getLogger(__name__)

FOLLOW_UP_SECONDS = 1.0
"""After a pass that changed the routers' lists, the next pass comes this soon, at registration's priority: it sees
the new lists and writes the status they make (the CR Ready), instead of a resync period and the queue's wait later
(docs/scale.md, the registration time at 200 new fleets). A router lists a worker about a second after its POST."""
MAX_FOLLOW_UPS = 3
"""Follow-ups in a row at most: a router that accepts a worker and never lists it gets the resync period again,
until a pass changes nothing."""
EXPECTATION_POLL_SECONDS = 1.0
"""While a loop waits for the watch to show its last writes, it looks again this often (a pod event wakes it
sooner)."""


def reconcile_loop(settings: OperatorSettings) -> LoopKind:
    """The reconcile loop as the supervisor runs it: every CR has one."""
    return LoopKind("reconcile", functools.partial(sgld_reconcile_loop, settings=settings), lambda body: True)


async def sgld_reconcile_loop(
    stopped: Stopped,
    name: str,
    namespace: str,
    body: Live,
    settings: OperatorSettings,
    **indexes: Any,
) -> None:
    """`indexes`: every kopf index by its function's name (and `spec`, unused here)."""
    reconciler = Reconciler(api_client(), settings)
    sgld_pods: Mapping[PodKey, Any] = indexes["sgld_pods"]
    children = children_view(**indexes)
    child_names = [(ref.kind, ref.name) for ref in possible_children(name)]
    wake = wakeups.register(namespace, name)
    failures = changed_in_a_row = 0
    priority = Priority.EVENT if spec_unobserved(body) else Priority.RESYNC
    expected = Expectations()
    try:
        while not stopped:
            priority = min(priority, wake.take())
            snapshot = take_snapshot(body, sgld_pods, children, child_names, indexes["sgld_scale_targets"])
            pending = unmet(expected, snapshot.pods or [])
            if pending and time.monotonic() - expected.since < EXPECTATION_TIMEOUT_SECONDS:
                # The watch has not shown this loop's last pod writes yet: planning now would repeat them.
                await wakeups.sleep_or_wake(wake, EXPECTATION_POLL_SECONDS)
                continue
            try:
                # A pod of this CR turning Ready while this pass still queues takes it back: the loop goes round
                # at once with a fresh snapshot and registration's priority, instead of after this pass.
                preempt = wake.registration if priority > Priority.REGISTRATION else None
                result: PassResult = await run_in_pool(
                    functools.partial(reconciler.run, snapshot), priority=priority, preempt=preempt
                )
            except Preempted:
                continue
            except Exception:  # a bug outside the pass's own error handling: the loop must survive
                log.exception("reconcile of %s/%s failed", namespace, name)
                result = PassResult(failed=True)
            if result.writes:
                log.info("%s/%s: %s", namespace, name, result.writes)
            expected = result.expected
            failures = failures + 1 if result.failed else 0
            changed_in_a_row = changed_in_a_row + 1 if result.routers_changed else 0
            follow_up = 0 < changed_in_a_row <= MAX_FOLLOW_UPS
            priority = Priority.REGISTRATION if follow_up else Priority.RESYNC
            delay = FOLLOW_UP_SECONDS if follow_up else backoff_seconds(failures, settings.resync_seconds)
            await wakeups.sleep_or_wake(wake, delay)
    finally:
        wakeups.unregister(namespace, name, wake)
        metrics.forget_fleet(namespace, name)
