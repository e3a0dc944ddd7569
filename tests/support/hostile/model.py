"""What a hostile case is, and the helpers that build one: shared by `corpus` and every `cases_*` module beside it."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Literal

import yaml

from sglang_operator.kubeyaml import KubectlDumper

SCHEMA = "schema"
UNKNOWN = "unknown-field"
POLICY = "policy"
Refusal = Literal["schema", "unknown-field", "policy"]

API_VERSION = "sglang.ai/v1alpha1"
KIND = "SGLangDeployment"
NAME = "hostile"


@dataclass(frozen=True)
class Hostile:
    id: str
    doc: dict[str, Any]
    field: str
    """The field validate names (pydantic's list indexes written `[0]`, as the API server writes them)."""
    fragment: str
    """A fragment of validate's message for that field."""
    refused_by: Refusal
    why: str
    """What a tenant gets if it were accepted (issue 16's item where there is one)."""
    allowed_host_paths: tuple[str, ...] = ()
    """The operator's setting the case is checked under (validate --allow-host-path); none by default."""
    allowed_prometheus_urls: tuple[str, ...] = ()
    """The same for a CR's own Prometheus (validate --allow-prometheus-url)."""
    admission: str | None = None
    """Where the API server refuses the request before validating fields (no JSON, a namespace other than the
    request's, a name of the wrong type), a fragment of what it says instead of the field."""

    @property
    def text(self) -> str:
        return yaml.dump(self.doc, Dumper=_PlainDumper, sort_keys=False, width=10_000)


class _PlainDumper(KubectlDumper):
    """Writes a repeated value out again instead of as an anchor and an alias (which the CLI refuses)."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _merge(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(base)
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def cr(spec: dict[str, Any] | None = None, *, metadata: Any = None, whole_spec: Any = None) -> dict[str, Any]:
    """An SGLangDeployment named `hostile` whose spec is `{model: {path: m}}` merged with `spec` (or `whole_spec`
    as given)."""
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": NAME} if metadata is None else metadata,
        "spec": whole_spec if whole_spec is not None else _merge({"model": {"path": "m"}}, spec or {}),
    }


def pod_template(pod_spec: dict[str, Any]) -> dict[str, Any]:
    return {"template": {"spec": pod_spec}}


def sidecar(**fields: Any) -> dict[str, Any]:
    return pod_template({"containers": [{"name": "helper", "image": "busybox:1.36", **fields}]})


def main_container(**fields: Any) -> dict[str, Any]:
    return pod_template({"containers": [{"name": "sglang", **fields}]})
