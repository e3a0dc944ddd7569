"""What one pass reads: a snapshot of the watch caches (kopf indexes) for one CR, and the small caches beside them.

The operator watches its pods (label `sglang.ai/deployment`) and the kinds of its other children once, with kopf
indexes; a pass reads a `Snapshot` taken from them on the event loop and handed to the pool, so with nothing
changing a pass sends no request to the API server. Pure functions here build and read those values; kopf wiring is
in `handlers.py`.

Two things are not watched, on purpose:
- Secrets (the router's and the workers' API keys): watching them would mean list/watch on every Secret of every
  namespace. They are read with a GET when a pass needs them, and kept for `SECRET_TTL_SECONDS`.
- Whether a child kind is served at all (a PodMonitor without prometheus-operator's CRD): kopf cannot watch a kind
  that does not exist. The answer of one GET is kept for `KIND_TTL_SECONDS`; kopf starts watching the kind by itself
  once its CRD appears.
"""

import copy
import json
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from ..api.constants import (
    ANNOTATION_KV_EPOCH,
    ANNOTATION_KV_EPOCH_SINCE,
    ANNOTATION_SPEC_HASH,
    COMPONENT_ROUTER,
    COMPONENT_WORKER,
    LABEL_COMPONENT,
    LABEL_DEPLOYMENT,
)
from ..observed import pod_view

SECRET_TTL_SECONDS: Final = 60.0
KIND_TTL_SECONDS: Final = 10.0
EXPECTATION_TIMEOUT_SECONDS: Final = 10.0
"""How long a loop waits for the watch to show its own pod writes before it plans again regardless."""

PodKey = tuple[str, str]
"""(namespace, SGLangDeployment name)."""
ChildKey = tuple[str, str, str]
"""(namespace, kind, name)."""


@dataclass(frozen=True)
class Snapshot:
    """One CR as the watches showed it when its pass started: the CR, its labelled pods (workers and routers) and
    the objects of every kind and name it may own, present or not (a foreign object of a child's name is a
    collision, so children are looked up by name, not by label). `children` holds only objects that exist."""

    body: dict[str, Any]
    pods: list[dict[str, Any]] | None
    """None: not watched, the pass lists them from the API."""
    children: dict[tuple[str, str], dict[str, Any]] | None = None
    """(kind, name) -> the object, trimmed to what the executor reads (`trim_child`); None: not watched, the pass
    reads each child itself (the API-reading path of tests and one-off runs)."""
    scale_targets: list[dict[str, Any]] | None = None
    """The SGLangWorkerGroups naming this CR (its groups' scale targets); None: not watched, the pass lists them."""


def pod_key(namespace: str | None, labels: Mapping[str, str]) -> PodKey | None:
    """The index key of a labelled pod, or None for a pod without the label. Pure."""
    deployment = labels.get(LABEL_DEPLOYMENT)
    if not namespace or not isinstance(deployment, str) or not deployment:
        return None
    return (namespace, deployment)


def spec_unobserved(body: Mapping[str, Any]) -> bool:
    """True when no pass has written status for the CR's current spec (a new CR, or a spec or `/scale` change made
    while no operator ran): its first pass in this process is one an event asked for. The others, after a restart
    or a leader handover, only resync, so the changed ones go first. Pure."""
    generation = (body.get("metadata") or {}).get("generation")
    return (body.get("status") or {}).get("observedGeneration") != generation


SERVING_COMPONENTS: Final = (COMPONENT_WORKER, COMPONENT_ROUTER)


def serving_member(pod: Mapping[str, Any]) -> bool:
    """A worker or router pod that takes part in routing: Ready, not being deleted, not draining, as the reconciler
    reads a pod (`observed.pod_view`). The pod watch uses it to see one turn Ready, which makes a registration due
    (a worker to add to the routers, or a router to fill), so that pass goes before others (`workqueue.Priority`).
    Pure."""
    meta = pod.get("metadata")
    if not isinstance(meta, Mapping) or (meta.get("labels") or {}).get(LABEL_COMPONENT) not in SERVING_COMPONENTS:
        return False
    view = pod_view(dict(pod))
    return view is not None and view.ready and not view.deleting and view.draining_since is None


def pod_signature(pod: Mapping[str, Any]) -> int:
    """A hash of what a pass reads of a pod (`observed.pod_view`, ownership, the labels and annotations the
    expectations wait for): the pod watch wakes a CR's loop only when it changes. A pod's other updates (bound to a
    node, scheduled, a container created) cost no pass; in a creation burst they were about a third of the pod
    events, each a pass waiting for a thread. Anything missed this way is seen by the next resync. Pure."""
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    conditions = status.get("conditions") or []
    ready = [c.get("status") for c in conditions if isinstance(c, Mapping) and c.get("type") == "Ready"]
    restarts = [cs.get("restartCount") for cs in status.get("containerStatuses") or [] if isinstance(cs, Mapping)]
    read = [meta.get("labels"), meta.get("annotations"), meta.get("ownerReferences"), meta.get("deletionTimestamp"),
            status.get("phase"), ready, status.get("podIP"), restarts]  # fmt: skip
    return hash(json.dumps(read, sort_keys=True, default=str))


def plain(body: Mapping[str, Any]) -> dict[str, Any]:
    """A deep copy of what kopf hands over, so a pass running in the pool never sees the event loop change it;
    without `metadata.managedFields`, which nothing here reads and which is often most of a pod's size (every
    index entry and every CR event is copied). Pure."""
    copied = {key: value for key, value in body.items() if key != "metadata"}
    metadata = body.get("metadata")
    if isinstance(metadata, Mapping):
        copied["metadata"] = {key: value for key, value in metadata.items() if key != "managedFields"}
    elif "metadata" in body:
        copied["metadata"] = metadata
    return copy.deepcopy(copied)


