"""The HPA and KEDA examples (examples/scaling/) are what a real API server accepts, field for field: the HPA as
autoscaling/v2, the ScaledObject against KEDA's own CRD, read from KEDA's Go module (`localcluster.gocrds`).
Strict field validation: a misspelt field is an error, not silently dropped. e2e/tests/test_hpa.py runs the HPA
pipeline itself against the real HPA controller."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from localcluster import gocrds
from localcluster.fleet import install_crd
from localcluster.paths import REPO_ROOT

EXAMPLES = REPO_ROOT / "examples" / "scaling"


def example(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((EXAMPLES / name).read_text())
    return doc


def scaled_object(api_client: client.ApiClient, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
    created: dict[str, Any] = client.CustomObjectsApi(api_client).create_namespaced_custom_object(
        "keda.sh", "v1alpha1", namespace, "scaledobjects", body, field_validation="Strict"
    )
    return created


def test_keda_scaledobject_example_is_valid_against_kedas_crd(api_client: client.ApiClient, namespace: str) -> None:
    crd = gocrds.load_crd(gocrds.KEDA_SCALEDOBJECT)
    assert crd["metadata"]["name"] == "scaledobjects.keda.sh"
    gocrds.install(api_client, crd)
    body = example("keda-scaledobject.yaml")
    created = scaled_object(api_client, namespace, body)
    assert created["spec"]["scaleTargetRef"] == {"apiVersion": "sglang.ai/v1alpha1", "kind": "SGLangDeployment",
                                                 "name": "llama"}  # fmt: skip
    assert created["spec"]["triggers"] == body["spec"]["triggers"]
    assert created["spec"]["advanced"] == body["spec"]["advanced"]

    typo = {**body, "metadata": {"name": "typo"}, "spec": {**body["spec"], "maxReplicas": 8}}
    with pytest.raises(ApiException) as caught:  # the HPA's field name, not KEDA's maxReplicaCount
        scaled_object(api_client, namespace, typo)
    assert caught.value.status == 400 and "maxReplicas" in str(caught.value.body)


def test_hpa_example_is_a_valid_autoscaling_v2_hpa_of_the_crd(api_client: client.ApiClient, namespace: str) -> None:
    install_crd(api_client)
    body = example("hpa.yaml")
    autoscaling = client.AutoscalingV2Api(api_client)
    created = autoscaling.create_namespaced_horizontal_pod_autoscaler(namespace, body, field_validation="Strict")
    assert (created.spec.min_replicas, created.spec.max_replicas) == (2, 8)
    target = created.spec.scale_target_ref
    assert (target.api_version, target.kind, target.name) == ("sglang.ai/v1alpha1", "SGLangDeployment", "llama")
    assert created.spec.metrics[0].external.metric.name == "sglang_requests_per_second"
