"""An in-memory stand-in for the parts of the Kubernetes API the reconciler calls, recording every call.

It keeps objects as plain dicts by (kind, name) in one namespace, answers 404/409 like the API server (a missing
object is a Status naming it; a resource type the server does not serve is a plain "404 page not found"), and
fails any call made without `_request_timeout`.

Server-side apply (a patch with content type `application/apply-patch+yaml`) is recorded as verb `apply` and
modelled the way the API server merges it for one field manager: the applied object's fields are set, fields the
manager applied before and leaves out are removed, fields nobody applied (other managers') stay; lists are
replaced whole; `metadata.uid` in the body is a precondition (409 when it differs); an apply of an absent object
creates it. A delete's `preconditions.uid` (a dict or a V1DeleteOptions) is one too: 409 when it differs.
"""

import json
from dataclasses import dataclass, field
from typing import Any

from kubernetes.client.exceptions import ApiException

KIND_OF_PLURAL = {
    "podmonitors": "PodMonitor",
    "inferencepools": "InferencePool",
    "sglangdeployments": "SGLangDeployment",
    "sglangworkergroups": "SGLangWorkerGroup",
}


@dataclass
class Call:
    verb: str
    kind: str
    name: str
    body: Any = None


def _not_found(kind: str, name: str) -> ApiException:
    exc = ApiException(status=404, reason="Not Found")
    exc.body = json.dumps({"kind": "Status", "reason": "NotFound", "details": {"name": name, "kind": kind}})
    return exc


def _unserved() -> ApiException:
    exc = ApiException(status=404, reason="Not Found")
    exc.body = "404 page not found"
    return exc


