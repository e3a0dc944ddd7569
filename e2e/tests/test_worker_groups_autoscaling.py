"""The built-in autoscaler on a two-group fleet (real Prometheus, simulator pods, load replayed from the Azure code
trace): it sizes the fleet's capacity and splits it across the groups, scaling up under load and back down after,
never outside a group's bounds (checked at every poll)."""

from __future__ import annotations

import threading
import time
from typing import Any

from kubernetes import client
from test_autoscaling import DOWN_WINDOW_S, autoscaled_deployment, operator_running, replay, trace_offsets

from localcluster.fleet import Fleet
from localcluster.procs import wait_for

__all__ = ["operator_running"]  # the fixture, used by name

BOUNDS = {"a": (1, 2), "b": (0, 3)}


def two_groups(prometheus_url: str) -> dict[str, Any]:
    """Group a: tp=2 replicas of 4 slots (the unit), 1 to 2; group b: tp=1 replicas of 2 slots, 0 to 3."""
    doc = autoscaled_deployment(prometheus_url, minReplicas=1, maxReplicas=8)
    spec = doc["spec"]
    spec["workerGroups"] = [
        {"name": "a", "replicas": 1, "parallelism": {"tp": 2}, "engine": {"maxRunningRequests": 4},
         "autoscaling": {"minReplicas": BOUNDS["a"][0], "maxReplicas": BOUNDS["a"][1]}},
        {"name": "b", "replicas": 0, "parallelism": {"tp": 1}, "engine": {"maxRunningRequests": 2},
         "autoscaling": {"minReplicas": BOUNDS["b"][0], "maxReplicas": BOUNDS["b"][1]}},
    ]  # fmt: skip
    return doc


def test_two_groups_scale_up_under_load_and_down_within_bounds(
    operator_running: str, api_client: client.ApiClient, namespace: str
) -> None:
    fleet = Fleet(api_client, namespace, "chat")
    fleet.apply(two_groups(operator_running))
    fleet.wait_ready(1, timeout=120)
    seen: list[dict[str, int]] = []

    def split() -> dict[str, int]:
        status = fleet.status()
        groups = dict((status.get("autoscaler") or {}).get("groups") or {})
        for pod in fleet.pods():
            group = pod.metadata.labels["sglang.ai/group"]
            assert group in BOUNDS, pod.metadata.name
        running = {g["name"]: g["replicas"] for g in status.get("groups") or []}
        for name, (low, high) in BOUNDS.items():
            assert low <= groups.get(name, low) <= high, groups
            assert running.get(name, 0) <= high, running
        if groups:
            seen.append(groups)
        return groups

    router = fleet.router_urls()[0]
    offsets = trace_offsets(limit=320, compress=4.0)  # ~8 req/s of 1 s requests: ~3 units of 4 with headroom
    result: dict[str, tuple[int, list[str]]] = {}
    load = threading.Thread(target=lambda: result.setdefault("load", replay(router, offsets, 60)), daemon=True)
    load.start()
    wait_for(lambda: sum(split().values()) >= 3, 60, "the autoscaler to grow the groups", interval=0.5,
             on_timeout=lambda: f"; autoscaler={fleet.status().get('autoscaler')}")  # fmt: skip
    grown = split()
    wait_for(lambda: split() and (fleet.status().get("readyReplicas") or 0) >= sum(grown.values()), 60,
             "the grown groups ready", interval=0.5)  # fmt: skip
    load.join(timeout=120)
    sent, errors = result["load"]
    assert sent >= 300 and not errors, errors[:5]
    print(f"\nsplits seen: {sorted({tuple(sorted(s.items())) for s in seen})}")
    assert any(s.get("b", 0) >= 1 for s in seen), "group b never grew"
    wait_for(lambda: split() == {"a": 1, "b": 0}, DOWN_WINDOW_S + 60, "the groups back to their minimums",
             interval=1.0)  # fmt: skip
    deadline = time.monotonic() + 90
    wait_for(lambda: split() is not None and len(fleet.pods()) == 1, max(1.0, deadline - time.monotonic()),
             "group b's replicas drained and deleted")  # fmt: skip
    assert {g["name"]: g["desiredReplicas"] for g in fleet.status()["groups"]} == {"a": 1, "b": 0}
