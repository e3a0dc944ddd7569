"""Issue 29, gap 3, and issue 37: the doctor sends the router's API key only to the fleet's own router pods, chosen
exactly as the reconciler chooses them (`runtime.routerpods`): a pod whose controlling ReplicaSet is controlled, by
uid, by the router Deployment of that slot the CR owns; never by labels, which any pod of the namespace can carry,
nor by the ReplicaSet's name, which any tenant can choose (`<name>-router-<x>`).

Two real servers share a port on two loopback addresses: 127.0.0.1 is the fleet's router pod, 127.0.0.2 a tenant's
pod labelled as that router. A third answers as the API server (the Deployments and ReplicaSets the doctor reads). The
impostor must receive nothing, with the router API key configured."""

import base64
from collections.abc import Iterator, Mapping
from contextlib import ExitStack
from typing import Any

import pytest
from kubernetes import client

from sglang_operator import observed
from sglang_operator.api.constants import COMPONENT_ROUTER, LABEL_COMPONENT, LABEL_DEPLOYMENT
from sglang_operator.api.spec import SGLangDeploymentSpec
from sglang_operator.doctor.doctor_pass import evaluate
from sglang_operator.doctor.loop import watched_slots
from sglang_operator.runtime.routerpods import ReplicaSetControllers
from sglang_operator.settings import OperatorSettings
from tests.support.router.fakehttp import FakeHTTP, Reply, serving

KEY = "ROUTER-KEY-89ab"
WORKERS = Reply.json({"workers": []})
NS, CR_UID, SLOT_A_UID = "team-a", "cr-uid", "deployment-a-uid"
BODY = {"metadata": {"namespace": NS, "name": "chat", "uid": CR_UID}, "status": {}}
APPS = f"/apis/apps/v1/namespaces/{NS}"


def router_pod(name: str, ip: str, owners: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "labels": {LABEL_DEPLOYMENT: "chat", LABEL_COMPONENT: COMPONENT_ROUTER},
            "ownerReferences": owners,
        },
        "status": {"podIP": ip, "conditions": [{"type": "Ready", "status": "True"}]},
    }


def replica_set(name: str, uid: str = "rs-a", controller: bool = True) -> dict[str, Any]:
    """A pod's ownerReference to the ReplicaSet `name`."""
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": name, "uid": uid, "controller": controller}


def controlled_by(kind: str, name: str, uid: str) -> list[dict[str, Any]]:
    return [{"apiVersion": "v1", "kind": kind, "name": name, "uid": uid, "controller": True}]


def api_object(kind: str, name: str, uid: str, owners: list[dict[str, Any]]) -> Reply:
    """A Deployment or ReplicaSet as the API server answers it (the client's models want a spec)."""
    selector = {"matchLabels": {"app": name}}
    spec = {"selector": selector, "template": {"metadata": {"labels": selector["matchLabels"]}}}
    return Reply.json({"apiVersion": "apps/v1", "kind": kind, "spec": spec,
                       "metadata": {"name": name, "namespace": NS, "uid": uid, "ownerReferences": owners}})  # fmt: skip


API = {
    # The CR's router Deployment (slot A); slot B (`chat-router-b`) does not exist: 404.
    ("GET", f"{APPS}/deployments/chat-router"): api_object(
        "Deployment", "chat-router", SLOT_A_UID, controlled_by("SGLangDeployment", "chat", CR_UID)
    ),
    ("GET", f"{APPS}/replicasets/chat-router-5d9f"): api_object(
        "ReplicaSet", "chat-router-5d9f", "rs-a", controlled_by("Deployment", "chat-router", SLOT_A_UID)
    ),
    # A tenant's ReplicaSet named as slot A's (`<name>-router-<hash>`), its own Deployment's.
    ("GET", f"{APPS}/replicasets/chat-router-x"): api_object(
        "ReplicaSet", "chat-router-x", "rs-tenant", controlled_by("Deployment", "chat-router-x", "tenant-deployment")
    ),
}
OWNED = router_pod("chat-router-5d9f-abcde", "127.0.0.1", [replica_set("chat-router-5d9f")])

