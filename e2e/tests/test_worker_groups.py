"""The seed's layout on the local cluster: one 8-GPU node, group a (tp=4 x1) and group b (tp=2 x2) of one
SGLangDeployment behind one smg router.

All three replicas registered; chat and generate through the router; under bounded closed-loop load each replica's
share of requests within 20 % of its share of capacity (the simulator runs 4 requests per GPU of the TP group, as
SGLang's KV-sized default grows with the group); a change to group b's engine args rolls group b only (group a's pod
keeps its UID at every poll); `kubectl scale` sizes group b.
"""

from __future__ import annotations

import random
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
DECODE_TOKENS_PER_S = 40
# The share measure (docs/worker-groups-routing.md, "On the local cluster"): steady state at 120 % of the fleet's 32
# slots. Requests last 1-3 s (40-120 tokens at 40 tokens/s), longer than smg's 1 s load poll, so each poll describes
# requests still running when the router routes by it. Shorter requests (8 tokens: 0.2 s) at twice the slots made the
# shares a matter of chance: every poll's snapshot was gone before the next one, so routing between polls followed the
# last snapshot's running counts, and a replica vetoed by smg's overload limit (8 waiting) sat idle for the rest of the
# poll while the others queued (in the benchmark each replica had a free slot beside another's queue 19-54 % of
# the time).
CLIENTS = 38  # 120 % of the slots: every slot busy, a short queue (6) in front of them, under smg's overload limit
OUTPUT_TOKENS = (40, 120)
WARMUP_REQUESTS = 160  # not counted: the burst at t=0, when every load reads 0, and the first polls after it
WINDOW_REQUESTS = 480  # counted: about 30 s at the fleet's 16 requests/s, every client sending throughout
REQUESTS = 1000  # the load's bound in count (it stops at the window's end, ~700 sent) ...
LOAD_SECONDS = 150.0  # ... and in time (~45 s expected)
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


def send(router: str, rng: random.Random, index: int) -> bool:
    """One non-streaming /generate with a unique prompt (no prefix shared: cache_aware takes its load-balancing
    path) and 40-120 output tokens."""
    prompt = f"{uuid.uuid4().hex} client {index}: tell me about GPUs"
    params = {"max_new_tokens": rng.randint(*OUTPUT_TOKENS), "ignore_eos": True}
    try:
        return requests.post(f"{router}/generate", json={"text": prompt, "sampling_params": params}, timeout=30).ok
    except requests.RequestException:
        return False


def steady_shares(router: str, workers: list[str], seed: int) -> tuple[dict[str, float], int, int]:
    """`CLIENTS` closed-loop clients through the router (output lengths drawn from `seed`); the requests each worker
    finished while the fleet's completions went from WARMUP_REQUESTS to WARMUP_REQUESTS + WINDOW_REQUESTS, with every
    client still sending. Bounded by REQUESTS and LOAD_SECONDS. Returns (counts per worker, completions in the window,
    failures)."""
    sent, done, failures, lock = [0], [0], [0], threading.Lock()
    stop = threading.Event()
    deadline = time.monotonic() + LOAD_SECONDS

    def client_loop(index: int) -> None:
        rng = random.Random(f"{seed}-{index}")
        while not stop.is_set() and time.monotonic() < deadline:
            with lock:
                if sent[0] >= REQUESTS:
                    return
                sent[0] += 1
            ok = send(router, rng, index)
            with lock:
                done[0] += 1
                failures[0] += not ok

    def finished() -> int:
        with lock:
            return done[0]

    with ThreadPoolExecutor(max_workers=CLIENTS) as pool:
        futures = [pool.submit(client_loop, i) for i in range(CLIENTS)]
        try:
            wait_for(lambda: finished() >= WARMUP_REQUESTS, LOAD_SECONDS / 2, "the warm-up's requests", interval=0.05)
            before, start = {w: served(w) for w in workers}, finished()
            wait_for(lambda: finished() >= start + WINDOW_REQUESTS, LOAD_SECONDS / 2, "the window's requests",
                     interval=0.05)  # fmt: skip
            after, end = {w: served(w) for w in workers}, finished()
        finally:
            stop.set()
        for future in futures:
            future.result()
    return {w: after[w] - before[w] for w in workers}, end - start, failures[0]


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
        {"name": "SGLANG_SIM_DECODE_TOKENS_PER_S", "value": str(DECODE_TOKENS_PER_S)},
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


def test_request_shares_follow_capacity(seed: tuple[Fleet, str]) -> None:
    fleet, router = seed
    by_group = {url: p.metadata.labels["sglang.ai/group"] for p in fleet.pods()
                for url in [f"http://{p.status.pod_ip}:{p.spec.containers[0].ports[0].container_port}"]}  # fmt: skip
    capacity = {url: SLOTS_PER_GPU * (4 if group == "a" else 2) for url, group in by_group.items()}
    load_seed = random.randrange(2**32)  # each run its own draw of output lengths, printed to replay it
    counts, window, failures = steady_shares(router, sorted(capacity), load_seed)
    total, slots = sum(counts.values()), sum(capacity.values())
    print(f"\n{CLIENTS} clients ({CLIENTS / slots:.0%} of {slots} slots), load seed {load_seed}; "
          f"{total:.0f} requests finished in the window")  # fmt: skip
    print(f"{'worker':<28} {'group':>5} {'slots':>5} {'capacity share':>14} {'request share':>13} {'deviation':>9}")
    deviations = []
    for url in sorted(capacity, key=lambda u: (by_group[u], u)):
        share, expected = counts[url] / total, capacity[url] / slots
        deviation = abs(share - expected) / expected
        deviations.append(deviation)
        print(f"{url:<28} {by_group[url]:>5} {capacity[url]:>5} {expected:>14.1%} {share:>13.1%} {deviation:>9.1%}")
    assert failures == 0
    # The workers finished what the clients saw finish, give or take the requests in flight at either snapshot.
    assert abs(total - window) <= CLIENTS, f"{total} finished on the workers, {window} seen by the clients"
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
