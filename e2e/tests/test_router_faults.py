"""A faulty router on the real local cluster: the fleet behind it says what is wrong, and another fleet in the same
namespace keeps being reconciled (it becomes Ready and follows a scale) while the faulty one answers nonsense or
nothing.

The faults are real ones, on the real smg:
- *an answer the operator cannot use*: the faulty fleet's router API key is rotated in its Secret after the router
  started, so every `/workers` call the operator makes is answered 401 (with smg's JSON error body, which must not
  reach status);
- *a hang*: the router process is stopped (SIGSTOP through the node agent), so its socket accepts connections and
  never answers; each call must end by its deadline.
Every wait polls a condition with a deadline.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from localcluster.cluster import ClusterInfo
from localcluster.fleet import Fleet, simulated_example
from localcluster.nodeagent import faults
from localcluster.procs import wait_for

SMG_ERROR_BODY_WORDS = ("Missing API key", "invalid_api_key", "invalid_request_error", "error")


def quickstart(replicas: int, **spec: Any) -> dict[str, Any]:
    return simulated_example("quickstart.yaml", replicas=replicas, **spec)


def condition(fleet: Fleet, type_: str) -> dict[str, Any]:
    return fleet.condition(type_) or {}


def ready_with(fleet: Fleet, replicas: int) -> bool:
    """Ready by the operator's own account (the keyed router's lists cannot be read without the key)."""
    status = fleet.status()
    return (
        condition(fleet, "Ready").get("status") == "True"
        and status.get("readyReplicas") == replicas
        and status.get("registeredWorkers") == replicas
    )


def router_problem(fleet: Fleet, words: str) -> dict[str, Any] | None:
    """RouterSynced=False naming the failure, and Degraded saying the same, or None."""
    synced, degraded = condition(fleet, "RouterSynced"), condition(fleet, "Degraded")
    if synced.get("status") == "False" and words in synced.get("message", "") and words in degraded.get("message", ""):
        return {"synced": synced, "degraded": degraded}
    return None


@pytest.mark.usefixtures("operator")
def test_a_faulty_router_is_reported_and_another_fleet_keeps_reconciling(
    api_client: client.ApiClient, core: client.CoreV1Api, namespace: str, cluster: ClusterInfo
) -> None:
    core.create_namespaced_secret(namespace, {"metadata": {"name": "router-key"}, "stringData": {"key": "first"}})
    healthy, faulty = Fleet(api_client, namespace, "healthy"), Fleet(api_client, namespace, "faulty")
    faulty.apply(quickstart(1, router={"apiKeySecretRef": {"name": "router-key", "key": "key"}}))
    healthy.apply(quickstart(1))
    wait_for(lambda: ready_with(faulty, 1), 120, "the faulty fleet Ready before its fault", interval=0.5)
    healthy.wait_ready(1)
    [router_pod] = faulty.pods("router")
    router_url = f"http://{router_pod.status.pod_ip}:30000"

    # 1. Every call answered 401 (smg still has the first key; the operator now sends the rotated one).
    core.patch_namespaced_secret("router-key", namespace, {"stringData": {"key": "rotated"}})
    found = wait_for(lambda: router_problem(faulty, f"GET {router_url}/workers: HTTP 401"), 60,
                     "the faulty fleet to report its router's 401", interval=0.5)  # fmt: skip
    assert found["degraded"]["status"] == "True"
    for text in (found["synced"]["message"], found["degraded"]["message"]):
        assert not any(word in text for word in SMG_ERROR_BODY_WORDS), text  # what failed, not what smg said

    healthy.patch_spec({"replicas": 2})
    healthy.wait_ready(2)
    assert router_problem(faulty, "HTTP 401")  # still reported, pass after pass

    # 2. The router hangs: its process is stopped, its socket still accepts connections.
    faults.pause_pod(cluster.state_dir / "nodeagent", namespace, router_pod.metadata.name)
    try:
        # Until its readiness probe fails (about 15 s), the stopped router is still a Ready pod the operator calls.
        wait_for(lambda: router_problem(faulty, f"GET {router_url}/workers: no answer within 5s"), 45,
                 "the faulty fleet to report its router hanging", interval=0.2)  # fmt: skip
        healthy.patch_spec({"replicas": 1})
        healthy.wait_ready(1, timeout=90)  # the hung router costs the other fleet nothing
    finally:
        faults.resume_pod(cluster.state_dir / "nodeagent", namespace, router_pod.metadata.name)

    # 3. The fault gone: one key again (a new router pod reads the Secret as it is now), the fleet recovers and
    # Degraded clears. (The stopped router may have been restarted by its liveness probe with the rotated key.)
    core.patch_namespaced_secret("router-key", namespace, {"stringData": {"key": "first"}})
    core.delete_namespaced_pod(router_pod.metadata.name, namespace, grace_period_seconds=0)
    wait_for(lambda: ready_with(faulty, 1) and condition(faulty, "Degraded").get("status") == "False", 90,
             "the faulty fleet to recover", interval=0.5)  # fmt: skip
    events = [e for e in core.list_namespaced_event(namespace).items if e.involved_object.name == "faulty"]
    warnings = [e.message for e in events if e.type == "Warning" and e.reason == "RegistrationFailed"]
    assert warnings and not any(word in m for m in warnings for word in SMG_ERROR_BODY_WORDS), warnings
    assert len(warnings) < 10, warnings  # one per distinct failure, not one per pass


@pytest.mark.usefixtures("operator")
def test_router_children_follow_the_spec_and_a_foreign_service_is_never_touched(
    api_client: client.ApiClient, core: client.CoreV1Api, namespace: str
) -> None:
    apps = client.AppsV1Api(api_client)
    foreign = {"metadata": {"name": "other-router", "labels": {"team": "b"}},
               "spec": {"ports": [{"port": 80}], "selector": {"app": "b"}}}  # fmt: skip
    core.create_namespaced_service(namespace, foreign)
    mine, other = Fleet(api_client, namespace, "mine"), Fleet(api_client, namespace, "other")
    mine.apply(quickstart(1))
    other.apply(quickstart(1))
    mine.wait_ready(1)

    def collision() -> dict[str, Any] | None:
        degraded = condition(other, "Degraded")
        ok = degraded.get("reason") == "NameCollision" and "Service other-router" in degraded.get("message", "")
        return degraded if ok else None

    wait_for(collision, 60, "the other fleet to report its router Service's name taken", interval=0.5)
    service = core.read_namespaced_service("other-router", namespace)
    assert service.metadata.owner_references is None and service.metadata.labels == {"team": "b"}
    assert service.spec.selector == {"app": "b"}

    mine.patch_spec({"router": {"enabled": False}})
    other.patch_spec({"router": {"enabled": False}})

    def router_children_gone() -> bool:
        names = {d.metadata.name for d in apps.list_namespaced_deployment(namespace).items}
        services = {s.metadata.name for s in core.list_namespaced_service(namespace).items}
        return "mine-router" not in names and "mine-router" not in services and "other-router" not in names

    wait_for(router_children_gone, 60, "the disabled routers' Deployments and Service deleted", interval=0.5)
    assert core.read_namespaced_service("other-router", namespace).metadata.labels == {"team": "b"}  # not ours
    wait_for(lambda: condition(other, "Degraded").get("status") == "False", 60, "the collision to clear")