IMPOSTORS = {
    "no-owner": [],
    "another-replicaset": [replica_set("other-router-5d9f")],
    "not-the-controller": [replica_set("chat-router-5d9f", controller=False)],
    "a-deployment-not-a-replicaset": [{**replica_set("chat-router-5d9f"), "kind": "Deployment"}],
    "a-prefix-of-the-name": [replica_set("chat-routerx-5d9f")],
    "a-tenants-replicaset-named-as-the-slots": [replica_set("chat-router-x", "rs-tenant")],
    "a-slot-the-cr-has-not": [replica_set("chat-router-b-x", "rs-b")],
    "a-gone-replicaset-of-the-slots-name": [replica_set("chat-router-5d9f", "rs-older")],
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


@pytest.fixture
def kube() -> Iterator[FakeHTTP]:
    with serving(API) as api:
        yield api


def read_secret(namespace: str, name: str) -> Mapping[str, Any] | None:
    assert (namespace, name) == (NS, "router-key")
    return {"data": {"token": base64.b64encode(KEY.encode()).decode()}}


def run(kube: FakeHTTP, owned: FakeHTTP, pods: list[dict[str, Any]], **kwargs: Any) -> None:
    """One evaluation against the fake API server, the router API key configured."""
    port = int(owned.url.rsplit(":", 1)[1])
    spec = SGLangDeploymentSpec.model_validate(
        {"model": {"path": "m"}, "router": {"port": port, "apiKeySecretRef": {"name": "router-key"}}}
    )
    api = client.ApiClient(client.Configuration(host=kube.url))
    evaluate(api, BODY, spec, pods, OperatorSettings(), now=1000.0, prometheus_url="http://127.0.0.1:9", as_user=True,
             read_secret=read_secret, deadline_seconds=5, **kwargs)  # fmt: skip


def called(router: FakeHTTP) -> list[tuple[str, str, str | None]]:
    return [(r.method, r.path, r.authorization) for r in router.requests]


@pytest.mark.parametrize("owners", IMPOSTORS.values(), ids=IMPOSTORS.keys())
def test_a_pod_labelled_as_the_router_but_not_owned_receives_nothing(
    routers: tuple[FakeHTTP, FakeHTTP], kube: FakeHTTP, owners: list[dict[str, Any]]
) -> None:
    owned, impostor = routers
    run(kube, owned, [OWNED, router_pod("chat-router-impostor", "127.0.0.2", owners)])
    assert impostor.requests == []
    assert called(owned) == [("GET", "/workers", f"Bearer {KEY}")]


@pytest.mark.parametrize("watched", [False, True], ids=["cli-reads-the-slots", "loop-hands-the-watched-slots"])
def test_a_tenants_replica_set_named_as_the_slots_gets_no_doctor_call(
    routers: tuple[FakeHTTP, FakeHTTP], kube: FakeHTTP, watched: bool
) -> None:
    """Issue 37: a tenant's pod controlled by a ReplicaSet named `chat-router-x` (as slot A's would be) that the
    slot's Deployment does not control receives no `GET /workers` and no API key, from the CLI (which reads the
    router Deployments) as from the operator's loop (which hands over the ones its watch shows)."""
    owned, impostor = routers
    tenant = router_pod("chat-router-x-fghij", "127.0.0.2", [replica_set("chat-router-x", "rs-tenant")])
    slots = {"slots": {"chat-router": SLOT_A_UID}, "replica_sets": ReplicaSetControllers()} if watched else {}
    run(kube, owned, [OWNED, tenant], **slots)
    assert impostor.requests == []
    assert called(owned) == [("GET", "/workers", f"Bearer {KEY}")]
    reads = sorted(r.path for r in kube.requests)
    replica_sets = [f"{APPS}/replicasets/chat-router-5d9f", f"{APPS}/replicasets/chat-router-x"]
    deployments = [] if watched else [f"{APPS}/deployments/chat-router", f"{APPS}/deployments/chat-router-b"]
    assert reads == sorted(deployments + replica_sets)


def test_the_loops_replica_sets_are_read_once_then_from_its_cache(
    routers: tuple[FakeHTTP, FakeHTTP], kube: FakeHTTP
) -> None:
    owned, _ = routers
    cache = ReplicaSetControllers()
    for _ in range(2):
        run(kube, owned, [OWNED], slots={"chat-router": SLOT_A_UID}, replica_sets=cache)
    assert [r.path for r in kube.requests] == [f"{APPS}/replicasets/chat-router-5d9f"]
    assert len(owned.requests) == 2


def test_a_replica_set_that_cannot_be_read_leaves_the_routers_unknown(routers: tuple[FakeHTTP, FakeHTTP]) -> None:
    """Not a guess: an API error other than 404 calls no router (and raises nothing out of the evaluation)."""
    owned, _ = routers
    with serving({("GET", f"{APPS}/replicasets/chat-router-5d9f"): Reply(500, b"{}")}) as broken:
        run(broken, owned, [OWNED], slots={"chat-router": SLOT_A_UID})
    assert owned.requests == []


def test_no_router_candidate_no_api_read(routers: tuple[FakeHTTP, FakeHTTP], kube: FakeHTTP) -> None:
    owned, _ = routers
    run(kube, owned, [router_pod("chat-router-impostor", "127.0.0.2", [])])
    assert kube.requests == [] and owned.requests == []


def test_the_loop_takes_the_slots_the_cr_owns_from_the_deployment_index() -> None:
    def deployment(name: str, uid: str, owner: str) -> dict[str, Any]:
        return {
            "metadata": {"name": name, "uid": uid, "ownerReferences": controlled_by("SGLangDeployment", "c", owner)}
        }

    index = {
        (NS, "Deployment", "chat-router"): [deployment("chat-router", SLOT_A_UID, CR_UID)],
        (NS, "Deployment", "chat-router-b"): [deployment("chat-router-b", "tenant-b", "another-cr")],
        ("team-b", "Deployment", "chat-router-b"): [deployment("chat-router-b", "b-of-team-b", CR_UID)],
    }
    assert watched_slots(index, NS, "chat", BODY) == {"chat-router": SLOT_A_UID}
    assert watched_slots({}, NS, "chat", BODY) == {}


def test_the_doctor_and_the_reconciler_select_router_pods_with_one_function() -> None:
    """One code path, not two copies: the doctor's selection is the reconciler's, and its pure core is
    `observed.slot_router_pods`."""
    from sglang_operator.controller import reconcile
    from sglang_operator.doctor import observe
    from sglang_operator.runtime import routerpods

    assert reconcile.ReplicaSetControllers is routerpods.ReplicaSetControllers is observe.ReplicaSetControllers
    assert reconcile.slot_deployments is routerpods.slot_deployments is observe.slot_deployments
    assert routerpods.slot_router_pods is observed.slot_router_pods
    assert not hasattr(reconcile.Reconciler, "_replica_set_controller")
