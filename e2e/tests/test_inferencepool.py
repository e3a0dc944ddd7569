"""The InferencePool (Gateway API Inference Extension v1) on a real API server with the Inference Extension's own
CRD (read from its Go module, `localcluster.gocrds`): what the operator renders is accepted as rendered, and on a
live fleet the membership label the pool selects is on exactly the registered rank-0 pods, and leaves a replica no
later than the write that marks it draining (a pod watch sees every version of every pod)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from kubernetes import client, watch

from localcluster import gocrds
from localcluster.fleet import FAST_SIM_ENV, Fleet, OperatorProcess
from localcluster.procs import wait_for
from sglang_operator.api.inferencepool import LABEL_INFERENCE_POOL, POOL_MEMBER
from sglang_operator.api.spec import SGLangDeploymentSpec
from sglang_operator.render import Owner, shared_children

POOL = {"enabled": True, "endpointPickerRef": {"name": "chat-epp", "port": 9002}}
GROUP, VERSION, PLURAL = "inference.networking.k8s.io", "v1", "inferencepools"


@pytest.fixture
def pool_crd(api_client: client.ApiClient) -> None:
    crd = gocrds.load_crd(gocrds.INFERENCE_POOL)
    assert crd["metadata"]["name"] == f"{PLURAL}.{GROUP}"
    assert any(v["name"] == VERSION and v["served"] for v in crd["spec"]["versions"])
    gocrds.install(api_client, crd)


def test_the_rendered_pool_is_accepted_as_rendered(
    api_client: client.ApiClient, namespace: str, pool_crd: None
) -> None:
    spec = SGLangDeploymentSpec.model_validate({"model": {"path": "m"}, "inferencePool": POOL})
    (pool,) = [c for c in shared_children(spec, Owner("chat", namespace, "uid-1")) if c["kind"] == "InferencePool"]
    created = client.CustomObjectsApi(api_client).create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, pool, dry_run="All", field_validation="Strict"
    )
    assert created["spec"] == pool["spec"]  # every default the CRD has is already written out: nothing added


def member(pod: Any) -> bool:
    return bool((pod.metadata.labels or {}).get(LABEL_INFERENCE_POOL) == POOL_MEMBER)


def draining(pod: Any) -> bool:
    return "sglang.ai/draining-since" in (pod.metadata.annotations or {})


@dataclass
class PodWatch:
    versions: list[Any] = field(default_factory=list)
    error: BaseException | None = None
    """A watch that broke before the test ended: versions may be missing, so the test cannot conclude."""


@pytest.fixture
def pod_versions(api_client: client.ApiClient, namespace: str) -> Iterator[PodWatch]:
    """Every version of every pod of the namespace, as a watch delivers them, until the test ends."""
    seen = PodWatch()
    core = client.CoreV1Api(api_client)
    start = core.list_namespaced_pod(namespace).metadata.resource_version
    stream = watch.Watch()
    done = threading.Event()

    def run() -> None:
        try:
            for event in stream.stream(
                core.list_namespaced_pod, namespace, resource_version=start, timeout_seconds=600
            ):
                seen.versions.append(event["object"])
        except Exception as exc:  # the connection ends when the test is over and its namespace goes
            if not done.is_set():
                seen.error = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    yield seen
    done.set()
    stream.stop()
    thread.join(timeout=30)


def test_the_label_follows_registration_and_leaves_before_the_drain(
    api_client: client.ApiClient, namespace: str, pool_crd: None, operator: OperatorProcess,
    pod_versions: PodWatch,
) -> None:  # fmt: skip
    fleet = Fleet(api_client, namespace, "chat")
    fleet.apply({
        "apiVersion": "sglang.ai/v1alpha1", "kind": "SGLangDeployment", "metadata": {"name": "chat"},
        "spec": {"model": {"path": "Qwen/Qwen2.5-0.5B-Instruct"}, "engine": {"env": FAST_SIM_ENV}, "replicas": 2,
                 "inferencePool": POOL},
    })  # fmt: skip
    fleet.wait_ready(2, timeout=120)
    custom = client.CustomObjectsApi(api_client)
    pool = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "chat")
    assert pool["metadata"]["ownerReferences"][0]["uid"] == fleet.get()["metadata"]["uid"]
    selector = ",".join(f"{k}={v}" for k, v in pool["spec"]["selector"]["matchLabels"].items())
    core = client.CoreV1Api(api_client)

    def selected() -> set[str]:
        pods = core.list_namespaced_pod(namespace, label_selector=selector).items
        return {f"http://{p.status.pod_ip}:{pool['spec']['targetPorts'][0]['number']}" for p in pods}

    wait_for(lambda: selected() == fleet.ready_worker_urls() and len(selected()) == 2, 60,
             "the pool selecting both registered workers", on_timeout=lambda: f"; {selected()}")  # fmt: skip
    assert set().union(*fleet.router_lists().values()) == selected()  # the Gateway's pool is the routers' list

    before = {p.metadata.name for p in fleet.pods()}
    fleet.scale(1)
    wait_for(lambda: len(fleet.pods()) == 1 and len(selected()) == 1, 120, "one replica left, one pool member")
    fleet.wait_ready(1, timeout=60)
    (kept,) = {p.metadata.name for p in fleet.pods()}
    (gone,) = before - {kept}
    assert pod_versions.error is None, f"the pod watch broke: {pod_versions.error}"
    versions = [p for p in pod_versions.versions if p.metadata.name == gone]
    assert any(member(p) for p in versions), "the removed replica was a member first"
    assert any(draining(p) for p in versions), "and it was drained, not deleted outright"
    both = [p.metadata.resource_version for p in versions if member(p) and draining(p)]
    assert both == [], f"a version of {gone} was draining and still in the pool: {both}"
    assert selected() == fleet.ready_worker_urls()

    fleet.patch_spec({"inferencePool": {"enabled": False}})
    wait_for(lambda: selected() == set(), 60, "the label removed with the pool turned off")
    wait_for(lambda: not custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)["items"], 60,
             "the InferencePool deleted")  # fmt: skip
