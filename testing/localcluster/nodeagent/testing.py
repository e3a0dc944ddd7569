"""Helpers for e2e tests that run pods on the node agent: manifests for the simulator and router, waits.

Manifests are plain dicts (the images below map to local programs, see `images.py`). Waits poll the API with
an explicit timeout and say what they waited for; nothing here sleeps blindly.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from kubernetes import client
from kubernetes.client.exceptions import ApiException

SIM_IMAGE = "lmsysorg/sglang:v0.5.23"
ROUTER_IMAGE = "lightseekorg/smg:1.13.0"
SIM_PORT = 30000
MODEL = "Qwen/Qwen3-8B"
T = TypeVar("T")


def state_dir(cluster_state_dir: Path) -> Path:
    """The agent's --state-dir inside a local cluster's state dir (see localcluster.paths.StateLayout)."""
    return cluster_state_dir / "nodeagent"


def sim_container(
    name: str = "sim",
    gpus: int = 1,
    env: Mapping[str, str] | None = None,
    extra_args: Sequence[str] = (),
    probe_timeout: int = 5,
) -> dict[str, Any]:
    """An SGLang server container as the operator would write it (it runs the simulator here)."""
    knobs = {"SGLANG_SIM_STARTUP_SECONDS": "0.5", **(env or {})}
    container: dict[str, Any] = {
        "name": name,
        "image": SIM_IMAGE,
        "command": ["python3", "-m", "sglang.launch_server"],
        "args": ["--model-path", MODEL, "--host", "0.0.0.0", "--port", str(SIM_PORT), *extra_args],
        "env": [{"name": k, "value": v} for k, v in knobs.items()],
        "ports": [{"name": "http", "containerPort": SIM_PORT}],
        "readinessProbe": {
            "httpGet": {"path": "/health", "port": "http"},
            "periodSeconds": 1,
            "timeoutSeconds": probe_timeout,
        },
    }
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    return container


def pod_manifest(name: str, containers: Sequence[Mapping[str, Any]], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {"containers": list(containers), "terminationGracePeriodSeconds": 5, **spec},
    }


def wait_for(check: Callable[[], T | None], timeout: float, what: str, interval: float = 0.25) -> T:
    """Poll until `check` returns something truthy (returned), else raise TimeoutError naming `what`."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def read_pod(core: client.CoreV1Api, namespace: str, name: str) -> client.V1Pod | None:
    try:
        return core.read_namespaced_pod(name, namespace)
    except ApiException as err:
        if err.status == 404:
            return None
        raise


def is_ready(pod: client.V1Pod | None) -> bool:
    conditions = (pod.status.conditions if pod and pod.status else None) or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def wait_pod(
    core: client.CoreV1Api,
    namespace: str,
    name: str,
    predicate: Callable[[client.V1Pod], bool],
    timeout: float,
    what: str,
) -> client.V1Pod:
    """The pod once `predicate` holds; on timeout the error shows the pod's last status."""
    seen: list[client.V1Pod | None] = [None]

    def check() -> client.V1Pod | None:
        pod = read_pod(core, namespace, name)
        seen[0] = pod
        return pod if pod is not None and predicate(pod) else None

    try:
        return wait_for(check, timeout, f"{namespace}/{name}: {what}")
    except TimeoutError as err:
        status = seen[0].status.to_dict() if seen[0] is not None and seen[0].status else None
        raise TimeoutError(f"{err}; last status: {status}") from None


def wait_ready(core: client.CoreV1Api, namespace: str, name: str, timeout: float = 60.0) -> client.V1Pod:
    return wait_pod(core, namespace, name, is_ready, timeout, "Ready")


def container_state(pod: client.V1Pod, name: str | None = None) -> Any:
    statuses = (pod.status.container_statuses if pod.status else None) or []
    for status in statuses:
        if name is None or status.name == name:
            return status
    return None
