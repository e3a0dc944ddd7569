"""The local control plane behaves like a real Kubernetes API server where the operator depends on it:
CRD schema and CEL validation, /status and /scale subresources, the pinned version, TokenRequest, and RBAC."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from localcluster.build import kube_version
from localcluster.cluster import ClusterInfo
from localcluster.procs import wait_for

GROUP, VERSION, PLURAL = "e2e.sglang.ai", "v1", "widgets"
CEL_MESSAGE = "spec.minReplicas must not exceed spec.maxReplicas"


def widget_crd() -> dict[str, Any]:
    spec_schema = {
        "type": "object",
        "required": ["replicas"],
        "properties": {
            "replicas": {"type": "integer", "minimum": 0},
            "minReplicas": {"type": "integer"},
            "maxReplicas": {"type": "integer"},
        },
        "x-kubernetes-validations": [
            {
                "rule": "!has(self.minReplicas) || !has(self.maxReplicas) || self.minReplicas <= self.maxReplicas",
                "message": CEL_MESSAGE,
            }
        ],
    }
    status_schema = {
        "type": "object",
        "properties": {"replicas": {"type": "integer"}, "selector": {"type": "string"}},
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"plural": PLURAL, "singular": "widget", "kind": "Widget"},
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {"spec": spec_schema, "status": status_schema},
                        }
                    },
                    "subresources": {
                        "status": {},
                        "scale": {
                            "specReplicasPath": ".spec.replicas",
                            "statusReplicasPath": ".status.replicas",
                            "labelSelectorPath": ".status.selector",
                        },
                    },
                }
            ],
        },
    }


@pytest.fixture(scope="module")
def widgets(api_client: client.ApiClient) -> Iterator[client.CustomObjectsApi]:
    """The test CRD, installed and Established for this module, removed afterwards."""
    ext = client.ApiextensionsV1Api(api_client)
    name = f"{PLURAL}.{GROUP}"
    try:
        ext.delete_custom_resource_definition(name)  # left over from an interrupted run on a kept cluster
        wait_for(lambda: _crd_absent(ext, name), 60, f"old CRD {name} to go")
    except ApiException as err:
        assert err.status == 404
    ext.create_custom_resource_definition(widget_crd())

    def established() -> bool:
        conditions = ext.read_custom_resource_definition(name).status.conditions or []
        return any(c.type == "Established" and c.status == "True" for c in conditions)

    wait_for(established, 30, f"CRD {name} Established")
    objects = client.CustomObjectsApi(api_client)
    wait_for(lambda: _served(objects), 30, f"{name} served")
    yield objects
    ext.delete_custom_resource_definition(name)


def _crd_absent(ext: client.ApiextensionsV1Api, name: str) -> bool:
    try:
        ext.read_custom_resource_definition(name)
    except ApiException as err:
        return err.status == 404
    return False


def _served(objects: client.CustomObjectsApi) -> bool:
    try:
        objects.list_cluster_custom_object(GROUP, VERSION, PLURAL)
    except ApiException:
        return False
    return True


def widget(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Widget", "metadata": {"name": name}, "spec": spec}


def test_version_is_the_pinned_release(api_client: client.ApiClient, cluster: ClusterInfo) -> None:
    info = client.VersionApi(api_client).get_code()
    assert info.git_version == kube_version() == cluster.version
    assert (info.major, info.minor) == tuple(kube_version().lstrip("v").split(".")[:2])


def test_crd_openapi_schema_is_enforced(widgets: client.CustomObjectsApi, namespace: str) -> None:
    with pytest.raises(ApiException) as err:
        widgets.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, widget("bad", {"replicas": "x"}))
    assert err.value.status == 422
    assert "spec.replicas" in err.value.body
    with pytest.raises(ApiException) as err:
        widgets.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, widget("neg", {"replicas": -1}))
    assert err.value.status == 422


def test_crd_cel_rule_is_enforced(widgets: client.CustomObjectsApi, namespace: str) -> None:
    bad = widget("cel", {"replicas": 1, "minReplicas": 5, "maxReplicas": 2})
    with pytest.raises(ApiException) as err:
        widgets.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, bad)
    assert err.value.status == 422
    assert CEL_MESSAGE in err.value.body
    good = widget("cel", {"replicas": 1, "minReplicas": 2, "maxReplicas": 5})
    created = widgets.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, good)
    assert created["spec"]["maxReplicas"] == 5


def test_status_and_scale_subresources(widgets: client.CustomObjectsApi, namespace: str) -> None:
    args = (GROUP, VERSION, namespace, PLURAL, "scaled")
    widgets.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, widget("scaled", {"replicas": 2}))

    # A write to the main resource ignores status; only the /status subresource sets it.
    widgets.patch_namespaced_custom_object(*args, {"spec": {"replicas": 2}, "status": {"replicas": 9}})
    assert "status" not in widgets.get_namespaced_custom_object(*args)
    widgets.patch_namespaced_custom_object_status(*args, {"status": {"replicas": 2, "selector": "app=scaled"}})
    assert widgets.get_namespaced_custom_object_status(*args)["status"] == {
        "replicas": 2,
        "selector": "app=scaled",
    }

    scale = widgets.get_namespaced_custom_object_scale(*args)
    assert scale["kind"] == "Scale"
    assert scale["spec"]["replicas"] == 2
    assert scale["status"] == {"replicas": 2, "selector": "app=scaled"}
    widgets.patch_namespaced_custom_object_scale(*args, {"spec": {"replicas": 7}})
    assert widgets.get_namespaced_custom_object(*args)["spec"]["replicas"] == 7


def _token_client(cluster_client: client.ApiClient, token: str) -> client.ApiClient:
    """A client that authenticates only with a bearer token (no client certificate)."""
    admin = cluster_client.configuration
    conf = client.Configuration()
    conf.host = admin.host
    conf.ssl_ca_cert = admin.ssl_ca_cert
    conf.api_key = {"authorization": f"Bearer {token}"}
    return client.ApiClient(conf)


@pytest.fixture
def service_account_token(core: client.CoreV1Api, namespace: str) -> tuple[str, str]:
    """(name, token) of a fresh service account; the token comes from the TokenRequest API."""
    name = f"sa-{uuid.uuid4().hex[:6]}"
    core.create_namespaced_service_account(namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=name)))
    request = client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=600))
    response = core.create_namespaced_service_account_token(name, namespace, request)
    assert response.status.token
    return name, response.status.token


def test_token_request_issues_a_valid_token(
    api_client: client.ApiClient, namespace: str, service_account_token: tuple[str, str]
) -> None:
    name, token = service_account_token
    review = client.AuthenticationV1Api(api_client).create_token_review(
        client.V1TokenReview(spec=client.V1TokenReviewSpec(token=token))
    )
    assert review.status.authenticated is True
    assert review.status.user.username == f"system:serviceaccount:{namespace}:{name}"


def test_rbac_grants_only_what_the_role_allows(
    api_client: client.ApiClient, namespace: str, service_account_token: tuple[str, str]
) -> None:
    name, token = service_account_token
    rbac = client.RbacAuthorizationV1Api(api_client)
    rule = client.V1PolicyRule(api_groups=[""], resources=["configmaps"], verbs=["get", "list"])
    rbac.create_namespaced_role(namespace, client.V1Role(metadata=client.V1ObjectMeta(name="read-cm"), rules=[rule]))
    subject = client.RbacV1Subject(kind="ServiceAccount", name=name, namespace=namespace)
    ref = client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="Role", name="read-cm")
    binding = client.V1RoleBinding(metadata=client.V1ObjectMeta(name="read-cm"), role_ref=ref, subjects=[subject])
    rbac.create_namespaced_role_binding(namespace, binding)
    as_sa = client.CoreV1Api(_token_client(api_client, token))

    def allowed() -> bool:  # the RBAC authorizer sees the new binding once its informer has it
        try:
            as_sa.list_namespaced_config_map(namespace)
        except ApiException as err:
            assert err.status == 403, err
            return False
        return True

    wait_for(allowed, 30, "the RoleBinding to take effect")
    cm = client.V1ConfigMap(metadata=client.V1ObjectMeta(name="nope"))
    denied = [
        lambda: as_sa.create_namespaced_config_map(namespace, cm),
        lambda: as_sa.list_namespaced_secret(namespace),
        lambda: as_sa.list_namespaced_config_map("default"),
        lambda: as_sa.list_node(),
    ]
    for call in denied:
        with pytest.raises(ApiException) as err:
            call()
        assert err.value.status == 403
        assert f"system:serviceaccount:{namespace}:{name}" in err.value.body
