"""A CR's `Snapshot` read from the API server, for a pass run once outside the loops (tests, one-off runs).

It is built by the same `state.take_snapshot` the loops use, from index-shaped maps filled by one GET of the CR,
one LIST of its labelled pods, one GET per child it may own and one LIST of the scale targets: the pass then reads
exactly what it reads from the watches, on one path.
"""

from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from ..api.constants import GROUP, LABEL_DEPLOYMENT, PLURAL, VERSION
from ..api.scaletarget import SCALE_PLURAL
from .kube import API_TIMEOUT
from .state import ChildKey, PodKey, Snapshot, take_snapshot, trim_child
from .writer import KindUnavailable, Writer, possible_children


def read_snapshot(writer: Writer, namespace: str, name: str) -> Snapshot | None:
    """The CR `namespace/name` as a pass sees it, or None when it does not exist; read through `writer`'s clients
    (the pass's own, so a test's stand-in API serves both)."""
    custom = writer.custom
    try:
        body = custom.get_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, name, _request_timeout=API_TIMEOUT
        )
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    listed = writer.core.list_namespaced_pod(
        namespace, label_selector=f"{LABEL_DEPLOYMENT}={name}", _request_timeout=API_TIMEOUT
    )
    pods: dict[PodKey, list[dict[str, Any]]] = {
        (namespace, name): [dict(writer.api.sanitize_for_serialization(pod)) for pod in listed.items]
    }
    refs = possible_children(name)
    return take_snapshot(
        dict(body), pods, _children(writer, namespace, name), [(ref.kind, ref.name) for ref in refs],
        {(namespace, name): _scale_targets(custom, namespace, name)},
    )  # fmt: skip


def _children(writer: Writer, namespace: str, name: str) -> dict[ChildKey, list[dict[str, Any]]]:
    """Each child the CR may own that exists, trimmed as the watches trim it. A kind the cluster does not serve, or
    one the reader may not read, has none (as a watch of it would show none)."""
    found: dict[ChildKey, list[dict[str, Any]]] = {}
    for ref in possible_children(name):
        try:
            child = writer.read(ref, namespace)
        except KindUnavailable:
            continue
        except ApiException as exc:
            if exc.status == 403:
                continue
            raise
        if child is not None:
            found[(namespace, ref.kind, ref.name)] = [trim_child(child)]
    return found


def _scale_targets(custom: client.CustomObjectsApi, namespace: str, name: str) -> list[dict[str, Any]]:
    """The SGLangWorkerGroups that name this CR (none where their CRD is not installed)."""
    try:
        listed = custom.list_namespaced_custom_object(
            GROUP, VERSION, namespace, SCALE_PLURAL, _request_timeout=API_TIMEOUT
        )
    except ApiException as exc:
        if exc.status == 404:
            return []
        raise
    return [t for t in listed.get("items") or [] if (t.get("spec") or {}).get("deployment") == name]
