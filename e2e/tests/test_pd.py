"""Prefill/decode on the local cluster, real smg in PD mode (issue 31): examples/pd-small.yaml, 1 prefill (tp=2) and
2 decode (tp=1) replicas of the simulator playing SGLang 0.5.23.

- Every router pod lists the three with their type and the prefill's bootstrap port; chat, generate and a streamed
  generate succeed; each request raises one prefill's and one decode's request counter by one, and both log its
  bootstrap room; smg counts no rendezvous failure.
- Decode 2 -> 3 -> 1 under load: no request fails; each leaving decode is off every router before its pod goes.
- The prefill killed: requests fail while no prefill is registered, then succeed once the operator's new one is.
- A KV-contract change (the page size) under load through the router Service: the fleet cuts over whole between two
  router slots (docs/pd.md, "Rollouts"), no request fails and no room is served by two epochs.

One fleet for the module (each test starts from the example's state: `pd_fleet`); the cut-over runs last, as it
leaves the fleet at another page size.
"""

from __future__ import annotations

import re
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from localcluster.cluster import ClusterInfo
from localcluster.endpoints import ServiceEndpoints
from localcluster.fleet import (
    FAST_SIM_ENV,
    Fleet,
    OperatorProcess,
    chat,
    create_namespace,
    generate,
    install_crd,
    load_example,
    steady_load,
)
from localcluster.procs import wait_for

EPOCH = "sglang.ai/kv-epoch"
CUTOVER_TIMEOUT_S = 180.0


def _epoch_of(pod: Any) -> str:
    return str((pod.metadata.labels or {}).get(EPOCH, ""))


def _service_epoch(core: client.CoreV1Api, namespace: str) -> str:
    service = core.read_namespaced_service("pd-small-router", namespace, _request_timeout=10)
    return str(service.spec.selector.get(EPOCH, ""))


def _read_rooms(core: client.CoreV1Api, namespace: str, pods: list[Any], rooms: dict[str, dict[str, str]]) -> None:
    """Add each worker pod's logged bootstrap rooms: room -> {pod name: its epoch and group}. A pod gone since the
    listing keeps what an earlier read found."""
    for pod in pods:
        try:
            log = core.read_namespaced_pod_log(pod.metadata.name, namespace, container="sglang", _request_timeout=10)
        except ApiException:
            continue
        for room in re.findall(r"bootstrap_room=(\d+)", log):
            rooms[room][pod.metadata.name] = f"{_epoch_of(pod)}/{pod.metadata.labels['sglang.ai/group']}"


def _mixed_listings(fleet: Fleet) -> list[str]:
    """Workers a router lists whose epoch is not the router's own."""
    epoch_by_url = {f"http://{p.status.pod_ip}:30000": _epoch_of(p) for p in fleet.pods() if p.status.pod_ip}
    mixed = []
    for router in fleet.pods("router"):
        if not router.status.pod_ip or router.metadata.deletion_timestamp:
            continue
        try:
            listed = requests.get(f"http://{router.status.pod_ip}:30000/workers", timeout=5).json()["workers"]
        except (requests.RequestException, ValueError, KeyError):
            continue
        mixed += [
            f"{router.metadata.name} ({_epoch_of(router)}) lists {w['url']} ({epoch_by_url[w['url']]})"
            for w in listed
            if w["url"] in epoch_by_url and epoch_by_url[w["url"]] != _epoch_of(router)
        ]
    return mixed


ROUTER_METRICS_PORT = 29000
BOOTSTRAP_PORT = 8998


def _workers(router: str) -> list[dict[str, Any]]:
    listed: list[dict[str, Any]] = requests.get(f"{router}/workers", timeout=5).json().get("workers", [])
    return [w for w in listed if w.get("status") != "draining"]


def _by_role(fleet: Fleet) -> dict[str, set[str]]:
    """Ready rank-0 worker URLs of each role (the group label names it: the example's groups are named by role)."""
    urls = fleet.ready_worker_urls()
    roles: dict[str, set[str]] = {"prefill": set(), "decode": set()}
    for pod in fleet.pods():
        url = f"http://{pod.status.pod_ip}:{pod.spec.containers[0].ports[0].container_port}"
        if url in urls:
            roles[pod.metadata.labels["sglang.ai/group"]].add(url)
    return roles


