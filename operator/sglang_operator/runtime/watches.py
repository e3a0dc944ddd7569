"""kopf wiring, kept thin: the watch caches (indexes) and the events that start, stop and wake the per-CR loops.

- **Indexes** (`kopf.index`): the operator's pods (label `sglang.ai/deployment`, workers and routers alike) by
  (namespace, deployment), and every Service, Deployment, NetworkPolicy, PodMonitor and InferencePool of the watched
  namespaces by (namespace, kind, name), trimmed to identity, owners and render hash. A pass reads a snapshot of
  them, so with nothing changing it sends no request to the API server. kopf calls the event handlers (so the
  supervisor starts the loops) only once the indexes are filled.
- **Events**: every SGLangDeployment event goes to the `Supervisor`, which starts or stops the loops the entry point
  registered (reconcile, autoscaler, doctor); a spec change, a pod that changed what a pass reads, or a scale
  target's change wakes the CR's reconcile loop (`wakeups`).

Nothing is registered at import: `operator_registry` builds kopf's registry for one supervisor, so what runs is what
the entry point composed.
"""

import logging
from collections.abc import Mapping
from typing import Any

import kopf

from ..api.constants import GROUP, LABEL_DEPLOYMENT, PLURAL, VERSION
from ..api.scaletarget import SCALE_PLURAL
from ..childkinds import CHILD_KINDS
from . import wakeups
from .state import ChildKey, plain, pod_key, pod_signature, serving_member, trim_child
from .supervisor import Supervisor

log = logging.getLogger(__name__)
WATCH_SERVER_TIMEOUT_SECONDS = 1800


class NoDiffBase(kopf.DiffBaseStorage):
    """kopf builds a diff base (a deep copy of the whole object, managed fields and all) on every event of every
    watched object, for change handlers. This operator has none (the loops read the watch's bodies), so it builds
    nothing (what those copies cost in a creation burst: docs/scale.md, "kopf builds no diff base")."""

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> kopf.BodyEssence:
        return kopf.BodyEssence()

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        return None


def configure(settings: kopf.OperatorSettings, workers: int) -> None:
    """kopf's settings for this operator; `workers`: the size of the pool every pass runs in."""
    # kopf has no daemon or change handler here (the supervisor runs the loops), so it never needs a finalizer; but
    # it removes the one its settings name from any CR it sees. It must not be ours, which the leader keeps.
    settings.persistence.finalizer = f"{GROUP}/kopf-unused"
    settings.persistence.diffbase_storage = NoDiffBase()
    settings.posting.level = logging.WARNING
    # A watch the API server ends after 30 min is reopened by kopf: one request per watched kind and replica, with
    # the Lease's renewals the operator's whole cost when nothing changes (docs/scale.md measures it). 30 min is the
    # API server's own least when a client names none (--min-request-timeout). A connection that died silently is
    # not left to this timeout: kopf reopens a watch that has shown nothing, not even a bookmark, for 70 s (its
    # inactivity timeout), and TCP keepalive ends a dead connection within about 3 min (`keepalive`); kopf then
    # reopens the watch from its last version.
    settings.watching.server_timeout = WATCH_SERVER_TIMEOUT_SECONDS
    settings.watching.client_timeout = WATCH_SERVER_TIMEOUT_SECONDS + 30
    settings.networking.request_timeout = 30
    # Every handler here is async; kopf's executor serves only what remains sync (none of ours). Sized anyway, so
    # that nothing sync added later can grow threads with the number of CRs.
    settings.execution.max_workers = workers


# -- indexes -----------------------------------------------------------------------------------------------------
async def sgld_pods(namespace: str | None, labels: Mapping[str, str], body: kopf.Body, **_: Any) -> Any:
    key = pod_key(namespace, labels)
    return None if key is None else {key: plain(body)}


async def child_index(namespace: str | None, name: str | None, body: kopf.Body, **_: Any) -> Any:
    """One index per child kind of the table (`childkinds`), each by (namespace, kind, name)."""
    if not namespace or not name:
        return None
    return {(namespace, str(body.get("kind")), name): trim_child(body)}


