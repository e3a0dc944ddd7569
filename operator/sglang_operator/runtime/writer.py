"""The one writer: every write to a fleet's objects (its children and pods, the CR's status, finalizer and
diagnostics, the scale targets' status, events) goes through `Writer`, which counts them. The only other writes of
the operator are the leader election's to its own Lease (`leader.py`).

Children other than pods are written with server-side apply, field manager `sglang-operator`, forced: the rendered
object is applied whole, so a field the render no longer has is removed, and fields other managers set (an injected
sidecar, a policy engine's label) stay. They are compared by the hash of their rendered form (kept in an
annotation), so an unchanged child is never written. Pods are created (same field manager) and deleted, never
changed, except their bookkeeping annotations (`draining-since`, `warm`), which are applied alone by the same
manager: only those keys, on that very pod (its uid is the apply's precondition); a pod is deleted by its uid too. A
pod name another owner holds is a collision, as a child's is.

Ownership: a child is the operator's only when it carries a controller ownerReference to the CR's uid. An object of a
child's name without one (another team's Service, something left from a CR of the same name) is a name collision:
it is never patched, adopted or deleted, and the caller reports it. `possible_children` is the one list of what the
operator may own for a CR; whatever on it is owned but no longer rendered is deleted.

Every Kubernetes call passes `_request_timeout=API_TIMEOUT`, so a hung API server cannot hold a pass.
"""

import hashlib
import json
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import Enum
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from ..api.constants import ANNOTATION_SPEC_HASH, GROUP, KIND, PLURAL, VERSION
from ..api.scaletarget import SCALE_PLURAL
from ..childkinds import CHILD_KINDS, child_kind
from ..observed import owned_by
from .kube import API_TIMEOUT, FIELD_MANAGER, as_plain
from .state import Expectations

log = logging.getLogger(__name__)


def content_hash(obj: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


def with_hash(obj: dict[str, Any]) -> dict[str, Any]:
    stamped: dict[str, Any] = json.loads(json.dumps(obj))
    stamped["metadata"].setdefault("annotations", {})[ANNOTATION_SPEC_HASH] = content_hash(obj)
    return stamped


@dataclass(frozen=True, order=True)
class ChildRef:
    """One child object by kind and name (namespace: the CR's)."""

    api_version: str
    kind: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind} {self.name}"

    @staticmethod
    def of(obj: dict[str, Any]) -> "ChildRef":
        return ChildRef(obj["apiVersion"], obj["kind"], obj["metadata"]["name"])


def possible_children(deployment: str) -> list[ChildRef]:
    """Every child other than pods that the operator may create for the CR `deployment`, rendered now or not: one
    per kind and name of the child-kind table (`childkinds`). Pure."""
    return sorted(
        ChildRef(entry.api_version, entry.kind, name(deployment)) for entry in CHILD_KINDS for name in entry.names
    )


def stale_children(
    deployment: str, rendered: list[dict[str, Any]], observed: dict[ChildRef, dict[str, Any]], uid: str
) -> list[ChildRef]:
    """Children that exist, are owned by the CR `uid`, and are not rendered any more: to delete. Pure."""
    wanted = {ChildRef.of(child) for child in rendered}
    return [
        ref
        for ref in possible_children(deployment)
        if ref not in wanted and ref in observed and owned_by(observed[ref], uid)
    ]


class Outcome(Enum):
    UNCHANGED = "unchanged"
    CREATED = "created"
    PATCHED = "patched"
    COLLISION = "collision"
    """An object of that name exists and the CR does not own it: left alone."""


class KindUnavailable(Exception):
    """The API server does not serve the kind (a PodMonitor without prometheus-operator's CRD)."""


APPLY = {"field_manager": FIELD_MANAGER, "force": True, "_content_type": "application/apply-patch+yaml"}
"""Keyword arguments of a server-side apply (a JSON body is valid YAML, so the client sends the dict as is)."""


