"""The seed's layout on the local cluster: one 8-GPU node, group a (tp=4 x1) and group b (tp=2 x2) of one
SGLangDeployment behind one smg router.

All three replicas registered; chat and generate through the router; under bounded closed-loop load each replica's
share of requests within 20 % of its share of capacity (the simulator runs 4 requests per GPU of the TP group, as
SGLang's KV-sized default grows with the group); a change to group b's engine args rolls group b only (group a's pod
keeps its UID at every poll); `kubectl scale` sizes group b.
"""

from __future__ import annotations

import re
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import requests
from kubernetes import client

from localcluster.fleet import Fleet, chat, generate, load_example
from localcluster.procs import wait_for

SLOTS_PER_GPU = 4
# Twice the fleet's 32 slots: more than every replica's slots plus smg's overload limit (8 waiting requests) hold, so
# no replica idles while another queues, and each serves at the rate of its slots whatever the router's last poll
# said. At 40 clients (125 %) cache_aware's shares were within 5 % in most runs but off by up to 67 % in one of four.
CLIENTS = 64
REQUESTS = 1280  # about 20 s at the fleet's rate: the first seconds (the router's first load polls) weigh little
LOAD_SECONDS = 120.0
SHARE_TOLERANCE = 0.2


def free_gpu_node(core: client.CoreV1Api, gpus: int) -> str:
    """A node with `gpus` GPUs that no running pod requests."""
    used: dict[str, int] = {}
    for pod in core.list_pod_for_all_namespaces().items:
        if pod.spec.node_name and pod.status.phase in ("Pending", "Running"):
            for container in pod.spec.containers:
                limits = (container.resources.limits or {}) if container.resources else {}
                used[pod.spec.node_name] = used.get(pod.spec.node_name, 0) + int(limits.get("nvidia.com/gpu", 0))
    for node in core.list_node().items:
        if int(node.status.allocatable.get("nvidia.com/gpu", 0)) - used.get(node.metadata.name, 0) >= gpus:
            return str(node.metadata.name)
    raise AssertionError(f"no node has {gpus} free GPUs")


def served(url: str) -> float:
    text = requests.get(f"{url}/metrics", timeout=10).text
    return sum(float(m) for m in re.findall(r"^sglang:num_requests_total(?:\{[^}]*\})? (\S+)$", text, re.M))


def closed_loop(router: str, clients: int, total: int, seconds: float) -> int:
    """`clients` threads sending one request after another through the router, `total` in all, within `seconds`;
    returns the failures."""
    sent, failures, lock = [0], [0], threading.Lock()
    deadline = time.monotonic() + seconds

    def client_loop(index: int) -> None:
        while time.monotonic() < deadline:
            with lock:
                if sent[0] >= total:
                    return
                sent[0] += 1
                number = sent[0]
            try:
                prompt = f"{uuid.uuid4().hex} client {index} request {number}: tell me about GPUs"
                ok = generate(router, prompt).status_code == 200
            except requests.RequestException:
                ok = False
            if not ok:
                with lock:
                    failures[0] += 1

    with ThreadPoolExecutor(max_workers=clients) as pool:
        list(pool.map(client_loop, range(clients)))
    assert sent[0] == total, f"only {sent[0]} of {total} requests sent in {seconds:.0f} s"
    return failures[0]


def routable(router: str) -> int:
    """Workers the router lists as ready and healthy (it routes to these)."""
    workers = requests.get(f"{router}/workers", timeout=5).json().get("workers", [])
    return sum(1 for w in workers if w.get("status") == "ready" and w.get("is_healthy"))


def group_pods(fleet: Fleet, group: str) -> dict[str, str]:
    return {p.metadata.name: p.metadata.uid for p in fleet.pods() if p.metadata.labels.get("sglang.ai/group") == group}


@pytest.fixture
def seed(operator: Any, api_client: client.ApiClient, core: client.CoreV1Api, namespace: str) -> tuple[Fleet, str]:
    """The seed's fleet, Ready: three replicas registered and healthy on the router; chat and generate answered.
    Yields (fleet, router URL)."""
    doc = load_example("worker-groups.yaml")
    spec = doc["spec"]
    spec["engine"]["env"] = [
        {"name": "SGLANG_SIM_STARTUP_SECONDS", "value": "1"},
        {"name": "SGLANG_SIM_SLOTS_PER_GPU", "value": str(SLOTS_PER_GPU)},
        {"name": "SGLANG_SIM_DECODE_TOKENS_PER_S", "value": "40"},
    ]
    for group in spec["workerGroups"]:  # the simulator sizes slots from the shape (SLOTS_PER_GPU x tp)
        del group["engine"]
    spec["template"] = {"spec": {"nodeSelector": {"kubernetes.io/hostname": free_gpu_node(core, 8)}}}
    fleet = Fleet(api_client, namespace, "worker-groups")
    fleet.apply(doc)
    fleet.wait_ready(3, timeout=180)

    status = fleet.status()
    groups = {g["name"]: g for g in status["groups"]}
    assert {n: (g["readyReplicas"], g["registeredWorkers"], g["gpusPerReplica"]) for n, g in groups.items()} == {
        "a": (1, 1, 4),
        "b": (2, 2, 2),
    }
    assert status["totalGPUs"] == 8 and status["ready"] == "3/3"
    assert len({p.spec.node_name for p in fleet.pods()}) == 1

    router = fleet.router_urls()[0]
    # smg lists a worker as soon as it is registered (`pending`) and routes to it only once its health check passed:
    # load sent before that skips it and the shares measure smg's start-up, not its routing.
    wait_for(lambda: routable(router) == len(fleet.ready_worker_urls()), 60, "every worker healthy on the router",
             interval=0.5)  # fmt: skip
    assert generate(router, "hello").status_code == 200
    assert chat(router, spec["model"]["path"], "hello").status_code == 200

    return fleet, router


