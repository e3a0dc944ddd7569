"""More SGLangDeployments than kopf's default thread count, on the 2-core local cluster, under one operator.

kopf's default executor has min(32, CPUs + 4) threads: 6 here. When each CR's loop was a sync daemon holding one of
them (two with autoscaling), the seventh CR got no loop at all. Now each loop is a coroutine and every pass runs in
one bounded pool, so 12 CRs with autoscaling on all reach Ready and follow `kubectl scale`, the operator's thread
count does not grow with them, and with nothing changing the operator sends almost no API request.

The CRs use `autoscaling.recommendOnly: true`: the autoscaler runs (a coroutine and a pass per interval each,
against the local Prometheus) but `spec.replicas` keeps the count, so `kubectl scale` (the /scale subresource,
which writes spec.replicas) is what the fleet follows.
"""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from kubernetes import client

from localcluster.cluster import ClusterInfo
from localcluster.fleet import Fleet, OperatorProcess, install_crd, simulated_example
from localcluster.procs import log_tail, wait_for

FLEETS = 12
INTERVAL_S = 10
QUIET_WINDOW_S = 30
THREAD_BOUND = 32
"""The operator's threads at most, with any number of CRs: the pass pool (8), kopf's executor (8, idle: every
handler is async), the HTTP watchdog, the metrics server, the interpreter's own."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def threads_of(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    raise AssertionError(f"no Threads line for pid {pid}")


def api_requests(metrics_url: str) -> dict[tuple[str, str], float]:
    """The operator's own count of Kubernetes API requests, by (verb, code)."""
    counts: dict[tuple[str, str], float] = {}
    for line in requests.get(metrics_url, timeout=5).text.splitlines():
        if line.startswith("sglang_operator_kubernetes_requests_total{"):
            labels, value = line[line.index("{") + 1 : line.index("}")], float(line.rsplit(" ", 1)[1])
            fields = dict(item.split("=", 1) for item in labels.split(","))
            counts[(fields["verb"].strip('"'), fields["code"].strip('"'))] = value
    return counts


def fleet_doc(prometheus_url: str) -> dict[str, Any]:
    doc = simulated_example("quickstart.yaml", replicas=1)
    doc["spec"]["autoscaling"] = {
        "enabled": True, "recommendOnly": True, "minReplicas": 1, "maxReplicas": 3,
        "prometheusURL": prometheus_url, "intervalSeconds": INTERVAL_S,
    }  # fmt: skip
    return doc


@pytest.fixture
def operator(cluster: ClusterInfo, api_client: client.ApiClient, namespace: str) -> Iterator[OperatorProcess]:
    if cluster.prometheus_url is None:
        pytest.fail("the local cluster runs without Prometheus; `python -m localcluster up` starts it")
    install_crd(api_client)
    log = cluster.state_dir / "logs" / f"operator-{namespace}.log"
    proc = OperatorProcess(cluster.kubeconfig, [namespace], log, ["--allow-prometheus-url", cluster.prometheus_url],
                           metrics_port=free_port())  # fmt: skip
    proc.start()
    wait_for(lambda: _answers(proc.metrics_url), 60, "the operator's /metrics",
             on_timeout=lambda: log_tail(log))  # fmt: skip
    yield proc
    proc.stop()


def _answers(url: str) -> bool:
    try:
        return requests.get(url, timeout=2).status_code == 200
    except requests.RequestException:
        return False


def kubectl_scale(cluster: ClusterInfo, namespace: str, name: str, replicas: int) -> None:
    subprocess.run(
        ["kubectl", "--kubeconfig", str(cluster.kubeconfig), "-n", namespace, "scale", "sgld", name,
         f"--replicas={replicas}"],
        check=True, capture_output=True, timeout=30,
    )  # fmt: skip