async def sgld_scale_targets(namespace: str | None, spec: Mapping[str, Any], body: kopf.Body, **_: Any) -> Any:
    """Worker groups' scale targets (SGLangWorkerGroup) by (namespace, the SGLangDeployment they name)."""
    deployment = spec.get("deployment")
    return {(namespace, deployment): plain(body)} if namespace and isinstance(deployment, str) else None


async def scale_target_changed(namespace: str | None, spec: Mapping[str, Any], **_: Any) -> None:
    """An HPA (or anyone) changed a group's count: the deployment's loop acts on it now."""
    if isinstance(spec.get("deployment"), str):
        wakeups.wake(namespace or "", spec["deployment"])


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
    """The child indexes among kopf's `indexes` (by index name) as one mapping."""
    return _Children({entry.kind: indexes[entry.index] for entry in CHILD_KINDS})


async def pod_changed(
    event: Mapping[str, Any],
    labels: Mapping[str, str],
    namespace: str | None,
    uid: str | None,
    body: kopf.Body,
    **_: Any,
) -> None:
    """A pod of a fleet changed: its CR's loop is woken when what a pass reads of the pod changed."""
    deployment, gone = labels[LABEL_DEPLOYMENT], event.get("type") == "DELETED"
    signature, serving = (None, False) if gone else (pod_signature(body), serving_member(body))
    priority = wakeups.pod_priority(namespace or "", deployment, uid, signature, serving)
    if priority is not None:
        wakeups.wake(namespace or "", deployment, priority)


def operator_registry(supervisor: Supervisor, workers: int) -> kopf.OperatorRegistry:
    """kopf's registry for one operator: the indexes and the events that drive `supervisor`'s loops."""
    registry = kopf.OperatorRegistry()
    # kopf's default registry logs in through the kubernetes client's config (kubeconfig, else in-cluster); a registry
    # of our own names that login itself.
    kopf.on.login(registry=registry, errors=kopf.ErrorsMode.IGNORED)(kopf.login_via_client)

    @kopf.on.startup(registry=registry)
    async def configure_kopf(settings: kopf.OperatorSettings, **_: Any) -> None:
        configure(settings, workers)

    labelled = {LABEL_DEPLOYMENT: kopf.PRESENT}
    kopf.index("", "v1", "pods", labels=labelled, id="sgld_pods", registry=registry)(sgld_pods)
    for entry in CHILD_KINDS:
        kopf.index(entry.group, entry.version, entry.plural, id=entry.index, registry=registry)(child_index)
    kopf.index(GROUP, VERSION, SCALE_PLURAL, id="sgld_scale_targets", registry=registry)(sgld_scale_targets)
    kopf.on.event(GROUP, VERSION, SCALE_PLURAL, registry=registry)(scale_target_changed)
    kopf.on.event("", "v1", "pods", labels=labelled, registry=registry)(pod_changed)

    @kopf.on.event(GROUP, VERSION, PLURAL, registry=registry)
    async def sgld_changed(
        event: Mapping[str, Any], name: str | None, namespace: str | None, body: kopf.Body, **kwargs: Any
    ) -> None:
        """Every watch event of a SGLangDeployment: the supervisor starts or stops its loops (handing them kopf's
        indexes); a spec change (a new `generation`, `/scale` included) wakes its reconcile loop now."""
        if not namespace or not name:
            return
        gone = event.get("type") == "DELETED"
        indexes = {key: value for key, value in kwargs.items() if isinstance(value, kopf.Index)}
        previous = supervisor.observe(namespace, name, None if gone else plain(body), indexes)
        generation = (body.get("metadata") or {}).get("generation")
        if not gone and previous is not None and (previous.get("metadata") or {}).get("generation") != generation:
            wakeups.wake(namespace, name)

    @kopf.on.cleanup(registry=registry)
    async def stop_loops(**_: Any) -> None:
        """kopf stops (SIGTERM): every loop is asked to stop and given its time, as kopf does with daemons."""
        await supervisor.stop_all()

    return registry
