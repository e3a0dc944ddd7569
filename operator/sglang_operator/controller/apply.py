"""The only module that writes to the API server. Every write goes through `Writer`, which counts them.

Children other than pods are compared by the hash of their rendered form (kept in an annotation), so an unchanged
child is never patched; pods are immutable and are only created, annotated or deleted.
"""

import hashlib
import json
import logging
from collections import Counter
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from ..api.constants import ANNOTATION_SPEC_HASH, GROUP, KIND, PLURAL, VERSION

log = logging.getLogger(__name__)


def content_hash(obj: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


def with_hash(obj: dict[str, Any]) -> dict[str, Any]:
    stamped: dict[str, Any] = json.loads(json.dumps(obj))
    stamped["metadata"].setdefault("annotations", {})[ANNOTATION_SPEC_HASH] = content_hash(obj)
    return stamped


class Writer:
    def __init__(self, api: client.ApiClient) -> None:
        self.core = client.CoreV1Api(api)
        self.apps = client.AppsV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.writes: Counter[str] = Counter()

    def _count(self, verb: str) -> None:
        self.writes[verb] += 1

    def create_pod(self, pod: dict[str, Any]) -> None:
        self._count("create_pod")
        try:
            self.core.create_namespaced_pod(pod["metadata"]["namespace"], pod)
        except ApiException as exc:
            if exc.status != 409:  # already created by an earlier, interrupted pass
                raise

    def delete_pod(self, namespace: str, name: str) -> None:
        self._count("delete_pod")
        try:
            self.core.delete_namespaced_pod(name, namespace)
        except ApiException as exc:
            if exc.status != 404:
                raise

    def annotate_pod(self, namespace: str, name: str, annotations: dict[str, str | None]) -> None:
        self._count("annotate_pod")
        try:
            self.core.patch_namespaced_pod(name, namespace, {"metadata": {"annotations": annotations}})
        except ApiException as exc:
            if exc.status != 404:
                raise

    def ensure(self, desired: dict[str, Any], observed: dict[str, Any] | None) -> bool:
        """Create or patch a Service, Deployment or other child when its rendered hash differs. True if written."""
        stamped = with_hash(desired)
        wanted = stamped["metadata"]["annotations"][ANNOTATION_SPEC_HASH]
        if observed is not None:
            current = ((observed.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_SPEC_HASH)
            if current == wanted:
                return False
        self._count(f"{'create' if observed is None else 'patch'}_{desired['kind'].lower()}")
        kind, namespace, name = desired["kind"], desired["metadata"]["namespace"], desired["metadata"]["name"]
        if kind == "Deployment":
            if observed is None:
                self.apps.create_namespaced_deployment(namespace, stamped)
            else:
                self.apps.patch_namespaced_deployment(name, namespace, stamped)
        elif kind == "Service":
            if observed is None:
                self.core.create_namespaced_service(namespace, stamped)
            else:
                self.core.patch_namespaced_service(name, namespace, stamped)
        else:
            group, version = desired["apiVersion"].split("/")
            plural = kind.lower() + "s"
            if observed is None:
                self.custom.create_namespaced_custom_object(group, version, namespace, plural, stamped)
            else:
                self.custom.patch_namespaced_custom_object(group, version, namespace, plural, name, stamped)
        return True

    def patch_status(self, namespace: str, name: str, status: dict[str, Any], resource_version: str) -> bool:
        """Merge-patch status guarded by resourceVersion: the autoscaler writes status too, and neither writer
        may overwrite conditions the other just set. False on a conflict (the next pass writes again)."""
        self._count("patch_status")
        patch = {"metadata": {"resourceVersion": resource_version}, "status": status}
        try:
            self.custom.patch_namespaced_custom_object_status(GROUP, VERSION, namespace, PLURAL, name, patch)
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
            self.core.create_namespaced_event(meta["namespace"], body)
        except ApiException as exc:  # events are best effort; never fail a reconcile on one
            log.warning("could not post event %s: %s", reason, exc.reason)
