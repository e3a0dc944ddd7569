"""Prefill/decode on the local cluster, real smg in PD mode (issue 31): examples/pd-small.yaml, 1 prefill (tp=2) and
2 decode (tp=1) replicas of the simulator playing SGLang 0.5.23.

- Every router pod lists the three with their type and the prefill's bootstrap port; chat, generate and a streamed
  generate succeed; each request raises one prefill's and one decode's request counter by one, and both log its
  bootstrap room; smg counts no rendezvous failure.
- Decode 2 -> 3 -> 1 under load: no request fails; each leaving decode is off every router before its pod goes.
- The prefill killed: requests fail while no prefill is registered, then succeed once the operator's new one is.
"""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
import requests
from kubernetes import client

from localcluster.fleet import FAST_SIM_ENV, Fleet, chat, generate, load_example, steady_load
from localcluster.procs import wait_for

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


@pytest.fixture
def pd_fleet(operator: Any, api_client: client.ApiClient, namespace: str) -> tuple[Fleet, str]:
    doc = load_example("pd-small.yaml")
    doc["spec"]["engine"] = {"env": FAST_SIM_ENV}
    fleet = Fleet(api_client, namespace, "pd-small")
    fleet.apply(doc)
    fleet.wait_ready(3, timeout=180)
    wait_for(lambda: _listed_as(fleet), 60, "every router lists both roles with type and port", interval=0.5,
             on_timeout=lambda: f"; routers={[_workers(r) for r in fleet.router_urls()]}")  # fmt: skip
    return fleet, fleet.router_urls()[0]


def test_a_request_is_one_prefill_and_one_decode(pd_fleet: tuple[Fleet, str], core: client.CoreV1Api,
                                                 namespace: str) -> None:  # fmt: skip
    fleet, router = pd_fleet
    roles = _by_role(fleet)
    assert len(roles["prefill"]) == 1 and len(roles["decode"]) == 2
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

    pods = {p.metadata.labels["sglang.ai/group"]: [] for p in fleet.pods()}
    for pod in fleet.pods():
        pods[pod.metadata.labels["sglang.ai/group"]].append(pod.metadata.name)
    prefill_rooms = set().union(*(_rooms(core, namespace, p) for p in pods["prefill"]))
    decode_rooms = set().union(*(_rooms(core, namespace, p) for p in pods["decode"]))
    assert len(prefill_rooms) >= 3 and prefill_rooms == decode_rooms
    assert _rendezvous_failures(fleet) == 0


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
    pd_fleet: tuple[Fleet, str], core: client.CoreV1Api, namespace: str
) -> None:
    fleet, router = pd_fleet
    prefill = next(p for p in fleet.pods() if p.metadata.labels["sglang.ai/group"] == "prefill")
    core.delete_namespaced_pod(prefill.metadata.name, namespace, grace_period_seconds=0)
    wait_for(lambda: not _by_role(fleet)["prefill"] and all(
        all(w.get("worker_type") != "prefill" for w in _workers(r)) for r in fleet.router_urls()),
        60, "the prefill gone from every router", interval=0.2)  # fmt: skip
    assert generate(router, "nobody to prefill").status_code >= 500
    fleet.wait_ready(3, timeout=120)
    wait_for(lambda: _listed_as(fleet), 60, "the new prefill registered", interval=0.5)
    assert generate(router, "back").status_code == 200
