"""The ArgoCD health check (manifests/argocd/health.lua, on gopher-lua as ArgoCD runs it) on the statuses the operator
really writes, read from live SGLangDeployments on the local cluster.

A watch records every version of a fleet's CR while it starts, turns Ready, is scaled to 0: ArgoCD would have shown
Progressing while replicas started, Progressing while a new generation was not yet observed, Healthy once ready and
Suspended at 0 replicas. A child name taken by a foreign Service and a host path the operator's admin did not
allow are Degraded. With SGLANG_CAPTURE_ARGOCD_FIXTURES=1 the statuses are also written to
manifests/argocd/fixtures/captured-*.yaml, which tests/integration/chart/test_argocd_health.py checks without a cluster.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import yaml
from kubernetes import client, watch

from localcluster.fleet import Fleet, OperatorProcess, simulated_example
from localcluster.gotools import HEALTH_SCRIPT, argocd_health
from localcluster.procs import wait_for
from sglang_operator import names
from sglang_operator.api.constants import GROUP, PLURAL, VERSION

FIXTURES = HEALTH_SCRIPT.parent / "fixtures"
CAPTURE = os.environ.get("SGLANG_CAPTURE_ARGOCD_FIXTURES") == "1"
START_TIMEOUT_S = 180.0


def trimmed(obj: dict[str, Any]) -> dict[str, Any]:
    """What the health check reads, and a fixture keeps: no uid, managedFields or resourceVersion."""
    meta = obj["metadata"]
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "metadata": {"name": meta["name"], "namespace": "team-a", "generation": meta.get("generation")},
        "spec": obj.get("spec") or {},
        **({"status": obj["status"]} if "status" in obj else {}),
    }


def capture(name: str, about: str, obj: dict[str, Any], verdict: dict[str, str], message: str) -> None:
    if not CAPTURE:
        return
    doc = {
        "about": about,
        "captured": f"e2e/tests/test_argocd_health.py, {time.strftime('%Y-%m-%d')}",
        "expect": {"status": verdict["status"], "message": message},
        "object": trimmed(obj),
    }
    (FIXTURES / f"captured-{name}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False, width=120))


@contextmanager
def recorded(api: client.ApiClient, namespace: str, name: str) -> Iterator[list[dict[str, Any]]]:
    """Every version of the CR named `name` while the block runs (a watch started before it, so none is missed)."""
    versions: list[dict[str, Any]] = []
    custom = client.CustomObjectsApi(api)
    since = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)["metadata"]["resourceVersion"]
    watcher = watch.Watch()

    stopping = threading.Event()

    def run() -> None:
        try:
            for event in watcher.stream(
                custom.list_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL,
                field_selector=f"metadata.name={name}", resource_version=since, timeout_seconds=600,
            ):  # fmt: skip
                if event["type"] in ("ADDED", "MODIFIED"):
                    versions.append(event["object"])
        except Exception:
            if not stopping.is_set():  # a stopped watch may end with a broken stream: that is the stop
                raise

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield versions
    finally:
        stopping.set()
        watcher.stop()


@pytest.fixture
def fleets(api_client: client.ApiClient, namespace: str, operator: OperatorProcess) -> Iterator[None]:
    """Afterwards the test's SGLangDeployments are deleted while the operator still runs (it removes their
    finalizer), so none is left waiting on it in a namespace being deleted."""
    yield
    custom = client.CustomObjectsApi(api_client)
    custom.delete_collection_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)
    wait_for(lambda: not custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)["items"], 60,
             "the test's SGLangDeployments deleted")  # fmt: skip


def test_health_follows_a_live_fleet_from_start_to_suspended(
    api_client: client.ApiClient, namespace: str, fleets: None
) -> None:
    fleet = Fleet(api_client, namespace, "chat")
    with recorded(api_client, namespace, "chat") as versions:
        fleet.apply(simulated_example("quickstart.yaml", replicas=1))
        fleet.wait_ready(1, timeout=START_TIMEOUT_S)
        wait_for(lambda: bool(versions) and (versions[-1].get("status") or {}).get("readyReplicas") == 1, 30,
                 "the watch seeing the ready status")  # fmt: skip
        before_scale = len(versions)
        fleet.scale(0)
        wait_for(lambda: fleet.status().get("ready") == "0/0" and (fleet.condition("Ready") or {}).get("status")
                 == "True", 120, "scaled to 0 and Ready", on_timeout=lambda: f"; {fleet.status()}")  # fmt: skip
        wait_for(lambda: (versions[-1].get("status") or {}).get("ready") == "0/0", 30, "the watch seeing 0/0")

    verdicts = argocd_health(versions)
    assert all("error" not in v for v in verdicts), verdicts
    seen = [(v["status"], v["message"]) for v in verdicts]

    # Starting: Progressing (first while the operator has not written status, then while the replica starts).
    first_ready = next(i for i, obj in enumerate(versions) if (obj.get("status") or {}).get("readyReplicas") == 1
                       and _condition(obj, "Ready") == "True")  # fmt: skip
    starting = seen[:first_ready]
    assert starting and {s for s, _ in starting} == {"Progressing"}, seen
    scaling = next(i for i, (s, m) in enumerate(starting) if "Scaling" in m or "replicas ready" in m)
    capture("starting", "A fleet of one replica whose worker is starting (the operator's first passes).",
            versions[scaling], verdicts[scaling], starting[scaling][1])  # fmt: skip

    # Ready: Healthy.
    assert seen[first_ready] == ("Healthy", "AllReplicasReady: 1/1 replicas ready"), seen
    capture("healthy", "One replica ready and registered on the router.", versions[first_ready],
            verdicts[first_ready], "1/1 replicas ready")  # fmt: skip

    # The scale to 0: its first version is the new generation the operator has not observed yet.
    after = list(zip(versions[before_scale:], seen[before_scale:], verdicts[before_scale:], strict=True))
    pending = [(obj, v) for obj, s, v in after if obj["status"]["observedGeneration"] < obj["metadata"]["generation"]]
    assert pending, "no version with the new generation unobserved"
    assert pending[0][1]["status"] == "Progressing" and "observe generation" in pending[0][1]["message"], pending[0][1]
    capture("generation-not-observed", "Scaled from 1 to 0: the spec's new generation, before the operator's pass.",
            pending[0][0], pending[0][1], "Waiting for the operator to observe generation")  # fmt: skip

    # At 0 replicas without an autoscaler: Suspended.
    assert seen[-1] == ("Suspended", "spec.replicas is 0: no replicas run"), seen
    capture("suspended", "Scaled to 0 with kubectl scale; no autoscaler.", versions[-1], verdicts[-1],
            "spec.replicas is 0")  # fmt: skip


def test_health_is_degraded_on_a_taken_child_name_and_a_refused_spec(
    api_client: client.ApiClient, core: client.CoreV1Api, namespace: str, fleets: None
) -> None:
    # A Service with the router's name that the CR does not own: Degraded=True, NameCollision.
    core.create_namespaced_service(namespace, {
        "metadata": {"name": names.router("taken")},
        "spec": {"ports": [{"port": 30000}], "selector": {"app": "someone-else"}},
    })  # fmt: skip
    taken = Fleet(api_client, namespace, "taken")
    taken.apply(simulated_example("quickstart.yaml", replicas=1))
    wait_for(lambda: (taken.condition("Degraded") or {}).get("reason") == "NameCollision", 60,
             "Degraded NameCollision", on_timeout=lambda: f"; {taken.status()}")  # fmt: skip
    # A host path the operator's settings do not allow (the chart's default allows none): PolicyViolation.
    refused = Fleet(api_client, namespace, "refused")
    refused.apply(simulated_example("quickstart.yaml", replicas=1,
                                    model={"path": "Qwen/Qwen2.5-0.5B-Instruct",
                                           "cache": {"type": "hostPath", "hostPath": "/models"}}))  # fmt: skip
    wait_for(lambda: (refused.condition("Ready") or {}).get("reason") == "PolicyViolation", 60,
             "Ready=False PolicyViolation", on_timeout=lambda: f"; {refused.status()}")  # fmt: skip

    objects = [taken.get(), refused.get()]
    collision, violation = argocd_health(objects)
    assert collision["status"] == "Degraded" and collision["message"].startswith("NameCollision: "), collision
    assert f"Service/{names.router('taken')}" in collision["message"] or names.router("taken") in collision["message"]
    assert violation["status"] == "Degraded" and violation["message"].startswith("PolicyViolation: "), violation
    capture("name-collision", "The router's Service name taken by a Service the CR does not own.", objects[0],
            collision, "NameCollision: ")  # fmt: skip
    capture("policy-violation", "A hostPath model cache the operator's admin did not allow.", objects[1], violation,
            "PolicyViolation: ")  # fmt: skip


def _condition(obj: dict[str, Any], type_: str) -> str | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return str(cond.get("status"))
    return None
