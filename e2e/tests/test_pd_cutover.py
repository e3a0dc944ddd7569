"""A KV-contract change to a prefill/decode fleet under load (issue 31): examples/pd-small.yaml, its page size
changed from 64 to 32 while a client sends requests through the router Service, to the pods its selector picks as
kube-proxy would (`localcluster.endpoints`: the local cluster has no Service proxy).

The simulator, like SGLang, kills a decode server whose page size differs from its prefill's at the first transfer,
so a pair of an old prefill and a new decode would fail requests. The fleet must cut over whole: no failed request,
every bootstrap room logged by exactly one prefill and one decode of the same KV epoch, no router ever listing a
worker of another epoch, the Service moved once, and the old generation and its router slot gone at the end.
"""

from __future__ import annotations

import re
import time
from collections import defaultdict
from typing import Any

import requests
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from localcluster.endpoints import ServiceEndpoints
from localcluster.fleet import FAST_SIM_ENV, Fleet, generate, load_example, steady_load
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


def test_a_kv_contract_change_cuts_over_whole_under_load(
    operator: Any, api_client: client.ApiClient, core: client.CoreV1Api, namespace: str
) -> None:
    doc = load_example("pd-small.yaml")
    doc["spec"]["engine"] = {"env": FAST_SIM_ENV}
    fleet = Fleet(api_client, namespace, "pd-small")
    fleet.apply(doc)
    fleet.wait_ready(3, timeout=180)
    service = ServiceEndpoints(api_client, namespace, "pd-small-router")
    wait_for(lambda: bool(service.ready()), 60, "the router Service has a ready endpoint", interval=0.5)
    first = _service_epoch(core, namespace)
    assert first and {_epoch_of(p) for p in fleet.pods()} == {first}

    rooms: dict[str, dict[str, str]] = defaultdict(dict)
    mixed: list[str] = []
    services_seen = [first]
    with steady_load("", rate_per_s=8, max_requests=1500, max_seconds=CUTOVER_TIMEOUT_S,
                     send=lambda _, index: generate(service.next_url(), f"request {index}")) as load:  # fmt: skip
        wait_for(lambda: load.sent >= 40, 30, "load under way", interval=0.2)
        fleet.patch_spec({"disaggregation": {**doc["spec"]["disaggregation"], "pageSize": 32}})
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
    served = {room: sorted(by_pod.values()) for room, by_pod in rooms.items()}
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
