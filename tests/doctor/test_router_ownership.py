"""Issue 29, gap 3: the doctor sends the router's API key only to the fleet's own router pods, chosen as the reconciler
chooses them (a controller ownerReference to one of the router Deployment's ReplicaSets), never by labels, which any
pod of the namespace can carry.

Two real servers share a port on two loopback addresses: 127.0.0.1 is the fleet's router pod, 127.0.0.2 a tenant's
pod labelled as that router. The impostor must receive nothing, with the router API key configured."""

import base64
from collections.abc import Iterator, Mapping
from contextlib import ExitStack
from typing import Any

import pytest
from kubernetes import client

from sglang_operator.api.constants import COMPONENT_ROUTER, LABEL_COMPONENT, LABEL_DEPLOYMENT
from sglang_operator.api.spec import SGLangDeploymentSpec
from sglang_operator.doctor.doctor_pass import evaluate
from sglang_operator.observed import router_pod_of
from sglang_operator.settings import OperatorSettings
from tests.router.fakehttp import FakeHTTP, Reply, serving

KEY = "ROUTER-KEY-89ab"
WORKERS = Reply.json({"workers": []})


def router_pod(name: str, ip: str, owners: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "labels": {LABEL_DEPLOYMENT: "chat", LABEL_COMPONENT: COMPONENT_ROUTER},
            "ownerReferences": owners,
        },
        "status": {"podIP": ip, "conditions": [{"type": "Ready", "status": "True"}]},
    }


def replica_set(name: str, controller: bool = True) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": name, "uid": "u", "controller": controller}


IMPOSTORS = {
    "no-owner": [],
    "another-replicaset": [replica_set("other-router-5d9f")],
    "not-the-controller": [replica_set("chat-router-5d9f", controller=False)],
    "a-deployment-not-a-replicaset": [{**replica_set("chat-router-5d9f"), "kind": "Deployment"}],
    "a-prefix-of-the-name": [replica_set("chat-routerx-5d9f")],
}


@pytest.fixture
def routers() -> Iterator[tuple[FakeHTTP, FakeHTTP]]:
    with ExitStack() as stack:
        owned = stack.enter_context(serving({("GET", "/workers"): WORKERS}))
        port = int(owned.url.rsplit(":", 1)[1])
        try:
            impostor = stack.enter_context(serving({("GET", "/workers"): WORKERS}, host="127.0.0.2", port=port))
        except OSError:
            pytest.skip("no second loopback address here")
        yield owned, impostor


@pytest.mark.parametrize("owners", IMPOSTORS.values(), ids=IMPOSTORS.keys())
def test_a_pod_labelled_as_the_router_but_not_owned_receives_nothing(
    routers: tuple[FakeHTTP, FakeHTTP], owners: list[dict[str, Any]]
) -> None:
    owned, impostor = routers
    port = int(owned.url.rsplit(":", 1)[1])
    spec = SGLangDeploymentSpec.model_validate(
        {"model": {"path": "m"}, "router": {"port": port, "apiKeySecretRef": {"name": "router-key"}}}
    )
    pods = [
        router_pod("chat-router-5d9f-abcde", "127.0.0.1", [replica_set("chat-router-5d9f")]),
        router_pod("chat-router-impostor", "127.0.0.2", owners),
    ]
    body = {"metadata": {"namespace": "team-a", "name": "chat"}, "status": {}}

    def read_secret(namespace: str, name: str) -> Mapping[str, Any] | None:
        assert (namespace, name) == ("team-a", "router-key")
        return {"data": {"token": base64.b64encode(KEY.encode()).decode()}}

    evaluate(client.ApiClient(), body, spec, pods, OperatorSettings(), now=1000.0, prometheus_url="http://127.0.0.1:9",
             as_user=True,
             read_secret=read_secret, deadline_seconds=5)  # fmt: skip
    assert impostor.requests == []
    assert [(r.method, r.path, r.authorization) for r in owned.requests] == [("GET", "/workers", f"Bearer {KEY}")]


def test_the_doctor_and_the_reconciler_select_router_pods_with_one_function() -> None:
    """One function, not two copies: the doctor's selection is the reconciler's."""
    from sglang_operator.controller import reconcile
    from sglang_operator.doctor import observe

    assert reconcile.router_pod_of is router_pod_of and observe.router_pod_of is router_pod_of
    pods = [router_pod("a", "10.0.0.1", [replica_set("chat-router-1")]), router_pod("b", "10.0.0.2", [])]
    assert [p["metadata"]["name"] for p in observe.router_pods(pods, "chat")] == ["a"]
