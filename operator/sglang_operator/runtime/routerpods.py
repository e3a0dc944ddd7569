"""Which pods are a CR's own routers, read as every component that sends the router a credential reads them (the
reconciler, the doctor): one code path, so the two cannot drift.

A router pod is one of the CR's when the ReplicaSet that controls it is controlled, by uid, by the router Deployment
(slot) of its name that the CR owns (`observed.slot_router_pods`, the pure test). The pod names its ReplicaSet; the
ReplicaSet's controller is not in the pod, so it is read here: one GET per ReplicaSet (by uid, which never changes;
the Deployment controller sets the controller reference when it creates the ReplicaSet), only for a slot the CR
owns, kept while passes keep asking for it (ReplicaSets are not watched; the chart's role has only `get` on them),
so a quiet fleet makes no read at all, as its state otherwise comes from watches. A 404, or a ReplicaSet of that
name with another uid, is not the CR's; another error is raised to the caller (routers that cannot be told apart are
not guessed at).
"""

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from .. import names
from ..api.constants import COMPONENT_ROUTER, LABEL_COMPONENT
from ..observed import PodT, owned_by, router_pod_of, router_replica_set, slot_router_pods
from .kube import API_TIMEOUT

REPLICA_SET_FORGET_SECONDS: Final = 600.0
"""A ReplicaSet no pass asked about for this long is forgotten (its Deployment rolled it away, or its CR is gone)."""

DeploymentLookup = Callable[[str], Mapping[str, Any] | None]
"""A router Deployment's name -> the Deployment (at least its metadata), or None when there is none."""


def slot_deployments(deployment: str, owner_uid: str, find: DeploymentLookup) -> dict[str, str]:
    """The router Deployments (`names.router_slots`) the CR `owner_uid` controls, name -> uid, each looked up with
    `find` (the watch's copy, or a GET)."""
    slots = {}
    for slot in names.router_slots(deployment):
        child = find(slot)
        uid = ((child or {}).get("metadata") or {}).get("uid")
        if child is not None and owned_by(child, owner_uid) and isinstance(uid, str) and uid:
            slots[slot] = uid
    return slots


def read_deployment(apps: client.AppsV1Api, namespace: str) -> DeploymentLookup:
    """A `DeploymentLookup` by GET (the CLI, which has no watch): None for a missing Deployment."""

    def find(name: str) -> Mapping[str, Any] | None:
        try:
            found = apps.read_namespaced_deployment(name, namespace, _request_timeout=API_TIMEOUT)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return _plain(apps, found)

    return find


def router_candidates(pods: Iterable[PodT], deployment: str) -> list[PodT]:
    """The router pods (by label) named by their controlling ReplicaSet as one of the CR's slots'
    (`observed.router_pod_of`): the only pods whose ReplicaSet is read. Pure."""
    return [
        pod for pod in pods
        if ((pod.get("metadata") or {}).get("labels") or {}).get(LABEL_COMPONENT) == COMPONENT_ROUTER
        and router_pod_of(pod, deployment)
    ]  # fmt: skip


class ReplicaSetControllers:
    """The Deployment that controls each ReplicaSet read, per (namespace, name, uid): read once, kept while asked for,
    forgotten `forget_after` seconds after the last time. One per loop (the reconciler's, the doctor's)."""

    def __init__(
        self, forget_after: float = REPLICA_SET_FORGET_SECONDS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.forget_after, self.clock = forget_after, clock
        self._known: dict[tuple[str, str, str], tuple[str | None, float]] = {}
        """(namespace, ReplicaSet name, uid) -> (the uid of the Deployment that controls it or None, last asked)."""
        self._lock = threading.Lock()

    def _remembered(self, key: tuple[str, str, str]) -> tuple[bool, str | None]:
        now = self.clock()
        with self._lock:
            for old in [k for k, (_, asked) in self._known.items() if now - asked > self.forget_after]:
                del self._known[old]
            hit = self._known.get(key)
            if hit is None:
                return False, None
            self._known[key] = (hit[0], now)
            return True, hit[0]

    def controller(self, apps: client.AppsV1Api, namespace: str, name: str, uid: str) -> str | None:
        """The uid of the Deployment that controls the ReplicaSet `name` (None: none, or the ReplicaSet of that name
        is gone or another one than `uid`). One GET, then what it said; an error other than 404 is raised (and
        nothing is remembered)."""

        def read() -> str | None:
            try:
                replica_set = apps.read_namespaced_replica_set(name, namespace, _request_timeout=API_TIMEOUT)
            except ApiException as exc:
                if exc.status == 404:
                    return None
                raise
            meta = _plain(apps, replica_set).get("metadata") or {}
            if meta.get("uid") != uid:
                return None
            return next((str(ref["uid"]) for ref in meta.get("ownerReferences") or []
                         if isinstance(ref, dict) and ref.get("controller") is True and ref.get("kind") == "Deployment"
                         and isinstance(ref.get("uid"), str)), None)  # fmt: skip

        known, value = self._remembered((namespace, name, uid))
        if not known:
            value = read()
            with self._lock:
                self._known[(namespace, name, uid)] = (value, self.clock())
        return value

    def router_pods(
        self, apps: client.AppsV1Api, pods: Iterable[PodT], namespace: str, deployment: str, slots: Mapping[str, str]
    ) -> list[PodT]:
        """The pods of the CR's own router Deployments among `pods` (the CR's labelled pods): of the candidates
        (`router_candidates`), those whose ReplicaSet, read (cached) for a slot of `slots` (the router
        Deployments the CR owns, `slot_deployments`), the slot's Deployment controls (`observed.slot_router_pods`)."""
        candidates = router_candidates(pods, deployment)
        controllers: dict[str, str | None] = {}
        for pod in candidates:
            owner = router_replica_set(pod, deployment)
            if owner is not None and owner.slot in slots and owner.uid not in controllers:
                controllers[owner.uid] = self.controller(apps, namespace, owner.name, owner.uid)
        return slot_router_pods(candidates, deployment, slots, controllers)


def _plain(apps: client.AppsV1Api, obj: Any) -> dict[str, Any]:
    """An object the client read, as JSON (a stand-in API may hand back the dict itself)."""
    return obj if isinstance(obj, dict) else dict(apps.api_client.sanitize_for_serialization(obj))
