"""kopf wiring, kept thin: watch caches (indexes), one coroutine per SGLangDeployment, passes in one shared pool.

- **Indexes** (`@kopf.index`): the operator's pods (label `sglang.ai/deployment`, workers and routers alike) by
  (namespace, deployment), and every Service, Deployment, NetworkPolicy, PodMonitor and InferencePool of the watched
  namespaces by (namespace, kind, name), trimmed to identity, owners and render hash. A pass reads a snapshot of
  them, so with nothing changing it sends no request to the API server. kopf calls the event handlers (so the
  supervisor starts the loops) only once the indexes are filled.
- **One coroutine per CR** (`sgld_reconcile_loop`, async), started by the `supervisor` once this replica leads (a
  standby runs kopf too, its indexes filled, and writes nothing): it holds no thread while it waits. It takes a snapshot
  on the event loop and runs the pass in the shared pool (`workqueue.run_in_pool`), so passes of one CR never
  overlap and all CRs together use at most the pool's threads. A good pass is followed by the next after the resync
  period, a failed one after an exponential back-off; a pod event or a spec change wakes the loop at once, and the
  pass goes before others in the pool: first when a worker or router pod has just turned Ready (a registration is
  due). Such a pod also takes back the loop's pass still queued, so the registration waits neither for that pass
  nor for its older snapshot.
- The loop reads the CR's body as the watch last showed it (`supervisor.Live`): no GET of the CR per pass.
"""

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Mapping
from typing import Any

import kopf

from .. import metrics
from ..api.constants import GROUP, LABEL_DEPLOYMENT, PLURAL, VERSION
from ..api.scaletarget import SCALE_PLURAL
from ..controller.reconcile import PassResult, Reconciler
from .kube import api_client
from .state import (
    EXPECTATION_TIMEOUT_SECONDS,
    ChildKey,
    Expectations,
    PodKey,
    plain,
    pod_key,
    pod_signature,
    serving_member,
    spec_unobserved,
    take_snapshot,
    trim_child,
    unmet,
)
from .supervisor import KINDS, Live, Stopped, Supervisor, patch_cr, per_cr_loop
from .workqueue import Preempted, Priority, backoff_seconds, pool_size, resync_seconds, run_in_pool
from .writer import possible_children

log = logging.getLogger(__name__)
WATCH_SERVER_TIMEOUT_SECONDS = 1800
FOLLOW_UP_SECONDS = 1.0
"""After a pass that changed the routers' lists, the next pass comes this soon, at registration's priority: it sees
the new lists and writes the status they make (the CR Ready), instead of a resync period and the queue's wait later
(at 200 new fleets, the median CR was Ready 45 s after its pods for want of that pass). A router lists a worker
about a second after its POST."""
MAX_FOLLOW_UPS = 3
"""Follow-ups in a row at most: a router that accepts a worker and never lists it gets the resync period again,
until a pass changes nothing."""
EXPECTATION_POLL_SECONDS = 1.0
"""While a loop waits for the watch to show its last writes, it looks again this often (a pod event wakes it
sooner)."""


class Wakeup:
    """A CR loop's wake-up: set by events, with the highest priority asked for since the loop last took it."""

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.registration = asyncio.Event()
        """Set with `event` when a registration was asked for: it takes back the loop's pass still queued."""
        self.priority = Priority.RESYNC

    def set(self, priority: Priority) -> None:
        self.priority = min(self.priority, priority)
        self.event.set()
        if priority == Priority.REGISTRATION:
            self.registration.set()

    def take(self) -> Priority:
        """The priority asked for since the last take (RESYNC if none); clears the wake-up."""
        priority, self.priority = self.priority, Priority.RESYNC
        self.event.clear()
        self.registration.clear()
        return priority


_wakeups: dict[tuple[str, str], Wakeup] = {}
_seen: dict[tuple[str, str], dict[str, tuple[int, bool]]] = {}
"""Per running loop, its pods by UID as last seen: what a pass reads of each (`state.pod_signature`) and whether it
was serving. An event that changes neither wakes nothing; one that makes a pod serving is a pod that has just
turned Ready."""


def _register(namespace: str, name: str) -> Wakeup:
    _seen.setdefault((namespace, name), {})
    return _wakeups.setdefault((namespace, name), Wakeup())


def _unregister(namespace: str, name: str, wake: Wakeup) -> None:
    """The daemon is gone (kopf stops it when the CR is deleted, or the operator stops): its entries go too, so the
    maps hold running loops only. Only its own entry: a CR deleted and created again under the same name may have
    registered a new loop already. (Everything here runs on the event loop: no lock.)"""
    if _wakeups.get((namespace, name)) is wake:
        del _wakeups[(namespace, name)]
        _seen.pop((namespace, name), None)