def wait_all(fleets: list[Fleet], replicas: int, timeout: float, log: Any) -> float:
    """Every fleet Ready with `replicas` registered replicas, by one shared deadline; returns the seconds taken."""
    started = time.monotonic()
    for fleet in fleets:
        left = max(5.0, timeout - (time.monotonic() - started))
        try:
            fleet.wait_ready(replicas, timeout=left)
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}{log_tail(log, 40)}") from exc
    return time.monotonic() - started


def test_a_dozen_autoscaled_fleets_become_ready_and_follow_kubectl_scale(
    cluster: ClusterInfo, api_client: client.ApiClient, namespace: str, operator: OperatorProcess
) -> None:
    assert cluster.prometheus_url is not None
    assert operator.proc is not None
    pid = operator.proc.pid
    fleets = [Fleet(api_client, namespace, f"fleet-{i:02d}") for i in range(FLEETS)]
    fleets[0].apply(fleet_doc(cluster.prometheus_url))
    fleets[0].wait_ready(1, timeout=120)
    threads_with_one = threads_of(pid)

    for fleet in fleets[1:]:
        fleet.apply(fleet_doc(cluster.prometheus_url))
    took = wait_all(fleets, 1, 300, operator.log_path)
    threads_with_all = threads_of(pid)
    print(f"\n{FLEETS} fleets Ready in {took:.0f}s; operator threads: {threads_with_one} with one CR, "
          f"{threads_with_all} with {FLEETS}")  # fmt: skip
    assert threads_with_all <= THREAD_BOUND, f"{threads_with_all} threads for {FLEETS} CRs"
    # Not one thread (or two) per CR: at most the pass pool fills up.
    assert threads_with_all - threads_with_one <= 8, (threads_with_one, threads_with_all)
    for fleet in fleets:  # every autoscaler ran (a pass per interval each) and recommends without owning the count
        wait_for(lambda f=fleet: (f.status().get("autoscaler") or {}).get("recommendOnly") is True, 3 * INTERVAL_S,
                 f"{fleet.name}: an autoscaler decision")  # fmt: skip

    for fleet in fleets:
        kubectl_scale(cluster, namespace, fleet.name, 2)
    took = wait_all(fleets, 2, 300, operator.log_path)
    print(f"all scaled to 2 in {took:.0f}s")
    for fleet in fleets:
        kubectl_scale(cluster, namespace, fleet.name, 1)
    took = wait_all(fleets, 1, 300, operator.log_path)
    print(f"all scaled back to 1 in {took:.0f}s (drained through their routers)")
    for fleet in fleets:
        wait_for(lambda f=fleet: len(f.pods()) == 1, 60, f"{fleet.name}: the drained replica's pod deleted")

    # Nothing changes now: what the operator sends in a quiet window is its steady-state cost. Measuring a rate
    # over time is the point here, so this is a fixed window, not a wait for a condition.
    before = api_requests(operator.metrics_url)
    time.sleep(QUIET_WINDOW_S)
    after = api_requests(operator.metrics_url)
    delta = {key: after[key] - before.get(key, 0.0) for key in after if after[key] - before.get(key, 0.0) > 0}
    per_cr_per_minute = sum(delta.values()) / FLEETS * (60.0 / QUIET_WINDOW_S)
    print(f"steady state: {per_cr_per_minute:.2f} API requests per CR per minute; by (verb, code): {delta}; "
          f"threads {threads_of(pid)}")  # fmt: skip
    # With autoscaling on, at most one status write per CR per autoscaler interval (the target: the
    # autoscaler keeps its policy memory, stamped per decision, in status); a window of W seconds holds at most
    # W / interval + 1 intervals of each CR. No GET or LIST: the passes read the watch caches.
    writes = sum(v for (verb, _), v in delta.items() if verb not in ("get", "list"))
    assert writes <= FLEETS * (QUIET_WINDOW_S / INTERVAL_S + 1), delta
    assert sum(v for (verb, _), v in delta.items() if verb in ("get", "list")) == 0, delta
