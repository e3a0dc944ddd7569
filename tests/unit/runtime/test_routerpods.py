"""`runtime.routerpods`: the one reading of which pods are a CR's routers (the reconciler's and the doctor's). The
slots are the router Deployments the CR controls; a ReplicaSet is read once per uid, kept while asked for; 404 or
another uid under the name is "not the slot's"; any other error is raised, never guessed."""

from typing import Any, cast

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from sglang_operator.runtime.routerpods import ReplicaSetControllers, router_candidates, slot_deployments

CR = "cr-uid"


def owned(uid: str, controller: bool = True) -> list[dict[str, Any]]:
    return [{"apiVersion": "sglang.ai/v1alpha1", "kind": "SGLangDeployment", "name": "chat", "uid": uid,
             "controller": controller}]  # fmt: skip


class Apps:
    """`read_namespaced_replica_set` from a dict of ReplicaSets by name (an int: that HTTP error); counts reads."""

    def __init__(self, replica_sets: dict[str, Any]) -> None:
        self.replica_sets = replica_sets
        self.reads: list[str] = []

    def read_namespaced_replica_set(self, name: str, namespace: str, **_: Any) -> dict[str, Any]:
        self.reads.append(name)
        found = self.replica_sets.get(name, 404)
        if isinstance(found, int):
            raise ApiException(status=found)
        return cast(dict[str, Any], found)


def rs(uid: str, deployment_uid: str, kind: str = "Deployment") -> dict[str, Any]:
    return {"metadata": {"uid": uid, "ownerReferences": [{"kind": kind, "uid": deployment_uid, "controller": True}]}}


def test_slots_are_the_router_deployments_the_cr_controls() -> None:
    found = {
        "chat-router": {"metadata": {"uid": "a", "ownerReferences": owned(CR)}},
        "chat-router-b": {"metadata": {"uid": "b", "ownerReferences": owned(CR, controller=False)}},
    }
    assert slot_deployments("chat", CR, found.get) == {"chat-router": "a"}
    assert slot_deployments("chat", "another-cr", found.get) == {}


def test_a_replica_sets_controller_is_read_once_and_checked_by_uid() -> None:
    apps = Apps({"chat-router-1": rs("rs-1", "dep"), "chat-router-2": rs("rs-2", "dep", kind="StatefulSet")})
    cache = ReplicaSetControllers(clock=lambda: 0.0)
    api = cast(client.AppsV1Api, apps)
    assert cache.controller(api, "ns", "chat-router-1", "rs-1") == "dep"
    assert cache.controller(api, "ns", "chat-router-1", "rs-1") == "dep"
    assert cache.controller(api, "ns", "chat-router-1", "rs-old") is None  # another ReplicaSet under the name now
    assert cache.controller(api, "ns", "chat-router-2", "rs-2") is None  # not a Deployment's
    assert cache.controller(api, "ns", "chat-router-3", "rs-3") is None  # 404
    assert apps.reads == ["chat-router-1", "chat-router-1", "chat-router-2", "chat-router-3"]


def test_a_replica_set_asked_for_is_never_read_again_and_one_not_asked_for_is_forgotten() -> None:
    """A quiet fleet makes no read (state from watches; e2e/tests/test_many_fleets.py counts the operator's GETs over
    a quiet window); a ReplicaSet nobody asked about for `forget_after` is dropped, and read again if it returns."""
    now = [0.0]
    apps = Apps({"chat-router-1": rs("rs-1", "dep")})
    cache = ReplicaSetControllers(forget_after=600.0, clock=lambda: now[0])
    api = cast(client.AppsV1Api, apps)
    for _ in range(100):  # a pass every 10 s for 1,000 s
        assert cache.controller(api, "ns", "chat-router-1", "rs-1") == "dep"
        now[0] += 10.0
    assert apps.reads == ["chat-router-1"]
    now[0] += 601.0
    assert cache.controller(api, "ns", "chat-router-1", "rs-1") == "dep"
    assert apps.reads == ["chat-router-1", "chat-router-1"]


def test_an_error_other_than_404_is_raised() -> None:
    apps = cast(client.AppsV1Api, Apps({"chat-router-1": 403}))
    cache = ReplicaSetControllers()
    with pytest.raises(ApiException):
        cache.controller(apps, "ns", "chat-router-1", "rs-1")
    with pytest.raises(ApiException):  # nothing remembered: read again
        cache.controller(apps, "ns", "chat-router-1", "rs-1")


def test_only_router_pods_named_as_a_slots_are_candidates() -> None:
    def pod(component: str, replica_set: str) -> dict[str, Any]:
        ref = {"kind": "ReplicaSet", "name": replica_set, "uid": "u", "controller": True}
        return {"metadata": {"labels": {"sglang.ai/component": component}, "ownerReferences": [ref]}}

    pods = [pod("router", "chat-router-1"), pod("worker", "chat-router-1"), pod("router", "chat-routerx-1")]
    assert router_candidates(pods, "chat") == pods[:1]