_KEPT_ANNOTATIONS = frozenset({ANNOTATION_SPEC_HASH, ANNOTATION_KV_EPOCH, ANNOTATION_KV_EPOCH_SINCE})


def trim_child(body: Mapping[str, Any]) -> dict[str, Any]:
    """What the executor needs of a Service, Deployment, NetworkPolicy, PodMonitor or InferencePool: its identity,
    owners, the hash of the render it was written from and, for a prefill/decode fleet's routers, their KV epoch
    (`controller/cutover.py`). Kept small: every object of those kinds in the watched namespaces is indexed (a
    foreign object must be seen to be left alone). Pure."""
    meta = body.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    return {
        "apiVersion": body.get("apiVersion"),
        "kind": body.get("kind"),
        "metadata": {
            "name": meta.get("name"),
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
            "resourceVersion": meta.get("resourceVersion"),
            "ownerReferences": copy.deepcopy(list(meta.get("ownerReferences") or [])),
            "annotations": {k: v for k, v in annotations.items() if k in _KEPT_ANNOTATIONS},
        },
    }


def take_snapshot(
    body: Mapping[str, Any],
    pods: Mapping[PodKey, Iterable[Mapping[str, Any]]],
    children: Mapping[ChildKey, Iterable[Mapping[str, Any]]],
    child_names: Iterable[tuple[str, str]],
    scale_targets: Mapping[PodKey, Iterable[Mapping[str, Any]]] | None = None,
) -> Snapshot:
    """A snapshot for the CR `body` from the pod index and the child index; `child_names`: the (kind, name) pairs
    it may own; `scale_targets`: the SGLangWorkerGroup index by (namespace, spec.deployment). Called on the event
    loop (kopf changes the indexes there). Pure."""
    meta = body.get("metadata") or {}
    namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
    found = {}
    for kind, child in child_names:
        for obj in children.get((namespace, kind, child), ()):
            found[(kind, child)] = plain(obj)
            break
    targets = [plain(t) for t in (scale_targets or {}).get((namespace, name), ())]
    return Snapshot(body=plain(body), pods=[plain(p) for p in pods.get((namespace, name), ())], children=found,
                    scale_targets=targets)  # fmt: skip


# -- expectations ------------------------------------------------------------------------------------------------
@dataclass
class Expectations:
    """The pod writes of a CR's last pass, which its next pass must see in the watch before it plans again
    (the ReplicaSet controller's "expectations"): planning from a cache that does not show a drain the last pass
    started would start it again."""

    created: set[str] = field(default_factory=set)
    deleted: set[str] = field(default_factory=set)
    annotated: dict[str, dict[str, str | None]] = field(default_factory=dict)
    labelled: dict[str, dict[str, str | None]] = field(default_factory=dict)
    """Pod -> the bookkeeping labels its last apply set (None: removed)."""
    since: float = 0.0

    @property
    def empty(self) -> bool:
        return not (self.created or self.deleted or self.annotated or self.labelled)


def unmet(expected: Expectations, pods: Iterable[Mapping[str, Any]]) -> list[str]:
    """Names of pods whose last write the snapshot does not show yet. Pure."""
    by_name = {(p.get("metadata") or {}).get("name"): p for p in pods}
    missing = [n for n in sorted(expected.created) if n not in by_name]
    missing += [
        n for n in sorted(expected.deleted)
        if n in by_name and not (by_name[n].get("metadata") or {}).get("deletionTimestamp")
    ]  # fmt: skip
    for pod_name, annotations in sorted(expected.annotated.items()):
        pod = by_name.get(pod_name)
        if pod is None:
            continue  # gone: nothing left to see
        live = (pod.get("metadata") or {}).get("annotations") or {}
        if any(live.get(key) != value for key, value in annotations.items()):
            missing.append(pod_name)
    for pod_name, labels in sorted(expected.labelled.items()):
        pod = by_name.get(pod_name)
        live = ((pod or {}).get("metadata") or {}).get("labels") or {}
        if pod is not None and pod_name not in missing and any(live.get(k) != v for k, v in labels.items()):
            missing.append(pod_name)
    return missing


# -- caches ------------------------------------------------------------------------------------------------------
class TtlCache:
    """A small thread-safe cache of values read from the API server, each kept for `ttl` seconds."""

    def __init__(self, ttl: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl, self.clock = ttl, clock
        self._values: dict[Any, tuple[float, Any]] = {}
        self._lock = threading.Lock()

    def get(self, key: Any, read: Callable[[], Any]) -> Any:
        now = self.clock()
        with self._lock:
            hit = self._values.get(key)
        if hit is not None and now - hit[0] < self.ttl:
            return hit[1]
        value = read()
        with self._lock:
            self._values[key] = (now, value)
            if len(self._values) > 10_000:  # deleted CRs' entries: drop the oldest half
                for old in sorted(self._values, key=lambda k: self._values[k][0])[:5_000]:
                    del self._values[old]
        return value

    def forget(self, key: Any) -> None:
        with self._lock:
            self._values.pop(key, None)


SECRETS = TtlCache(SECRET_TTL_SECONDS)
"""(namespace, name) -> the Secret's data (None when absent)."""
SERVED_KINDS = TtlCache(KIND_TTL_SECONDS)
"""(namespace, apiVersion, kind) -> whether the API server serves the kind."""
