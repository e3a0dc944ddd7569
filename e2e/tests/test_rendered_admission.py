"""Every child the operator renders for an accepted edge-case spec is admitted by the real API server (issue 29,
gap 8): a spec `validate` and the CRD accept must never give pods the API server refuses.

The specs (`tests/support/api/edge_specs.py`) sit at the edges the pod rules draw, on the side that must stay allowed:
envFrom in Kubernetes' form, every env and downward API field path pods have, paths and keys with dots that are not
'..', annotations just under the template's budget, the longest label-key prefix, sidecars with cpu, memory and
ephemeral-storage, worker groups and multi-node replicas. Each spec is also created as a CR (`dryRun=All`), and
each rendered child is created with `dryRun=All` and strict field validation, so a field the API server would
drop or refuse fails the test; the refusals are collected and reported together.
"""

from __future__ import annotations

import json
from typing import Any

from kubernetes import client, dynamic
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic.exceptions import ResourceNotFoundError

from localcluster.fleet import install_crd
from sglang_operator.api.constants import GROUP, KIND, PLURAL, VERSION
from sglang_operator.api.validation import parse_spec
from sglang_operator.render import Owner, render_all
from tests.support.api.edge_specs import EDGE_SPECS

OWNER_UID = "7f0c2a4e-0000-4000-8000-000000000001"


def _refusal(exc: ApiException) -> str:
    """The Status' message and its causes' fields (what the operator reports too, `controller/apierrors.py`)."""
    try:
        status = json.loads(exc.body)
    except (TypeError, ValueError):
        return f"{exc.status}: {exc.body}"
    causes = (status.get("details") or {}).get("causes") or []
    fields = "; ".join(f"{cause.get('field', '')}: {cause.get('message', '')}" for cause in causes)
    return f"{exc.status}: {status.get('message', '')} [{fields}]"


def _create(api: dynamic.DynamicClient, obj: dict[str, Any], namespace: str) -> str | None:
    """None when the API server would store `obj`, else what it said; a kind it does not serve is skipped."""
    try:
        resource = api.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
    except ResourceNotFoundError:
        return None  # PodMonitor, InferencePool: CRDs this cluster need not have
    try:
        resource.create(body=obj, namespace=namespace, query_params=[("dryRun", "All"), ("fieldValidation", "Strict")])
    except ApiException as exc:
        return _refusal(exc)
    return None


def test_edge_specs_are_admitted_as_crs(api_client: client.ApiClient, namespace: str) -> None:
    install_crd(api_client)
    api = client.CustomObjectsApi(api_client)
    refused = []
    for name, raw in EDGE_SPECS.items():
        doc = {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "metadata": {"name": "edge"}, "spec": raw}
        try:
            api.create_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, doc, dry_run="All", field_validation="Strict"
            )
        except ApiException as exc:
            refused.append(f"{name}: {_refusal(exc)[:600]}")
    assert not refused, "\n".join(refused)


def test_every_rendered_child_of_an_edge_spec_is_admitted(api_client: client.ApiClient, namespace: str) -> None:
    api = dynamic.DynamicClient(api_client)
    owner = Owner(name="edge", namespace=namespace, uid=OWNER_UID)
    refused, pods = [], 0
    for name, raw in EDGE_SPECS.items():
        spec, errors = parse_spec(raw, strict=True)
        assert spec is not None, f"{name}: {errors}"
        for obj in render_all(spec, owner):
            pods += obj["kind"] == "Pod"
            if (said := _create(api, obj, namespace)) is not None:
                refused.append(f"{name}: {obj['kind']} {obj['metadata']['name']}: {said[:600]}")
    assert pods >= len(EDGE_SPECS)
    assert not refused, "\n".join(refused)