def _listed_as(fleet: Fleet) -> bool:
    """Every router lists exactly the ready workers, each with its role's type and (prefill) bootstrap port."""
    roles = _by_role(fleet)
    want = sorted([(u, "prefill", BOOTSTRAP_PORT) for u in roles["prefill"]] +
                  [(u, "decode", None) for u in roles["decode"]])  # fmt: skip
    routers = fleet.router_urls()
    return bool(routers) and all(
        sorted((w["url"], w.get("worker_type"), w.get("bootstrap_port")) for w in _workers(r)) == want for r in routers
    )


def _requests_served(url: str) -> float:
    text = requests.get(f"{url}/metrics", timeout=10).text
    return sum(float(m) for m in re.findall(r"^sglang:num_requests_total(?:\{[^}]*\})? (\S+)$", text, re.M))


def _rendezvous_failures(fleet: Fleet) -> float:
    total = 0.0
    for pod in fleet.pods("router"):
        text = requests.get(f"http://{pod.status.pod_ip}:{ROUTER_METRICS_PORT}/metrics", timeout=10).text
        total += sum(float(m) for m in re.findall(r"^smg_pd_rendezvous_failures_total(?:\{[^}]*\})? (\S+)$", text,
                                                  re.M))  # fmt: skip
    return total


def _rooms(core: client.CoreV1Api, namespace: str, pod: str) -> set[str]:
    log = core.read_namespaced_pod_log(pod, namespace, container="sglang", _request_timeout=10)
    return set(re.findall(r"bootstrap_room=(\d+)", log))


@pytest.fixture(scope="module")
def pd_namespace(core: client.CoreV1Api) -> Iterator[str]:
    """One namespace for the module's one fleet (each test starts it from the state it needs: `pd_fleet`)."""
    name = f"e2e-pd-{uuid.uuid4().hex[:5]}"
    create_namespace(core, name, {"e2e": "true"})
    yield name
    core.delete_namespace(name, propagation_policy="Background")


@pytest.fixture(scope="module")
def pd_operator(cluster: ClusterInfo, api_client: client.ApiClient, pd_namespace: str) -> Iterator[OperatorProcess]:
    install_crd(api_client)
    log = cluster.state_dir / "logs" / f"operator-{pd_namespace}.log"
    proc = OperatorProcess(cluster.kubeconfig, [pd_namespace], log).start()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def pd_small(pd_operator: OperatorProcess, api_client: client.ApiClient, pd_namespace: str) -> Fleet:
    doc = load_example("pd-small.yaml")
    doc["spec"]["engine"] = {"env": FAST_SIM_ENV}
    fleet = Fleet(api_client, pd_namespace, "pd-small")
    fleet.apply(doc)
    return fleet


@pytest.fixture
def pd_fleet(pd_small: Fleet) -> tuple[Fleet, str]:
    """The module's fleet as the example has it (1 prefill, 2 decode), ready, every router listing both roles: one
    fleet for the module's tests (a fleet per test cost about 40 s each), each test starting from this state."""
    fleet = pd_small
    groups = fleet.get()["spec"]["workerGroups"]
    if groups[1].get("replicas") != 2:
        fleet.patch_spec({"workerGroups": [groups[0], {**groups[1], "replicas": 2}]})
    fleet.wait_ready(3, timeout=180)
    wait_for(lambda: _listed_as(fleet), 60, "every router lists both roles with type and port", interval=0.5,
             on_timeout=lambda: f"; routers={[_workers(r) for r in fleet.router_urls()]}")  # fmt: skip
    return fleet, fleet.router_urls()[0]