def _wake(namespace: str, name: str, priority: Priority = Priority.EVENT) -> None:
    """Wake the CR's loop if it runs. Events never add entries: a pod of a deleted CR (or any pod carrying the
    label) must not grow the maps."""
    wake = _wakeups.get((namespace, name))
    if wake is not None:
        wake.set(priority)


def _pod_priority(
    namespace: str, deployment: str, uid: str | None, signature: int | None, serving: bool
) -> Priority | None:
    """REGISTRATION when this event shows a worker or router pod newly serving; None when nothing a pass reads of
    the pod changed (no wake-up); else EVENT. `signature` None: the pod is gone. Remembers what it saw."""
    seen = _seen.get((namespace, deployment))
    if seen is None or not uid:
        return Priority.EVENT
    if signature is None:
        seen.pop(uid, None)
        return Priority.EVENT
    previous = seen.get(uid)
    seen[uid] = (signature, serving)
    if serving and (previous is None or not previous[1]):
        return Priority.REGISTRATION
    if previous is not None and previous[0] == signature:
        return None
    return Priority.EVENT


class NoDiffBase(kopf.DiffBaseStorage):
    """kopf builds a diff base (a deep copy of the whole object, managed fields and all) on every event of every
    watched object, for change handlers. This operator has none (the loops read the watch's bodies), so it builds
    nothing: at 200 fleets those copies were 6 % of the leader's samples in the creation burst, in both replicas."""

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> kopf.BodyEssence:
        return kopf.BodyEssence()

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        return None


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    # kopf has no daemon or change handler here (the supervisor runs the loops), so it never needs a finalizer; but
    # it removes the one its settings name from any CR it sees. It must not be ours, which the leader keeps.
    settings.persistence.finalizer = f"{GROUP}/kopf-unused"
    settings.persistence.diffbase_storage = NoDiffBase()
    settings.posting.level = logging.WARNING
    # A watch the API server ends after 30 min is reopened by kopf: one request per watched kind and replica, with
    # the Lease's renewals the operator's whole cost when nothing changes (docs/scale.md; at 60 s it was 21 a
    # minute, at 10 min about 1.8). 30 min is the API server's own least when a client names none
    # (--min-request-timeout). A connection that died silently is not left to this timeout: kopf reopens a watch
    # that has shown nothing, not even a bookmark, for 70 s (its inactivity timeout), and TCP keepalive ends a dead
    # connection within about 3 min (`keepalive`); kopf then reopens the watch from its last version.
    settings.watching.server_timeout = WATCH_SERVER_TIMEOUT_SECONDS
    settings.watching.client_timeout = WATCH_SERVER_TIMEOUT_SECONDS + 30
    settings.networking.request_timeout = 30
    # Every handler here is async; kopf's executor serves only what remains sync (none of ours). Sized anyway, so
    # that nothing sync added later can grow threads with the number of CRs.
    settings.execution.max_workers = pool_size()


# -- indexes -----------------------------------------------------------------------------------------------------
@kopf.index("", "v1", "pods", labels={LABEL_DEPLOYMENT: kopf.PRESENT})
async def sgld_pods(namespace: str | None, labels: Mapping[str, str], body: kopf.Body, **_: Any) -> Any:
    key = pod_key(namespace, labels)
    return None if key is None else {key: plain(body)}


def _child_index(namespace: str | None, name: str | None, body: kopf.Body) -> Any:
    if not namespace or not name:
        return None
    return {(namespace, str(body.get("kind")), name): trim_child(body)}


@kopf.index("", "v1", "services")
async def sgld_services(namespace: str | None, name: str | None, body: kopf.Body, **_: Any) -> Any:
    return _child_index(namespace, name, body)


@kopf.index("apps", "v1", "deployments")
async def sgld_deployments(namespace: str | None, name: str | None, body: kopf.Body, **_: Any) -> Any:
    return _child_index(namespace, name, body)


@kopf.index("networking.k8s.io", "v1", "networkpolicies")
async def sgld_networkpolicies(namespace: str | None, name: str | None, body: kopf.Body, **_: Any) -> Any:
    return _child_index(namespace, name, body)


@kopf.index("monitoring.coreos.com", "v1", "podmonitors")
async def sgld_podmonitors(namespace: str | None, name: str | None, body: kopf.Body, **_: Any) -> Any:
    return _child_index(namespace, name, body)


@kopf.index("inference.networking.k8s.io", "v1", "inferencepools")
async def sgld_inferencepools(namespace: str | None, name: str | None, body: kopf.Body, **_: Any) -> Any:
    return _child_index(namespace, name, body)


@kopf.index(GROUP, VERSION, SCALE_PLURAL)
async def sgld_scale_targets(namespace: str | None, spec: Mapping[str, Any], body: kopf.Body, **_: Any) -> Any:
    """Worker groups' scale targets (SGLangWorkerGroup) by (namespace, the SGLangDeployment they name)."""
    deployment = spec.get("deployment")
    return {(namespace, deployment): plain(body)} if namespace and isinstance(deployment, str) else None


