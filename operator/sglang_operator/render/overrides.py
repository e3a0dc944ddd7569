"""Merge the user's typed `template.spec` (api/podtemplate.py: placement and safe additions only) into a rendered
pod spec.

Top-level keys (nodeSelector, tolerations, affinity, priorityClassName, ...) replace the rendered value.
`containers`, `initContainers` and `volumes` merge by name, like a strategic merge patch: a container named
`sglang` updates the rendered one (its env and volumeMounts are appended, its resources merged name by name), a new
name is added. Of that entry's resources only what the template may request reaches the pod (cpu, memory,
ephemeral-storage, hugepages-*: `pod_rules.main_resource`): the GPUs and the RDMA device are the operator's amounts,
whatever a CR stored before that rule names.
"""

from typing import Any

from ..api.pod_rules import main_resource
from ..api.podtemplate import PodSpecOverrides

_MERGED_BY_NAME = ("containers", "initContainers", "volumes")
_APPENDED_CONTAINER_LISTS = ("env", "volumeMounts", "ports", "envFrom")


def _merge_container(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        if key in _APPENDED_CONTAINER_LISTS and isinstance(value, list):
            merged[key] = [*base.get(key, []), *value]
        elif key == "resources" and isinstance(value, dict):
            merged[key] = {
                kind: {**base.get(key, {}).get(kind, {}), **_tenant_amounts(value.get(kind, {}))}
                for kind in ("requests", "limits")
            }
        else:
            merged[key] = value
    return merged


def _tenant_amounts(amounts: dict[str, Any]) -> dict[str, Any]:
    return {name: amount for name, amount in amounts.items() if main_resource(name)}


def _merge_named(base: list[dict[str, Any]], override: list[dict[str, Any]], nested: bool) -> list[dict[str, Any]]:
    by_name = {item.get("name"): item for item in override}
    result = []
    for item in base:
        extra = by_name.pop(item.get("name"), None)
        if extra is None:
            result.append(item)
        else:
            result.append(_merge_container(item, extra) if nested else extra)
    return result + list(by_name.values())


def merge_pod_spec(rendered: dict[str, Any], overrides: PodSpecOverrides) -> dict[str, Any]:
    """Only the fields the typed template defines can reach the pod, whatever the CR held: the API server prunes
    (or refuses) the rest, and the operator never reads it."""
    merged = dict(rendered)
    for key, value in overrides.model_dump(by_alias=True, exclude_none=True).items():
        if key in _MERGED_BY_NAME and isinstance(value, list):
            merged[key] = _merge_named(rendered.get(key, []), value, nested=key != "volumes")
        else:
            merged[key] = value
    return merged
