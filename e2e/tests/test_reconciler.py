"""The operator on the real local cluster: replicas, router membership, scaling, rollouts with drain, failures.

Workers are simulator pods, the router is the real smg, the API server is real. Every wait polls a condition with
an explicit deadline; every load loop is bounded.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import requests
from kubernetes import client

from localcluster.cluster import ClusterInfo
from localcluster.fleet import (
    FAST_SIM_ENV,
    Fleet,
    OperatorProcess,
    chat,
    generate,
    install_crd,
    simulated_example,
    steady_load,
)
from localcluster.nodeagent import faults
from localcluster.procs import wait_for
from sglang_operator.controller.reconcile import Reconciler
from sglang_operator.settings import OperatorSettings


@pytest.fixture
def hf_secret(core: client.CoreV1Api, namespace: str) -> None:
    core.create_namespaced_secret(namespace, {"metadata": {"name": "hf-token"}, "stringData": {"token": "hf_test"}})


def llama(replicas: int = 2) -> dict[str, object]:
    return simulated_example("llama-70b-tp4.yaml", replicas=replicas)


def assert_no_stale_router_entries(fleet: Fleet) -> None:
    """Every URL a router lists belongs to a live, Ready, non-draining worker."""
    ready = fleet.ready_worker_urls()
    for router, urls in fleet.router_lists().items():
        stale = set(urls) - ready
        assert not stale, f"router {router} lists workers that are not ready: {stale}"


def converge_without_stale_entries(fleet: Fleet, done: Callable[[], bool], what: str, timeout: float = 120) -> None:
    """Wait for `done` and the routers in sync, checking at every step that no router lists a stale worker."""
    deadline = time.monotonic() + timeout
    while not (done() and fleet.router_in_sync()):
        assert_no_stale_router_entries(fleet)
        assert time.monotonic() < deadline, f"{what} timed out: {fleet.status()}"
        time.sleep(0.5)


def quickstart(replicas: int) -> dict[str, Any]:
    return simulated_example("quickstart.yaml", replicas=replicas)


@pytest.mark.usefixtures("operator", "hf_secret")
def test_two_replicas_ready_registered_and_serving(api_client: client.ApiClient, namespace: str) -> None:
    fleet = Fleet(api_client, namespace, "llama")
    fleet.apply(llama(2))
    fleet.wait_ready(2)
    status = fleet.status()
    assert (status["gpusPerReplica"], status["totalGPUs"], status["ready"]) == (4, 8, "2/2")
    assert status["endpoint"] == f"http://llama-router.{namespace}.svc:30000"
    router = fleet.router_urls()[0]
    for i in range(6):
        assert generate(router, f"hello {i}").status_code == 200
        answer = chat(router, "llama-3.1-70b", f"hi {i}")
        assert answer.status_code == 200, answer.text
        assert answer.json()["choices"][0]["message"]["content"]


@pytest.mark.usefixtures("operator", "hf_secret")
def test_scale_by_spec_and_by_scale_subresource(api_client: client.ApiClient, namespace: str) -> None:
    fleet = Fleet(api_client, namespace, "llama")
    fleet.apply(llama(2))
    fleet.wait_ready(2)
    fleet.patch_spec({"replicas": 4})
    converge_without_stale_entries(fleet, lambda: fleet.status().get("readyReplicas") == 4, "scale to 4")
    fleet.wait_ready(4)
    fleet.scale(1)
    assert fleet.get()["spec"]["replicas"] == 1
    converge_without_stale_entries(fleet, lambda: len(fleet.pods()) == 1, "scale to 1")
    fleet.wait_ready(1)
    announced = [
        int(i) for e in client.CoreV1Api(api_client).list_namespaced_event(namespace).items
        if e.reason == "ScalingDown" for i in e.message.split("[", 1)[1].split("]", 1)[0].split(", ")
    ]  # fmt: skip
    assert sorted(announced) == sorted(set(announced)) and len(announced) == 3, announced  # each drain, once
    scale = client.CustomObjectsApi(api_client).get_namespaced_custom_object_scale(
        "sglang.ai", "v1alpha1", namespace, "sglangdeployments", "llama"
    )
    assert scale["status"]["replicas"] == 1
    assert scale["status"]["selector"] == "sglang.ai/deployment=llama,sglang.ai/component=worker"


def _arrivals(url: str) -> float | None:
    """Requests a worker has seen: completed + running + queued, from its /metrics."""
    try:
        text = requests.get(f"{url}/metrics", timeout=2).text
    except requests.RequestException:
        return None
    total = 0.0
    for line in text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in ("sglang:num_requests_total", "sglang:num_running_reqs", "sglang:num_queue_reqs"):
            total += float(line.rsplit(" ", 1)[1])
    return total


@pytest.mark.usefixtures("operator", "hf_secret")
def test_rollout_under_load_loses_no_request(api_client: client.ApiClient, namespace: str) -> None:
    fleet = Fleet(api_client, namespace, "llama")
    fleet.apply(llama(2))
    fleet.wait_ready(2)
    old_urls = fleet.ready_worker_urls()
    router = fleet.router_urls()[0]
    deregistered_at: dict[str, float] = {}  # requests a worker had seen when it left every router (if reachable)
    left_routers: set[str] = set()
    late_arrivals: list[str] = []
    with steady_load(router, rate_per_s=8, max_requests=1200, max_seconds=150) as load:
        fleet.patch_spec({"engine": {**llama()["spec"]["engine"], "args": ["--chunked-prefill-size", "4096"]}})  # type: ignore[index]
        deadline = time.monotonic() + 150
        while True:
            listed = {url for urls in fleet.router_lists().values() for url in urls}
            for url in old_urls - listed:
                seen = _arrivals(url)
                left_routers.add(url)
                if seen is None:
                    continue  # already stopped: it cannot receive anything either
                if url not in deregistered_at:
                    deregistered_at[url] = seen
                elif seen > deregistered_at[url]:
                    late_arrivals.append(f"{url}: {deregistered_at[url]} -> {seen}")
            status = fleet.status()
            if status.get("updatedReplicas") == 2 and not (set(fleet.ready_worker_urls()) & old_urls) and \
                    fleet.router_in_sync() and len(fleet.pods()) == 2:  # fmt: skip
                break
            assert time.monotonic() < deadline, f"rollout did not finish: {status}"
            time.sleep(0.3)
    assert load.sent > 50
    assert load.failed == 0, load.errors[:5]
    assert not late_arrivals, late_arrivals
    assert left_routers == old_urls
    assert deregistered_at, "no old worker could be observed between deregistration and deletion"
    revisions = {p.metadata.labels["sglang.ai/revision"] for p in fleet.pods()}
    assert revisions == {fleet.status()["revision"]}


@pytest.mark.usefixtures("operator")
def test_router_restart_is_refilled_within_10s(api_client: client.ApiClient, namespace: str, core: client.CoreV1Api,
                                               cluster: ClusterInfo) -> None:  # fmt: skip
    fleet = Fleet(api_client, namespace, "quick")
    fleet.apply(quickstart(2))
    fleet.wait_ready(2)
    router_pod = fleet.pods("router")[0]
    core.delete_namespaced_pod(router_pod.metadata.name, namespace, grace_period_seconds=0)

    def new_router_ready() -> bool:
        pods = [p for p in fleet.pods("router") if p.metadata.uid != router_pod.metadata.uid]
        return bool(pods) and bool(fleet.router_urls())

    wait_for(new_router_ready, 90, "a new router pod Ready")
    became_ready = time.monotonic()
    wait_for(fleet.router_in_sync, 10, "the new router to list every ready worker", interval=0.2)
    assert time.monotonic() - became_ready <= 10


@pytest.mark.usefixtures("operator")
def test_killed_worker_leaves_rotation_and_comes_back(api_client: client.ApiClient, namespace: str,
                                                      cluster: ClusterInfo) -> None:  # fmt: skip
    fleet = Fleet(api_client, namespace, "quick")
    fleet.apply(quickstart(2))
    fleet.wait_ready(2)
    victim = next(p for p in fleet.pods())
    victim_url = f"http://{victim.status.pod_ip}:30000"
    faults.kill_pod(cluster.state_dir / "nodeagent", namespace, victim.metadata.name)

    def gone_from_routers() -> bool:
        return all(victim_url not in urls for urls in fleet.router_lists().values())

    wait_for(gone_from_routers, 30, "the killed worker removed from the router")
    router = fleet.router_urls()[0]
    assert all(generate(router, f"after kill {i}").status_code == 200 for i in range(5))
    fleet.wait_ready(2, timeout=120)


@pytest.mark.usefixtures("operator")
def test_rank1_failure_restarts_the_whole_replica(api_client: client.ApiClient, namespace: str,
                                                  cluster: ClusterInfo) -> None:  # fmt: skip
    fleet = Fleet(api_client, namespace, "ds")
    fleet.apply({
        "apiVersion": "sglang.ai/v1alpha1", "kind": "SGLangDeployment", "metadata": {"name": "ds"},
        "spec": {"model": {"path": "deepseek-ai/DeepSeek-V3"}, "engine": {"env": FAST_SIM_ENV},
                 "parallelism": {"tp": 16, "attentionDP": 16, "ep": 16, "nnodes": 2}, "replicas": 1},
    })  # fmt: skip
    fleet.wait_ready(1)
    before = {p.metadata.labels["sglang.ai/node-rank"]: p.metadata.uid for p in fleet.pods()}
    rank1 = next(p for p in fleet.pods() if p.metadata.labels["sglang.ai/node-rank"] == "1")
    faults.kill_pod(cluster.state_dir / "nodeagent", namespace, rank1.metadata.name)

    def both_ranks_replaced() -> bool:
        pods = fleet.pods()
        uids = {p.metadata.labels["sglang.ai/node-rank"]: p.metadata.uid for p in pods}
        return len(pods) == 2 and set(uids) == {"0", "1"} and not set(uids.values()) & set(before.values())

    wait_for(both_ranks_replaced, 90, "both ranks recreated (gang restart)")
    fleet.wait_ready(1)
    events = client.CoreV1Api(api_client).list_namespaced_event(namespace).items
    assert any(e.reason == "GangRestart" for e in events)


def test_operator_killed_mid_rollout_converges(api_client: client.ApiClient, namespace: str, cluster: ClusterInfo,
                                               hf_secret: None) -> None:  # fmt: skip
    install_crd(api_client)
    log = cluster.state_dir / "logs" / f"operator-{namespace}.log"
    first = OperatorProcess(cluster.kubeconfig, [namespace], log).start()
    fleet = Fleet(api_client, namespace, "llama")
    fleet.apply(llama(3))
    fleet.wait_ready(3)
    fleet.patch_spec({"engine": {**llama()["spec"]["engine"], "args": ["--log-level", "debug"]}})  # type: ignore[index]
    wait_for(lambda: len({p.metadata.labels["sglang.ai/revision"] for p in fleet.pods()}) > 1, 60, "rollout started")
    first.kill()
    second = OperatorProcess(cluster.kubeconfig, [namespace], log).start()
    try:

        def converged() -> bool:
            pods = fleet.pods()
            status = fleet.status()
            return (
                len(pods) == 3
                and {p.metadata.labels["sglang.ai/revision"] for p in pods} == {status.get("revision")}
                and status.get("updatedReplicas") == 3
                and fleet.router_in_sync()
            )

        wait_for(converged, 180, "convergence after the operator restart", interval=0.5,
                 on_timeout=lambda: f"; status={fleet.status()}")  # fmt: skip
        replicas = [p.metadata.labels["sglang.ai/replica"] for p in fleet.pods()]
        assert len(set(replicas)) == 3  # no duplicate replicas
        assert all(p.metadata.owner_references[0].name == "llama" for p in fleet.pods())
        assert_no_stale_router_entries(fleet)
    finally:
        second.stop()


@pytest.mark.usefixtures("hf_secret")
def test_second_pass_makes_no_writes(api_client: client.ApiClient, namespace: str, cluster: ClusterInfo) -> None:
    install_crd(api_client)
    log = cluster.state_dir / "logs" / f"operator-{namespace}.log"
    proc = OperatorProcess(cluster.kubeconfig, [namespace], log).start()
    fleet = Fleet(api_client, namespace, "llama")
    fleet.apply(llama(2))
    fleet.wait_ready(2)
    proc.stop()
    reconciler = Reconciler(api_client, OperatorSettings())
    first = reconciler.reconcile(namespace, "llama")
    second = reconciler.reconcile(namespace, "llama")
    assert first.plan is not None and first.plan.empty
    assert second.writes == {}, second.writes


def test_invalid_cr_rejected_with_the_validate_message(cluster: ClusterInfo, api_client: client.ApiClient,
                                                       namespace: str, tmp_path: Path) -> None:  # fmt: skip
    install_crd(api_client)
    manifest = tmp_path / "bad.yaml"
    manifest.write_text(
        "apiVersion: sglang.ai/v1alpha1\nkind: SGLangDeployment\nmetadata: {name: bad}\n"
        "spec:\n  model: {path: m}\n  parallelism: {tp: 6, attentionDP: 4}\n"
    )
    bin_dir = Path(sys.executable).parent
    validate = subprocess.run(
        [str(bin_dir / "sglang-operator"), "validate", "-f", str(manifest)], capture_output=True, text=True, check=False
    )
    message = validate.stderr.strip().removeprefix(f"error: {manifest}: spec.parallelism.attentionDP: ")
    assert message != validate.stderr.strip()  # the prefix is what validate prints: file, field, message
    kubectl = [str(bin_dir / "kubectl"), "--kubeconfig", str(cluster.kubeconfig)]
    applied = subprocess.run(
        [*kubectl, "apply", "-n", namespace, "-f", str(manifest)], capture_output=True, text=True, check=False
    )
    assert validate.returncode == 1 and applied.returncode != 0
    assert "spec.parallelism.attentionDP" in applied.stderr
    assert message in applied.stderr


@pytest.mark.usefixtures("operator")
def test_deleting_the_cr_removes_every_child(api_client: client.ApiClient, namespace: str) -> None:
    fleet = Fleet(api_client, namespace, "quick")
    fleet.apply(quickstart(2))
    fleet.wait_ready(2)
    client.CustomObjectsApi(api_client).delete_namespaced_custom_object(
        "sglang.ai", "v1alpha1", namespace, "sglangdeployments", "quick"
    )
    apps, core = client.AppsV1Api(api_client), client.CoreV1Api(api_client)
    selector = "sglang.ai/deployment=quick"

    def all_gone() -> bool:
        return not (
            core.list_namespaced_pod(namespace, label_selector=selector).items
            or core.list_namespaced_service(namespace, label_selector=selector).items
            or apps.list_namespaced_deployment(namespace, label_selector=selector).items
        )

    wait_for(all_gone, 90, "every child of the deleted SGLangDeployment garbage-collected")
