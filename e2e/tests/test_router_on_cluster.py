"""The real `smg` router as a pod on the local cluster, routing to two simulator pods by their pod IPs."""

from __future__ import annotations

import json
import re
import urllib.request

import pytest
from kubernetes import client

from localcluster.cluster import ClusterInfo
from localcluster.nodeagent.testing import (
    MODEL,
    ROUTER_IMAGE,
    SIM_PORT,
    pod_manifest,
    sim_container,
    wait_for,
    wait_ready,
)

READY_S = 90.0
ROUTER_PORT = 30000
REQUESTS = 6


def post(url: str, body: dict[str, object], timeout: float = 30.0) -> tuple[int, dict[str, object]]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return response.status, json.loads(response.read())


def get_json(url: str, timeout: float = 10.0) -> dict[str, object]:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return dict(json.loads(response.read()))


def served_requests(ip: str) -> float:
    with urllib.request.urlopen(f"http://{ip}:{SIM_PORT}/metrics", timeout=10) as response:
        text = response.read().decode()
    return sum(float(m) for m in re.findall(r"^sglang:num_requests_total(?:\{[^}]*\})? (\S+)$", text, re.M))


def test_smg_router_pod_routes_to_simulator_pods(core: client.CoreV1Api, namespace: str, cluster: ClusterInfo) -> None:
    if not cluster.agent:
        pytest.skip("the local cluster runs without the node agent")
    for name in ("worker-a", "worker-b"):
        core.create_namespaced_pod(namespace, pod_manifest(name, [sim_container(extra_args=["--enable-metrics"])]))
    ips = [wait_ready(core, namespace, name, READY_S).status.pod_ip for name in ("worker-a", "worker-b")]
    urls = [f"http://{ip}:{SIM_PORT}" for ip in ips]
    before = sum(served_requests(ip) for ip in ips)

    router = {
        "name": "router",
        "image": ROUTER_IMAGE,
        "command": ["smg", "launch"],
        "args": [
            "--host",
            "0.0.0.0",
            "--port",
            str(ROUTER_PORT),
            "--worker-urls",
            *urls,
            "--policy",
            "cache_aware",
            "--health-check-interval-secs",
            "2",
            "--worker-startup-check-interval",
            "2",
            "--log-level",
            "warn",
        ],
        "ports": [{"name": "http", "containerPort": ROUTER_PORT}],
        "readinessProbe": {"httpGet": {"path": "/readiness", "port": "http"}, "periodSeconds": 1, "timeoutSeconds": 5},
    }
    core.create_namespaced_pod(namespace, pod_manifest("router", [router]))
    router_ip = wait_ready(core, namespace, "router", READY_S).status.pod_ip
    assert router_ip not in ips
    base = f"http://{router_ip}:{ROUTER_PORT}"

    workers = get_json(f"{base}/workers")["workers"]
    assert sorted(w["url"] for w in workers) == sorted(urls)  # type: ignore[index,union-attr]

    for index in range(REQUESTS // 2):
        code, body = post(
            f"{base}/generate", {"text": f"prompt {index} " * 8, "sampling_params": {"max_new_tokens": 4}}
        )
        assert code == 200 and isinstance(body.get("text"), str) and body.get("meta_info")
        code, chat = post(
            f"{base}/v1/chat/completions",
            {"model": MODEL, "messages": [{"role": "user", "content": f"hi {index}"}], "max_tokens": 4},
        )
        assert code == 200 and chat["choices"][0]["message"]["content"]  # type: ignore[index]

    wait_for(
        lambda: sum(served_requests(ip) for ip in ips) >= before + REQUESTS,
        10,
        f"the workers to have served the {REQUESTS} routed requests",
    )