@dataclass
class FakeKube:
    objects: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    calls: list[Call] = field(default_factory=list)
    unserved_kinds: set[str] = field(default_factory=set)
    failures: dict[tuple[str, str], ApiException] = field(default_factory=dict)
    """(verb, kind) -> the exception that call raises."""
    uids: int = 0
    applied: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)
    """(manager, kind, name) -> the object that manager applied last."""

    # -- bookkeeping -----------------------------------------------------------------------------------------
    def _record(self, verb: str, kind: str, name: str, body: Any, kwargs: dict[str, Any]) -> None:
        assert "_request_timeout" in kwargs, f"{verb} {kind} {name} without _request_timeout"
        self.calls.append(Call(verb, kind, name, body))
        if kind in self.unserved_kinds:
            raise _unserved()
        failure = self.failures.get((verb, kind))
        if failure is not None:
            raise failure

    def writes(self, kind: str | None = None) -> list[Call]:
        return [c for c in self.calls if c.verb not in ("read", "list") and (kind is None or c.kind == kind)]

    def put(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.uids += 1
        obj = json.loads(json.dumps(obj))
        obj["metadata"].setdefault("uid", f"uid-{self.uids}")
        obj["metadata"].setdefault("resourceVersion", "1")
        self.objects[(obj["kind"], obj["metadata"]["name"])] = obj
        return obj

    def _create(self, kind: str, body: dict[str, Any], kwargs: dict[str, Any]) -> dict[str, Any]:
        name = body["metadata"].get("name") or f"{body['metadata'].get('generateName', '')}{self.uids}"
        self._record("create", kind, name, body, kwargs)
        if (kind, name) in self.objects and kind != "Event":
            raise ApiException(status=409, reason="AlreadyExists")
        return self.put({**body, "kind": kind, "metadata": {**body["metadata"], "name": name}})

    def _read(self, kind: str, name: str, kwargs: dict[str, Any]) -> dict[str, Any]:
        self._record("read", kind, name, None, kwargs)
        if (kind, name) not in self.objects:
            raise _not_found(kind, name)
        return self.objects[(kind, name)]

    def _apply(self, kind: str, name: str, body: dict[str, Any], kwargs: dict[str, Any]) -> dict[str, Any]:
        self._record("apply", kind, name, body, kwargs)
        manager = kwargs.get("field_manager")
        assert manager and kwargs.get("force") is True, "an apply names its field manager and forces"
        body = json.loads(json.dumps(body))
        precondition = body["metadata"].pop("uid", None)
        current = self.objects.get((kind, name))
        if current is None:
            if precondition is not None:
                raise _not_found(kind, name)
            created = self.put({**body, "kind": kind})
            self.applied[(manager, kind, name)] = body
            return created
        if precondition is not None and precondition != current["metadata"].get("uid"):
            raise ApiException(status=409, reason="Conflict")
        before = self.applied.get((manager, kind, name), {})
        _merge_applied(current, before, body)
        self.applied[(manager, kind, name)] = body
        current["metadata"]["resourceVersion"] = str(int(current["metadata"].get("resourceVersion") or 0) + 1)
        return current

    def applies(self, kind: str | None = None) -> list[Call]:
        return [c for c in self.calls if c.verb == "apply" and (kind is None or c.kind == kind)]

    def _patch(self, kind: str, name: str, body: dict[str, Any], kwargs: dict[str, Any]) -> dict[str, Any]:
        if "apply-patch" in str(kwargs.get("_content_type", "")):
            return self._apply(kind, name, body, kwargs)
        self._record("patch", kind, name, body, kwargs)
        if (kind, name) not in self.objects:
            raise _not_found(kind, name)
        current = self.objects[(kind, name)]
        for key, value in body.items():
            if key == "metadata":
                annotations = {**(current["metadata"].get("annotations") or {}), **(value.get("annotations") or {})}
                current["metadata"] = {**current["metadata"], **value, "annotations": {
                    k: v for k, v in annotations.items() if v is not None}}  # fmt: skip
            else:
                current[key] = value
        return current

    def _delete(self, kind: str, name: str, kwargs: dict[str, Any]) -> None:
        self._record("delete", kind, name, kwargs.get("body"), kwargs)
        if (kind, name) not in self.objects:
            raise _not_found(kind, name)
        precondition = _precondition_uid(kwargs.get("body"))
        if precondition is not None and precondition != self.objects[(kind, name)]["metadata"].get("uid"):
            raise ApiException(status=409, reason="Conflict")  # "Precondition failed: UID in precondition: ..."
        del self.objects[(kind, name)]

    # -- CoreV1Api -------------------------------------------------------------------------------------------
    def list_namespaced_pod(self, namespace: str, label_selector: str = "", field_selector: str = "", **kw: Any) -> Any:
        self._record("list", "Pod", "", label_selector or field_selector, kw)
        wanted = dict(pair.split("=", 1) for pair in label_selector.split(",") if pair)
        fields = dict(pair.split("=", 1) for pair in field_selector.split(",") if pair)
        assert set(fields) <= {"metadata.name"}, f"field selector {field_selector} not modelled"
        items = [
            obj for (kind, name), obj in sorted(self.objects.items())
            if kind == "Pod" and all((obj["metadata"].get("labels") or {}).get(k) == v for k, v in wanted.items())
            and fields.get("metadata.name", name) == name
        ]  # fmt: skip

        class Listed:
            pass

        listed = Listed()
        listed.items = items  # type: ignore[attr-defined]
        return listed

    def create_namespaced_pod(self, namespace: str, body: dict[str, Any], **kw: Any) -> Any:
        return self._create("Pod", body, kw)

    def delete_namespaced_pod(self, name: str, namespace: str, **kw: Any) -> Any:
        return self._delete("Pod", name, kw)

    def patch_namespaced_pod(self, name: str, namespace: str, body: dict[str, Any], **kw: Any) -> Any:
        return self._patch("Pod", name, body, kw)

    def read_namespaced_service(self, name: str, namespace: str, **kw: Any) -> Any:
        return self._read("Service", name, kw)

    def create_namespaced_service(self, namespace: str, body: dict[str, Any], **kw: Any) -> Any:
        return self._create("Service", body, kw)

    def patch_namespaced_service(self, name: str, namespace: str, body: dict[str, Any], **kw: Any) -> Any:
        return self._patch("Service", name, body, kw)

    def delete_namespaced_service(self, name: str, namespace: str, **kw: Any) -> Any:
        return self._delete("Service", name, kw)

    def read_namespaced_secret(self, name: str, namespace: str, **kw: Any) -> Any:
        return self._read("Secret", name, kw)

    def create_namespaced_event(self, namespace: str, body: dict[str, Any], **kw: Any) -> Any:
        return self._create("Event", {**body, "kind": "Event"}, kw)

    # -- AppsV1Api -------------------------------------------------------------------------------------------
    def read_namespaced_deployment(self, name: str, namespace: str, **kw: Any) -> Any:
        return self._read("Deployment", name, kw)

    def create_namespaced_deployment(self, namespace: str, body: dict[str, Any], **kw: Any) -> Any:
        return self._create("Deployment", body, kw)

    def patch_namespaced_deployment(self, name: str, namespace: str, body: dict[str, Any], **kw: Any) -> Any:
        return self._patch("Deployment", name, body, kw)

    def delete_namespaced_deployment(self, name: str, namespace: str, **kw: Any) -> Any:
        return self._delete("Deployment", name, kw)

    def read_namespaced_replica_set(self, name: str, namespace: str, **kw: Any) -> Any:
        return self._read("ReplicaSet", name, kw)

    # -- NetworkingV1Api -------------------------------------------------------------------------------------
    def read_namespaced_network_policy(self, name: str, namespace: str, **kw: Any) -> Any:
        return self._read("NetworkPolicy", name, kw)

    def create_namespaced_network_policy(self, namespace: str, body: dict[str, Any], **kw: Any) -> Any:
        return self._create("NetworkPolicy", body, kw)

    def patch_namespaced_network_policy(self, name: str, namespace: str, body: dict[str, Any], **kw: Any) -> Any:
        return self._patch("NetworkPolicy", name, body, kw)

    def delete_namespaced_network_policy(self, name: str, namespace: str, **kw: Any) -> Any:
        return self._delete("NetworkPolicy", name, kw)

    # -- CustomObjectsApi ------------------------------------------------------------------------------------
    def get_namespaced_custom_object(self, g: str, v: str, ns: str, plural: str, name: str, **kw: Any) -> Any:
        return self._read(KIND_OF_PLURAL[plural], name, kw)

    def list_namespaced_custom_object(self, g: str, v: str, ns: str, plural: str, **kw: Any) -> Any:
        kind = KIND_OF_PLURAL[plural]
        self._record("list", kind, "", None, kw)
        return {"items": [json.loads(json.dumps(obj)) for (k, _), obj in sorted(self.objects.items()) if k == kind]}

    def create_namespaced_custom_object(self, g: str, v: str, ns: str, plural: str, body: Any, **kw: Any) -> Any:
        return self._create(KIND_OF_PLURAL[plural], body, kw)

    def patch_namespaced_custom_object(
        self, g: str, v: str, ns: str, plural: str, name: str, body: Any, **kw: Any
    ) -> Any:
        return self._patch(KIND_OF_PLURAL[plural], name, body, kw)

    def delete_namespaced_custom_object(self, g: str, v: str, ns: str, plural: str, name: str, **kw: Any) -> Any:
        return self._delete(KIND_OF_PLURAL[plural], name, kw)

    def patch_namespaced_custom_object_status(
        self, g: str, v: str, ns: str, plural: str, name: str, body: Any, **kw: Any
    ) -> Any:
        self._record("patch_status", KIND_OF_PLURAL[plural], name, body, kw)
        current = self.objects[(KIND_OF_PLURAL[plural], name)]
        status = current.setdefault("status", {})
        status.update(body["status"])
        current["metadata"]["resourceVersion"] = str(int(current["metadata"]["resourceVersion"]) + 1)
        return current


def _precondition_uid(options: Any) -> str | None:
    """The uid precondition of a delete's options (a dict or a V1DeleteOptions), None without one."""
    if options is None:
        return None
    preconditions = options.get("preconditions") if isinstance(options, dict) else options.preconditions
    if preconditions is None:
        return None
    uid = preconditions.get("uid") if isinstance(preconditions, dict) else preconditions.uid
    return str(uid) if uid is not None else None


def _merge_applied(live: dict[str, Any], before: dict[str, Any], applied: dict[str, Any]) -> None:
    """Server-side apply for one manager, on maps: set what `applied` has, drop what `before` had and `applied`
    has not; leave keys neither names (another manager's)."""
    for key in before:
        if key not in applied:
            live.pop(key, None)
    for key, value in applied.items():
        if isinstance(value, dict) and isinstance(live.get(key), dict):
            _merge_applied(live[key], before.get(key) if isinstance(before.get(key), dict) else {}, value)
        else:
            live[key] = json.loads(json.dumps(value))


def wire(target: Any, fake: FakeKube) -> None:
    """Point a Writer's or Reconciler's API objects at the fake."""
    for attribute in ("core", "apps", "networking", "custom"):
        if hasattr(target, attribute):
            setattr(target, attribute, fake)
    if hasattr(target, "writer"):
        wire(target.writer, fake)