class Writer:
    def __init__(self, api: client.ApiClient) -> None:
        self.api = api
        self.core = client.CoreV1Api(api)
        self.apps = client.AppsV1Api(api)
        self.networking = client.NetworkingV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.writes: Counter[str] = Counter()
        self.expected = Expectations()
        """The pod writes since the reconciler last reset it (one pass's), for the next pass to wait for."""

    def _count(self, verb: str) -> None:
        self.writes[verb] += 1

    # -- pods --------------------------------------------------------------------------------------------------
    def create_pod(self, pod: dict[str, Any]) -> Outcome:
        """Create a rendered pod (it names its CR in a controller ownerReference). A 409 is read back: a pod of that
        name the same CR controls (an earlier, interrupted pass created it) is UNCHANGED; one it does not control is
        a COLLISION, left alone for the caller to report (never taken for the CR's: its replica is not there)."""
        self._count("create_pod")
        meta = pod["metadata"]
        owner_uid = next((str(ref.get("uid")) for ref in meta.get("ownerReferences") or []
                          if isinstance(ref, dict) and ref.get("controller") is True), "")  # fmt: skip
        try:
            self.core.create_namespaced_pod(meta["namespace"], pod, field_manager=FIELD_MANAGER,
                                            _request_timeout=API_TIMEOUT)  # fmt: skip
            outcome = Outcome.CREATED
        except ApiException as exc:
            if exc.status != 409:
                raise
            live = self.read_pod(meta["namespace"], meta["name"])
            if live is None:  # deleted since the 409: the next pass creates it
                return Outcome.UNCHANGED
            if not owner_uid or not owned_by(live, owner_uid):
                return Outcome.COLLISION
            outcome = Outcome.UNCHANGED
        self.expected.created.add(meta["name"])
        return outcome

    def read_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        """One pod by name as a plain dict, None when absent. A list with a name field selector, not a get: the
        operator's role may list pods, not get them (the watch reads them too)."""
        listed = self.core.list_namespaced_pod(
            namespace, field_selector=f"metadata.name={name}", _request_timeout=API_TIMEOUT
        )
        for item in listed.items:
            return as_plain(self.api, item)
        return None

    def delete_pod(self, namespace: str, name: str, uid: str) -> None:
        """Delete the pod the caller observed, by its uid: the precondition makes sure it is that very pod, so a pod
        created under its name since (someone else's, answered with 409) is never deleted, and not expected gone."""
        self._count("delete_pod")
        options = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid))
        try:
            self.core.delete_namespaced_pod(name, namespace, body=options, _request_timeout=API_TIMEOUT)
        except ApiException as exc:
            if exc.status == 409:
                return
            if exc.status != 404:
                raise
        self.expected.deleted.add(name)

    def annotate_pod(
        self,
        namespace: str,
        name: str,
        uid: str | None,
        annotations: dict[str, str],
        labels: dict[str, str | None] | None = None,
    ) -> None:
        """Apply the operator's bookkeeping annotations (and labels: the InferencePool membership) of one pod: exactly
        `annotations` and `labels` (a key the operator applied before and leaves out is removed; keys others set
        stay; a label given as None is one the apply leaves out, so it is removed). The uid makes sure it is that pod,
        not one created under its name since: a replaced or deleted pod is left alone."""
        self._count("annotate_pod")
        meta: dict[str, Any] = {"name": name, "namespace": namespace, "annotations": dict(annotations)}
        carried = {key: value for key, value in (labels or {}).items() if value is not None}
        if carried:
            meta["labels"] = carried
        if uid:
            meta["uid"] = uid
        try:
            self.core.patch_namespaced_pod(
                name, namespace, {"apiVersion": "v1", "kind": "Pod", "metadata": meta},
                _request_timeout=API_TIMEOUT, **APPLY,
            )  # fmt: skip
        except ApiException as exc:
            if exc.status not in (404, 409):  # gone, or another pod of that name now
                raise
            return
        self.expected.annotated[name] = dict(annotations)
        if labels is not None:
            self.expected.labelled[name] = dict(labels)

    # -- other children ----------------------------------------------------------------------------------------
    def _verbs(self, ref: ChildRef) -> dict[str, Callable[..., Any]]:
        """create(ns, body), patch(name, ns, body), read(name, ns), delete(name, ns, body=...) for the kind."""
        if ref.kind == "Deployment":
            a = self.apps
            return {"create": a.create_namespaced_deployment, "patch": a.patch_namespaced_deployment,
                    "read": a.read_namespaced_deployment, "delete": a.delete_namespaced_deployment}  # fmt: skip
        if ref.kind == "Service":
            c = self.core
            return {"create": c.create_namespaced_service, "patch": c.patch_namespaced_service,
                    "read": c.read_namespaced_service, "delete": c.delete_namespaced_service}  # fmt: skip
        if ref.kind == "NetworkPolicy":
            n = self.networking
            return {"create": n.create_namespaced_network_policy, "patch": n.patch_namespaced_network_policy,
                    "read": n.read_namespaced_network_policy, "delete": n.delete_namespaced_network_policy}  # fmt: skip
        entry = child_kind(ref.kind)
        group, version, plural = entry.group, entry.version, entry.plural
        o = self.custom
        return {
            "create": lambda ns, body, **kw: o.create_namespaced_custom_object(group, version, ns, plural, body, **kw),
            "patch": lambda name, ns, body, **kw: o.patch_namespaced_custom_object(
                group, version, ns, plural, name, body, **kw
            ),
            "read": lambda name, ns, **kw: o.get_namespaced_custom_object(group, version, ns, plural, name, **kw),
            "delete": lambda name, ns, **kw: o.delete_namespaced_custom_object(group, version, ns, plural, name, **kw),
        }

    def read(self, ref: ChildRef, namespace: str) -> dict[str, Any] | None:
        """The child as a plain dict, None when absent. KindUnavailable when the kind itself is not served (a 404
        whose status details name no object: the CRD is missing)."""
        try:
            obj = self._verbs(ref)["read"](ref.name, namespace, _request_timeout=API_TIMEOUT)
        except ApiException as exc:
            if exc.status == 404:
                if _kind_missing(exc):
                    raise KindUnavailable(f"{ref.kind} ({ref.api_version}) is not served by this cluster") from exc
                return None
            raise
        return as_plain(self.api, obj)

    def apply(self, stamped: dict[str, Any], uid: str | None) -> None:
        """Server-side apply of a rendered child; `uid`: the live object's, a precondition (None to create)."""
        ref = ChildRef.of(stamped)
        body = json.loads(json.dumps(stamped))
        if uid:
            body["metadata"]["uid"] = uid
        try:
            self._verbs(ref)["patch"](
                ref.name, body["metadata"]["namespace"], body, _request_timeout=API_TIMEOUT, **APPLY
            )
        except ApiException as exc:
            if exc.status == 404 and _kind_missing(exc):
                raise KindUnavailable(f"{ref.kind} ({ref.api_version}) is not served by this cluster") from exc
            raise

    def ensure(self, desired: dict[str, Any], observed: dict[str, Any] | None, owner_uid: str) -> Outcome:
        """Apply the child when it is absent, or when it is the CR's own and its rendered hash differs.

        An object of that name that the CR `owner_uid` does not own is never written. An update carries the live
        object's uid, so the apply changes that very object; a create carries the CR's controller reference, which
        the API server refuses on an object another controller owns. (Between the watch and the create an object
        without any controller could appear under the name; the create would then take it over.)"""
        ref = ChildRef.of(desired)
        stamped = with_hash(desired)
        wanted = stamped["metadata"]["annotations"][ANNOTATION_SPEC_HASH]
        if observed is None:
            self._count(f"create_{ref.kind.lower()}")
            self.apply(stamped, None)
            return Outcome.CREATED
        if not owned_by(observed, owner_uid):
            return Outcome.COLLISION
        current = ((observed.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_SPEC_HASH)
        if current == wanted:
            return Outcome.UNCHANGED
        self._count(f"patch_{ref.kind.lower()}")
        try:
            self.apply(stamped, (observed.get("metadata") or {}).get("uid"))
        except ApiException as exc:
            if exc.status != 409:  # 409: replaced since it was observed; the next pass sees the new one
                raise
            return Outcome.UNCHANGED
        return Outcome.PATCHED

    def delete_child(self, ref: ChildRef, namespace: str, observed: dict[str, Any]) -> None:
        """Delete a child the caller found owned; the uid precondition makes sure it is that very object (not one
        created under the same name since it was read)."""
        self._count(f"delete_{ref.kind.lower()}")
        uid = (observed.get("metadata") or {}).get("uid")
        body = {"preconditions": {"uid": uid}, "propagationPolicy": "Background"} if uid else None
        try:
            self._verbs(ref)["delete"](ref.name, namespace, body=body, _request_timeout=API_TIMEOUT)
        except ApiException as exc:
            if exc.status not in (404, 409):  # gone already, or replaced (the precondition failed)
                raise

    # -- the CR ------------------------------------------------------------------------------------------------
    def patch_scale_target_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        """The status of a worker group's scale target (SGLangWorkerGroup): the group's count and selector, which
        an HPA reads through its /scale. Gone already (404) is fine: the next pass no longer sees it."""
        self._count("patch_scale_target_status")
        try:
            self.custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, namespace, SCALE_PLURAL, name, {"status": status}, _request_timeout=API_TIMEOUT
            )
        except ApiException as exc:
            if exc.status != 404:
                raise

    def patch_finalizers(self, namespace: str, name: str, patch: list[dict[str, Any]]) -> None:
        """The supervisor's finalizer JSON patch (`supervisor.finalizer_patch`). The content type must be named: the
        client sends any patch of a custom object as a merge patch otherwise, which the API server refuses for a
        list."""
        self._count("patch_finalizers")
        self.custom.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, name, patch, _request_timeout=API_TIMEOUT,
            _content_type="application/json-patch+json",
        )  # fmt: skip

    def patch_diagnostics(self, namespace: str, name: str, diagnostics: dict[str, Any]) -> None:
        """The fleet doctor's `status.diagnostics`, merged (it owns that field alone, so no version guard)."""
        self._count("patch_diagnostics")
        self.custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, namespace, PLURAL, name, {"status": {"diagnostics": diagnostics}},
            _request_timeout=API_TIMEOUT,
        )  # fmt: skip

    def patch_status(self, namespace: str, name: str, status: dict[str, Any], resource_version: str) -> bool:
        """Merge-patch status guarded by resourceVersion: the autoscaler writes status too, and neither writer
        may overwrite conditions the other just set. False on a conflict (the next pass writes again)."""
        self._count("patch_status")
        patch = {"metadata": {"resourceVersion": resource_version}, "status": status}
        try:
            self.custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, namespace, PLURAL, name, patch, _request_timeout=API_TIMEOUT
            )
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise
        return True

    def event(self, owner: dict[str, Any], reason: str, message: str, warning: bool = False) -> None:
        """A core/v1 Event on the CR, so `kubectl describe sgld` shows scale, rollout and drain history."""
        self._count("event")
        meta = owner["metadata"]
        now = datetime.now(UTC)
        body = {
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": KIND,
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta["uid"],
            },
            "reason": reason,
            "message": message[:1000],
            "type": "Warning" if warning else "Normal",
            "source": {"component": "sglang-operator"},
            "firstTimestamp": now.isoformat(),
            "lastTimestamp": now.isoformat(),
            "count": 1,
        }
        try:
            self.core.create_namespaced_event(meta["namespace"], body, _request_timeout=API_TIMEOUT)
        except Exception as exc:  # events are best effort; never fail a reconcile on one
            log.warning("could not post event %s: %s", reason, getattr(exc, "reason", type(exc).__name__))


def _kind_missing(exc: ApiException) -> bool:
    """A 404 for a missing object is a Status naming the object (`details.name`); one for a resource type the
    server does not serve is a plain "404 page not found"."""
    try:
        status = json.loads(exc.body or "")
    except (ValueError, TypeError):
        return True
    details = status.get("details") if isinstance(status, dict) else None
    return not (isinstance(details, dict) and details.get("name"))