def test_a_request_is_one_prefill_and_one_decode(pd_fleet: tuple[Fleet, str], core: client.CoreV1Api) -> None:
    fleet, router = pd_fleet
    roles = _by_role(fleet)
    assert len(roles["prefill"]) == 1 and len(roles["decode"]) == 2
    pods: dict[str, list[str]] = {"prefill": [], "decode": []}
    for pod in fleet.pods():
        pods[pod.metadata.labels["sglang.ai/group"]].append(pod.metadata.name)

    def rooms(role: str) -> set[str]:
        return set().union(*(_rooms(core, fleet.namespace, p) for p in pods[role]))

    rooms_before = {role: rooms(role) for role in pods}
    failures_before = _rendezvous_failures(fleet)
    for send in (lambda: generate(router, "hello"), lambda: chat(router, "Qwen/Qwen2.5-7B-Instruct", "hello")):
        before = {u: _requests_served(u) for r in roles.values() for u in r}
        response = send()
        assert response.status_code == 200, response.text
        after = {u: _requests_served(u) for r in roles.values() for u in r}
        assert sum(after[u] - before[u] for u in roles["prefill"]) == 1
        assert sum(after[u] - before[u] for u in roles["decode"]) == 1
    body = {"text": "stream me", "sampling_params": {"max_new_tokens": 8}, "stream": True}
    with requests.post(f"{router}/generate", json=body, stream=True, timeout=30) as streamed:
        assert streamed.status_code == 200
        events = [line for line in streamed.iter_lines() if line.startswith(b"data:")]
    assert events and events[-1] == b"data: [DONE]"

    new_rooms = {role: rooms(role) - rooms_before[role] for role in pods}  # this test's three requests
    assert len(new_rooms["prefill"]) == 3 and new_rooms["prefill"] == new_rooms["decode"]
    assert _rendezvous_failures(fleet) == failures_before


def test_decode_scales_under_load_without_a_failed_request(pd_fleet: tuple[Fleet, str]) -> None:
    fleet, router = pd_fleet

    def decodes(count: int) -> None:
        fleet.patch_spec({"workerGroups": [fleet.get()["spec"]["workerGroups"][0],
                                           {**fleet.get()["spec"]["workerGroups"][1], "replicas": count}]})  # fmt: skip

    leaving_seen_listed: list[str] = []
    with steady_load(router, rate_per_s=8, max_requests=900, max_seconds=120) as load:
        decodes(3)
        wait_for(lambda: len(_by_role(fleet)["decode"]) == 3 and _listed_as(fleet), 90, "a third decode registered",
                 interval=0.5)  # fmt: skip
        decodes(1)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            listed = {w["url"] for r in fleet.router_urls() for w in _workers(r)}
            running = {f"http://{p.status.pod_ip}:30000" for p in fleet.pods() if not p.metadata.deletion_timestamp}
            leaving_seen_listed += [u for u in listed if u not in running]  # listed while its pod is being deleted
            if len(_by_role(fleet)["decode"]) == 1 and len(fleet.pods()) == 2 and _listed_as(fleet):
                break
            time.sleep(0.2)
        else:
            raise AssertionError(f"decode did not settle at 1: {fleet.status()}")
    assert load.sent > 100 and load.failed == 0, load.errors[:5]
    assert leaving_seen_listed == [], "a decode was deleted while a router still listed it"


def test_requests_fail_without_a_prefill_and_succeed_once_it_is_back(
    pd_fleet: tuple[Fleet, str], core: client.CoreV1Api
) -> None:
    fleet, router = pd_fleet
    namespace = fleet.namespace
    prefill = next(p for p in fleet.pods() if p.metadata.labels["sglang.ai/group"] == "prefill")
    core.delete_namespaced_pod(prefill.metadata.name, namespace, grace_period_seconds=0)
    wait_for(lambda: not _by_role(fleet)["prefill"] and all(
        all(w.get("worker_type") != "prefill" for w in _workers(r)) for r in fleet.router_urls()),
        60, "the prefill gone from every router", interval=0.2)  # fmt: skip
    assert generate(router, "nobody to prefill").status_code >= 500
    fleet.wait_ready(3, timeout=120)
    wait_for(lambda: _listed_as(fleet), 60, "the new prefill registered", interval=0.5)
    assert generate(router, "back").status_code == 200