@kopf.on.event(GROUP, VERSION, SCALE_PLURAL)
async def scale_target_changed(namespace: str | None, spec: Mapping[str, Any], **_: Any) -> None:
    """An HPA (or anyone) changed a group's count: the deployment's loop acts on it now."""
    if isinstance(spec.get("deployment"), str):
        _wake(namespace or "", spec["deployment"])


class _Children(Mapping[ChildKey, Any]):
    """The child indexes as one mapping by (namespace, kind, name)."""

    def __init__(self, indexes: Mapping[str, Mapping[ChildKey, Any]]) -> None:
        self.indexes = indexes

    def __getitem__(self, key: ChildKey) -> Any:
        index = self.indexes.get(key[1])
        if index is None or key not in index:
            raise KeyError(key)
        return index[key]

    def __iter__(self) -> Any:
        return (key for index in self.indexes.values() for key in index)

    def __len__(self) -> int:
        return sum(len(index) for index in self.indexes.values())


def children_view(**indexes: Any) -> _Children:
    return _Children({
        "Service": indexes["sgld_services"], "Deployment": indexes["sgld_deployments"],
        "NetworkPolicy": indexes["sgld_networkpolicies"], "PodMonitor": indexes["sgld_podmonitors"],
        "InferencePool": indexes["sgld_inferencepools"],
    })  # fmt: skip


# -- the loop ------------------------------------------------------------------------------------------------------
@per_cr_loop("reconcile")
async def sgld_reconcile_loop(
    stopped: Stopped,
    name: str,
    namespace: str,
    body: Live,
    **indexes: Any,
) -> None:
    """`indexes`: every kopf index by its function's name (and `spec`, unused here)."""
    reconciler = Reconciler(api_client())
    sgld_pods: Mapping[PodKey, Any] = indexes["sgld_pods"]
    children = children_view(**indexes)
    child_names = [(ref.kind, ref.name) for ref in possible_children(name)]
    wake = _register(namespace, name)
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
                await _sleep_or_wake(wake, EXPECTATION_POLL_SECONDS)
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
            delay = FOLLOW_UP_SECONDS if follow_up else backoff_seconds(failures, resync_seconds())
            await _sleep_or_wake(wake, delay)
    finally:
        _unregister(namespace, name, wake)
        metrics.forget_fleet(namespace, name)


async def _sleep_or_wake(wake: Wakeup, seconds: float) -> None:
    """Wait `seconds`, or less when the loop is woken (the wake-up keeps the priority asked for). kopf cancels the
    coroutine to stop it."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(wake.event.wait(), timeout=seconds)


SUPERVISOR = Supervisor(KINDS, lambda namespace, name, patch: patch_cr(api_client(), namespace, name, patch))
"""The loops of every CR (reconcile, autoscaler, doctor): started once this replica leads (`runner`)."""


@kopf.on.event(GROUP, VERSION, PLURAL)
async def sgld_changed(
    event: Mapping[str, Any], name: str | None, namespace: str | None, body: kopf.Body, **kwargs: Any
) -> None:
    """Every watch event of a SGLangDeployment: the supervisor starts or stops its loops (handing them kopf's
    indexes); a spec change (a new `generation`, `/scale` included) wakes its reconcile loop now."""
    if not namespace or not name:
        return
    gone = event.get("type") == "DELETED"
    indexes = {key: value for key, value in kwargs.items() if isinstance(value, kopf.Index)}
    previous = SUPERVISOR.observe(namespace, name, None if gone else plain(body), indexes)
    generation = (body.get("metadata") or {}).get("generation")
    if not gone and previous is not None and (previous.get("metadata") or {}).get("generation") != generation:
        _wake(namespace, name)


@kopf.on.cleanup()
async def stop_loops(**_: Any) -> None:
    """kopf stops (SIGTERM): every loop is asked to stop and given its time, as kopf does with daemons."""
    await SUPERVISOR.stop_all()


@kopf.on.event("", "v1", "pods", labels={LABEL_DEPLOYMENT: kopf.PRESENT})
async def pod_changed(
    event: Mapping[str, Any],
    labels: Mapping[str, str],
    namespace: str | None,
    uid: str | None,
    body: kopf.Body,
    **_: Any,
) -> None:
    deployment, gone = labels[LABEL_DEPLOYMENT], event.get("type") == "DELETED"
    signature, serving = (None, False) if gone else (pod_signature(body), serving_member(body))
    priority = _pod_priority(namespace or "", deployment, uid, signature, serving)
    if priority is not None:
        _wake(namespace or "", deployment, priority)