@pytest.mark.xfail(
    strict=False,
    reason="known gap (docs/worker-groups-routing.md): smg 1.13.0 routes by loads polled each second and herds "
    "between polls, so a replica's share of requests is within 20 % of its share of capacity in most runs but up "
    "to 26 % off in about one run in three on this cluster",
)
def test_request_shares_follow_capacity(seed: tuple[Fleet, str]) -> None:
    fleet, router = seed
    by_group = {url: p.metadata.labels["sglang.ai/group"] for p in fleet.pods()
                for url in [f"http://{p.status.pod_ip}:{p.spec.containers[0].ports[0].container_port}"]}  # fmt: skip
    capacity = {url: SLOTS_PER_GPU * (4 if group == "a" else 2) for url, group in by_group.items()}
    before = {url: served(url) for url in capacity}
    failures = closed_loop(router, CLIENTS, REQUESTS, LOAD_SECONDS)
    counts = {url: served(url) - before[url] for url in capacity}
    total, slots = sum(counts.values()), sum(capacity.values())
    print(f"\n{'worker':<28} {'group':>5} {'slots':>5} {'capacity share':>14} {'request share':>13}")
    deviations = []
    for url in sorted(capacity, key=lambda u: by_group[u]):
        share, expected = counts[url] / total, capacity[url] / slots
        deviations.append(abs(share - expected) / expected)
        print(f"{url:<28} {by_group[url]:>5} {capacity[url]:>5} {expected:>14.1%} {share:>13.1%}")
    assert failures == 0
    assert total >= REQUESTS - 3  # the two probe requests above were before `before`; health probes are GETs
    assert max(deviations) <= SHARE_TOLERANCE, f"shares off capacity by up to {max(deviations):.0%}"


def test_two_groups_behind_one_router(seed: tuple[Fleet, str], api_client: client.ApiClient, namespace: str) -> None:
    fleet, _ = seed
    live = fleet.get()
    spec = live["spec"]
    doc = {"apiVersion": live["apiVersion"], "kind": live["kind"], "metadata": {"name": fleet.name}, "spec": spec}

    # -- a change to group b rolls group b only ---------------------------------------------------------------
    group_a = group_pods(fleet, "a")
    old_b = set(group_pods(fleet, "b"))
    assert len(group_a) == 1 and len(old_b) == 2
    spec["workerGroups"][1]["engine"] = {"args": ["--chunked-prefill-size", "2048"]}
    fleet.apply(doc)

    def rolled() -> bool:
        assert group_pods(fleet, "a") == group_a, "group a's pod was touched by group b's rollout"
        now = group_pods(fleet, "b")
        status = fleet.status()
        return (not (set(now) & old_b) and len(now) == 2 and status.get("readyReplicas") == 3
                and fleet.router_in_sync())  # fmt: skip

    wait_for(rolled, 180, "group b rolled to its new revision", interval=0.5)

    # -- kubectl scale sizes group b (the group without a count of its own) ------------------------------------
    fleet.scale(1)

    def scaled() -> bool:
        assert group_pods(fleet, "a") == group_a, "kubectl scale touched group a"
        return len(group_pods(fleet, "b")) == 1 and fleet.status().get("replicas") == 1 and fleet.router_in_sync()

    wait_for(scaled, 120, "group b scaled to 1, group a untouched", interval=0.5)
    assert len(fleet.ready_worker_urls()) == 2

    # -- a per-group scale target (what an HPA or KEDA would size) sizes group a --------------------------------
    custom = client.CustomObjectsApi(api_client)
    target = {"apiVersion": "sglang.ai/v1alpha1", "kind": "SGLangWorkerGroup", "metadata": {"name": "group-a"},
              "spec": {"deployment": "worker-groups", "group": "a", "replicas": 1}}  # fmt: skip
    custom.create_namespaced_custom_object("sglang.ai", "v1alpha1", namespace, "sglangworkergroups", target)

    def target_status() -> dict[str, Any]:
        obj = custom.get_namespaced_custom_object("sglang.ai", "v1alpha1", namespace, "sglangworkergroups", "group-a")
        return dict(obj.get("status") or {})

    wait_for(lambda: target_status().get("inEffect") and target_status().get("replicas") == 1, 60,
             "the scale target in effect, reading group a's count")  # fmt: skip
    scale = custom.get_namespaced_custom_object_scale("sglang.ai", "v1alpha1", namespace, "sglangworkergroups",
                                                      "group-a")  # fmt: skip
    assert scale["status"]["selector"].endswith("sglang.ai/group=a") and scale["status"]["replicas"] == 1
    custom.patch_namespaced_custom_object_scale("sglang.ai", "v1alpha1", namespace, "sglangworkergroups", "group-a",
                                                {"spec": {"replicas": 0}})  # fmt: skip

    def group_a_gone() -> bool:
        return (not group_pods(fleet, "a") and len(group_pods(fleet, "b")) == 1 and target_status().get("replicas") == 0
                and fleet.router_in_sync())  # fmt: skip

    wait_for(group_a_gone, 120, "group a drained to 0 by its scale target, group b kept", interval=0.5)
    assert {g["name"]: g["desiredReplicas"] for g in fleet.status()["groups"]} == {"a": 0, "b": 1}