def test_a_kv_contract_change_cuts_over_whole_under_load(
    pd_fleet: tuple[Fleet, str], api_client: client.ApiClient, core: client.CoreV1Api
) -> None:
    """The page size changed from 64 to 32 while a client sends requests through the router Service, to the pods its
    selector picks as kube-proxy would (`localcluster.endpoints`: the local cluster has no Service proxy). The
    simulator, like SGLang, kills a decode server whose page size differs from its prefill's at the first transfer,
    so a pair of an old prefill and a new decode would fail requests. The fleet must cut over whole: no failed
    request, every bootstrap room logged by exactly one prefill and one decode of the same KV epoch, no router ever
    listing a worker of another epoch, the Service moved once, the old generation and its router slot gone."""
    fleet, _ = pd_fleet
    namespace = fleet.namespace
    disaggregation = fleet.get()["spec"]["disaggregation"]
    assert disaggregation["pageSize"] == 64
    service = ServiceEndpoints(api_client, namespace, "pd-small-router")
    wait_for(lambda: bool(service.ready()), 60, "the router Service has a ready endpoint", interval=0.5)
    first = _service_epoch(core, namespace)
    assert first and {_epoch_of(p) for p in fleet.pods()} == {first}

    earlier: dict[str, dict[str, str]] = defaultdict(dict)
    _read_rooms(core, namespace, fleet.pods(), earlier)  # the module's earlier tests' rooms, left out below
    rooms: dict[str, dict[str, str]] = defaultdict(dict)
    mixed: list[str] = []
    services_seen = [first]
    with steady_load("", rate_per_s=8, max_requests=1500, max_seconds=CUTOVER_TIMEOUT_S,
                     send=lambda _, index: generate(service.next_url(), f"request {index}")) as load:  # fmt: skip
        wait_for(lambda: load.sent >= 40, 30, "load under way", interval=0.2)
        fleet.patch_spec({"disaggregation": {**disaggregation, "pageSize": 32}})
        deadline = time.monotonic() + CUTOVER_TIMEOUT_S
        while time.monotonic() < deadline:
            pods = fleet.pods()
            _read_rooms(core, namespace, pods, rooms)
            mixed += _mixed_listings(fleet)
            epoch = _service_epoch(core, namespace)
            if epoch != services_seen[-1]:
                services_seen.append(epoch)
            done = (
                epoch != first and {_epoch_of(p) for p in pods} == {epoch} and len(pods) == 3
                and {_epoch_of(p) for p in fleet.pods("router")} == {epoch}
            )  # fmt: skip
            if done:
                break
            time.sleep(1.0)
        else:
            raise AssertionError(f"the cut-over did not finish: {fleet.status()}")
        sent_at_switch = load.sent
        wait_for(lambda: load.sent >= sent_at_switch + 40, 30, "load after the cut-over", interval=0.2)
    _read_rooms(core, namespace, fleet.pods(), rooms)

    assert load.sent > 200 and load.failed == 0, load.errors[:5]
    assert mixed == [], mixed[:5]
    assert len(services_seen) == 2, services_seen  # the Service moved once, from the old epoch to the new
    second = services_seen[1]
    served = {room: sorted(by_pod.values()) for room, by_pod in rooms.items() if room not in earlier}
    by_epoch = defaultdict(int)
    for room, roles in served.items():
        epoch = roles[0].split("/")[0]
        assert roles == [f"{epoch}/decode", f"{epoch}/prefill"], f"room {room} was served by {roles}"
        by_epoch[epoch] += 1
    assert by_epoch[first] > 20 and by_epoch[second] > 20, dict(by_epoch)
    apps = client.AppsV1Api(api_client)
    deployments = {d.metadata.name for d in apps.list_namespaced_deployment(namespace).items}
    assert len(deployments) == 1, deployments  # the old router slot is gone
    cutover_events = [e for e in core.list_namespaced_event(namespace).items if e.reason == "CutOver"]
    assert len(cutover_events) == 1
