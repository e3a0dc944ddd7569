"""The real API server's PodSecurity admission accepts what the operator renders: worker pods (single- and
multi-node, with a template sidecar) in a namespace that enforces "baseline", the router's pod in one that enforces
"restricted". Server-side dry runs: nothing is scheduled, no operator runs. A privileged pod is refused, so the
admission is known to be on.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from localcluster.fleet import create_namespace
from sglang_operator.api.spec import SGLangDeploymentSpec
from sglang_operator.render import Owner, render_all

SPECS: dict[str, dict[str, Any]] = {
    "single-node": {"model": {"path": "m"}, "router": {"apiKeySecretRef": {"name": "key"}}},
    "multi-node": {"model": {"path": "m"}, "parallelism": {"tp": 16, "nnodes": 2},
                   "template": {"spec": {"containers": [{"name": "proxy", "image": "busybox"}]}}},
}  # fmt: skip


@pytest.fixture(scope="module")
def enforcing(core: client.CoreV1Api) -> Iterator[dict[str, str]]:
    """{level: namespace} for two namespaces that enforce `baseline` and `restricted` (latest version)."""
    suffix = uuid.uuid4().hex[:5]
    namespaces = {level: f"e2e-psa-{level}-{suffix}" for level in ("baseline", "restricted")}
    for level, name in namespaces.items():
        labels = {"pod-security.kubernetes.io/enforce": level, "pod-security.kubernetes.io/enforce-version": "latest"}
        create_namespace(core, name, {"e2e": "true", **labels})
    yield namespaces
    for name in namespaces.values():
        core.delete_namespace(name, propagation_policy="Background")


def pods_to_admit(spec: dict[str, Any], namespace: str) -> list[tuple[str, dict[str, Any]]]:
    """(component, pod) for every worker pod and a pod made of the router Deployment's template."""
    objects = render_all(SGLangDeploymentSpec.model_validate(spec), Owner("psa", namespace, str(uuid.uuid4())))
    pods = [("worker", obj) for obj in objects if obj["kind"] == "Pod"]
    for obj in objects:
        if obj["kind"] == "Deployment":
            template = obj["spec"]["template"]
            meta = {"name": "psa-router", "namespace": namespace, **template["metadata"]}
            pods.append(("router", {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": template["spec"]}))
    return pods


@pytest.mark.parametrize("name", sorted(SPECS))
def test_workers_pass_baseline_and_the_router_restricted(
    core: client.CoreV1Api, enforcing: dict[str, str], name: str
) -> None:
    admitted = []
    for level in ("baseline", "restricted"):
        for component, pod in pods_to_admit(SPECS[name], enforcing[level]):
            if level == "restricted" and component == "worker":
                continue  # the SGLang image runs as root: workers meet baseline only
            core.create_namespaced_pod(enforcing[level], pod, dry_run="All")
            admitted.append((level, component))
    assert ("baseline", "worker") in admitted and ("restricted", "router") in admitted


def test_the_admission_is_on(core: client.CoreV1Api, enforcing: dict[str, str]) -> None:
    container = {"name": "c", "image": "x", "securityContext": {"privileged": True}}
    privileged = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "privileged"},
        "spec": {"containers": [container]},
    }
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_pod(enforcing["baseline"], privileged, dry_run="All")
    assert refused.value.status == 403 and "baseline" in refused.value.body
