"""Issue 37, ownership of router pods: a pod is one of the CR's routers only when the ReplicaSet that controls it is
controlled by the router Deployment of its slot (the uid chain pod -> ReplicaSet -> Deployment the CR owns). A
tenant's ReplicaSet named like a slot's (`<name>-router-b-<x>`) does not make its pods routers: they are neither read
nor sent the router's API key, and they do not count as the new epoch's routers in a cut-over's switch check."""

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

import pytest

from sglang_operator.observed import router_pod_of, slot_router_pods
from tests.support.router.fakehttp import FakeHTTP, Reply, serving
from tests.unit.controller.test_reconcile_pass import NAME, NS, cluster, condition

SLOTS = {"chat-router": "deployment-a", "chat-router-b": "deployment-b"}


def replica_set_ref(name: str, uid: str) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": name, "uid": uid, "controller": True}


def router_pod(name: str, replica_set: str, rs_uid: str, url: str = "http://10.0.0.1:30000") -> dict[str, Any]:
    ip, port = url.removeprefix("http://").split(":")
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS,
                     "labels": {"sglang.ai/deployment": NAME, "sglang.ai/component": "router"},
                     "ownerReferences": [replica_set_ref(replica_set, rs_uid)]},
        "spec": {"containers": [{"name": "router", "ports": [{"name": "http", "containerPort": int(port)}]}]},
        "status": {"phase": "Running", "podIP": ip, "conditions": [{"type": "Ready", "status": "True"}]},
    }  # fmt: skip


def test_only_pods_of_a_replica_set_its_slots_deployment_controls_are_routers() -> None:
    pods = [
        router_pod("a", "chat-router-5d9f8", "rs-a"),
        router_pod("b", "chat-router-b-7c6d5", "rs-b"),
        router_pod("tenant", "chat-router-b-x", "rs-tenant"),  # controlled by the tenant's own Deployment
        router_pod("orphan", "chat-router-b-y", "rs-orphan"),  # controlled by nothing
        router_pod("unread", "chat-router-b-z", "rs-unread"),  # not read (or gone): unknown
        router_pod("crossed", "chat-router-b-w", "rs-crossed"),  # slot A's Deployment, named as slot B's
    ]
    assert all(router_pod_of(p, NAME) for p in pods)  # the names alone say every one is a router
    controllers = {"rs-a": "deployment-a", "rs-b": "deployment-b", "rs-tenant": "tenant-deployment",
                   "rs-orphan": None, "rs-crossed": "deployment-a"}  # fmt: skip
    kept = slot_router_pods(pods, NAME, SLOTS, controllers)
    assert [p["metadata"]["name"] for p in kept] == ["a", "b"]
    assert slot_router_pods(pods, NAME, {"chat-router": "deployment-a"}, controllers) == pods[:1]  # one slot owned


def replica_set(name: str, uid: str, deployment_uid: str) -> dict[str, Any]:
    """A ReplicaSet controlled by the Deployment `deployment_uid`."""
    controller = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d", "uid": deployment_uid, "controller": True}
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": name, "namespace": NS, "uid": uid, "ownerReferences": [controller]}}  # fmt: skip


@pytest.fixture
def fake_http() -> Iterator[Callable[[dict[tuple[str, str], Reply]], FakeHTTP]]:
    with ExitStack() as stack:
        yield lambda routes: stack.enter_context(serving(routes))


def test_a_tenants_replica_set_named_as_a_slots_gets_no_router_call(fake_http: Callable[..., FakeHTTP]) -> None:
    routes = {("GET", "/workers"): Reply.json({"workers": []}), ("POST", "/workers"): Reply(status=202)}
    own, tenant, tenant_a = fake_http(routes), fake_http(routes), fake_http(routes)
    reconciler, fake = cluster({"replicas": 0, "router": {"enabled": True}})
    reconciler.reconcile(NS, NAME)  # creates the router Deployment
    deployment = fake.objects[("Deployment", "chat-router")]
    fake.put(replica_set("chat-router-5d9f8", "rs-a", deployment["metadata"]["uid"]))
    fake.put(replica_set("chat-router-b-x", "rs-t", "tenant-deployment"))
    fake.put(replica_set("chat-router-x", "rs-x", "tenant-deployment"))
    fake.put(router_pod("chat-router-5d9f8-abcde", "chat-router-5d9f8", "rs-a", own.url))
    fake.put(router_pod("chat-router-b-x-fghij", "chat-router-b-x", "rs-t", tenant.url))  # a slot this CR has not
    fake.put(router_pod("chat-router-x-klmno", "chat-router-x", "rs-x", tenant_a.url))  # named as slot A's
    reconciler.reconcile(NS, NAME)
    assert tenant.requests == [] and tenant_a.requests == []
    assert [(r.method, r.path) for r in own.requests] == [("GET", "/workers")]
    assert "0 workers registered on 1 router pods" in condition(fake, "RouterSynced")["message"]
    reads = [c.name for c in fake.calls if c.kind == "ReplicaSet"]
    assert sorted(reads) == ["chat-router-5d9f8", "chat-router-x"]
    reconciler.reconcile(NS, NAME)
    assert [c.name for c in fake.calls if c.kind == "ReplicaSet"] == reads  # read once, then from the cache
