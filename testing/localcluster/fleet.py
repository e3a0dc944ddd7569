"""Drive and inspect SGLangDeployments on the local cluster: the operator process, CRs, pods and routers.

Shared by the e2e tests and the demo, so both look at the fleet the same way. All traffic goes to pod IPs in
127.0.0.0/8; every loop is bounded by a count and a deadline.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from localcluster.paths import REPO_ROOT
from localcluster.procs import wait_for
from sglang_operator.api.constants import GROUP, PLURAL, VERSION
from sglang_operator.api.crdgen import build_crd, build_scale_crd

CRD_ESTABLISHED_TIMEOUT_S = 30.0
CRD_WRITE_ATTEMPTS = 5


def install_crd(api: client.ApiClient) -> None:
    """Create or replace the generated CRDs (SGLangDeployment, and SGLangWorkerGroup, a worker group's scale
    target) and wait until they are Established."""
    for build in (build_crd, build_scale_crd):
        _install_one(client.ApiextensionsV1Api(api), build)


def _install_one(ext: client.ApiextensionsV1Api, build: Callable[[], dict[str, Any]]) -> None:
    name = build()["metadata"]["name"]
    for _ in range(CRD_WRITE_ATTEMPTS):  # optimistic concurrency: other test processes install it too
        crd = build()
        try:
            current = ext.read_custom_resource_definition(name)
            crd["metadata"]["resourceVersion"] = current.metadata.resource_version
            ext.replace_custom_resource_definition(name, crd)
        except ApiException as exc:
            if exc.status == 404:
                try:
                    ext.create_custom_resource_definition(crd)
                except ApiException as create_exc:
                    if create_exc.status != 409:
                        raise
                    continue
            elif exc.status == 409:
                continue
            else:
                raise
        break

    def established() -> bool:
        conditions = ext.read_custom_resource_definition(name).status.conditions or []
        return any(c.type == "Established" and c.status == "True" for c in conditions)

    wait_for(established, CRD_ESTABLISHED_TIMEOUT_S, f"CRD {name} Established")


class OperatorProcess:
    """`sglang-operator run` as a local process against the admin kubeconfig; killable like a crashed pod."""

    def __init__(
        self,
        kubeconfig: Path,
        namespaces: list[str],
        log_path: Path,
        run_args: list[str] | None = None,
        *,
        lease_namespace: str | None = None,
        identity: str | None = None,
        metrics_port: int | None = None,
    ) -> None:
        """`run_args`: more `run` flags, e.g. `["--allow-prometheus-url", url]` for CRs that name their own.
        `lease_namespace`: run with `--leader-elect`, the Lease there; `identity` the holder's name before its
        random suffix (the Lease's holderIdentity starts with `<identity>_`). `metrics_port`: serve /metrics on
        127.0.0.1 at that port (`metrics_url`)."""
        self.kubeconfig, self.namespaces, self.log_path = kubeconfig, namespaces, log_path
        self.run_args = list(run_args or [])
        self.lease_namespace, self.identity, self.metrics_port = lease_namespace, identity, metrics_port
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def metrics_url(self) -> str:
        assert self.metrics_port, "started without a metrics port"
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> OperatorProcess:
        command = [str(Path(sys.executable).parent / "sglang-operator"), "run"]
        for namespace in self.namespaces:
            command += ["--namespace", namespace]
        if self.lease_namespace:
            command += ["--leader-elect", "--leader-election-namespace", self.lease_namespace]
        if self.identity:
            command += ["--leader-election-identity", self.identity]
        if self.metrics_port:
            command += ["--metrics-address", "127.0.0.1", "--metrics-port", str(self.metrics_port)]
        command += self.run_args
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig)}
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        return self

    def kill(self) -> None:
        """SIGKILL: no cleanup, exactly like an OOM-killed or evicted operator."""
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()


# Simulator workers that load in a second: what the e2e tests and benchmarks run instead of a real engine.
FAST_SIM_ENV = [{"name": "SGLANG_SIM_STARTUP_SECONDS", "value": "1"}]
NAMESPACE_READY_TIMEOUT_S = 60.0


def load_example(name: str, **spec_overrides: Any) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((REPO_ROOT / "examples" / name).read_text())
    doc["spec"].update(spec_overrides)
    return doc


def simulated_example(name: str, **spec_overrides: Any) -> dict[str, Any]:
    """An example from `examples/` whose workers are fast-starting simulators (its other engine fields kept)."""
    doc = load_example(name, **spec_overrides)
    doc["spec"]["engine"] = {**doc["spec"].get("engine", {}), "env": FAST_SIM_ENV}
    return doc


def create_namespace(core: client.CoreV1Api, name: str, labels: dict[str, str]) -> None:
    """Create a namespace and wait until pods can be created in it (its `default` service account exists)."""
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels=labels)))

    def default_service_account() -> bool:
        try:
            core.read_namespaced_service_account("default", name)
        except ApiException as err:
            if err.status == 404:
                return False
            raise
        return True

    wait_for(default_service_account, NAMESPACE_READY_TIMEOUT_S, f"service account default in {name}")


def _pod_ready(pod: Any) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in (pod.status.conditions or []))


@dataclass
class Fleet:
    """One SGLangDeployment in one namespace, seen through the API server and its routers."""

    api: client.ApiClient
    namespace: str
    name: str

    def __post_init__(self) -> None:
        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)

    # -- the CR ---------------------------------------------------------------------------------------------------
    def apply(self, doc: dict[str, Any]) -> None:
        doc = {**doc, "metadata": {**doc["metadata"], "name": self.name, "namespace": self.namespace}}
        try:
            current = self.get()
            doc["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            self.custom.replace_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, self.name, doc)
        except ApiException as exc:
            if exc.status != 404:
                raise
            self.custom.create_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, doc)

    def get(self) -> dict[str, Any]:
        return dict(self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, self.name))

    def patch_spec(self, patch: dict[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, self.name, {"spec": patch})

    def scale(self, replicas: int) -> None:
        """What `kubectl scale sgld NAME --replicas N` does: a patch of the /scale subresource."""
        self.custom.patch_namespaced_custom_object_scale(
            GROUP, VERSION, self.namespace, PLURAL, self.name, {"spec": {"replicas": replicas}}
        )

    def status(self) -> dict[str, Any]:
        return dict(self.get().get("status") or {})

    def condition(self, type_: str) -> dict[str, Any] | None:
        return next((c for c in self.status().get("conditions", []) if c["type"] == type_), None)

    # -- children -------------------------------------------------------------------------------------------------
    def pods(self, component: str = "worker") -> list[Any]:
        selector = f"sglang.ai/deployment={self.name},sglang.ai/component={component}"
        return list(self.core.list_namespaced_pod(self.namespace, label_selector=selector).items)

    def ready_worker_urls(self) -> set[str]:
        """URLs of rank-0 pods that are Ready and neither draining nor warm: what the routers should list."""
        urls = set()
        for pod in self.pods():
            annotations = pod.metadata.annotations or {}
            if (
                pod.metadata.labels.get("sglang.ai/node-rank") == "0"
                and _pod_ready(pod)
                and not pod.metadata.deletion_timestamp
                and "sglang.ai/draining-since" not in annotations
                and annotations.get("sglang.ai/warm") != "true"
            ):
                urls.add(f"http://{pod.status.pod_ip}:{pod.spec.containers[0].ports[0].container_port}")
        return urls

    def router_urls(self) -> list[str]:
        return [
            f"http://{pod.status.pod_ip}:30000"
            for pod in self.pods("router")
            if _pod_ready(pod) and not pod.metadata.deletion_timestamp
        ]

    def router_lists(self) -> dict[str, list[str]]:
        """Each ready router pod's routable worker URLs (GET /workers, without smg's short-lived `draining`
        entries of removed workers, which receive no new requests)."""
        lists = {}
        for base in self.router_urls():
            try:
                workers = requests.get(f"{base}/workers", timeout=5).json().get("workers", [])
            except (requests.RequestException, ValueError):
                continue
            lists[base] = sorted(w["url"] for w in workers if w.get("status") != "draining")
        return lists

    def router_in_sync(self) -> bool:
        lists = self.router_lists()
        want = sorted(self.ready_worker_urls())
        return bool(lists) and all(urls == want for urls in lists.values())

    def wait_ready(self, replicas: int, timeout: float = 120.0) -> None:
        def ready() -> bool:
            status = self.status()
            cond = self.condition("Ready") or {}
            return (
                status.get("readyReplicas") == replicas
                and status.get("registeredWorkers") == replicas
                and cond.get("status") == "True"
                and len(self.ready_worker_urls()) == replicas
                and self.router_in_sync()
            )

        wait_for(ready, timeout, f"{self.name}: {replicas} ready replicas registered", interval=0.5,
                 on_timeout=lambda: f"; status={self.status()}; routers={self.router_lists()}")  # fmt: skip


def generate(router_url: str, prompt: str, timeout: float = 30.0) -> requests.Response:
    body = {"text": prompt, "sampling_params": {"max_new_tokens": 8}}
    return requests.post(f"{router_url}/generate", json=body, timeout=timeout)


def chat(router_url: str, model: str, prompt: str, timeout: float = 30.0) -> requests.Response:
    body = {"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": 8}
    return requests.post(f"{router_url}/v1/chat/completions", json=body, timeout=timeout)


@dataclass
class LoadResult:
    sent: int = 0
    failed: int = 0
    errors: list[str] = field(default_factory=list)


@contextmanager
def steady_load(
    router_url: str,
    rate_per_s: float,
    max_requests: int,
    max_seconds: float,
    send: Callable[[str, int], requests.Response] | None = None,
) -> Iterator[LoadResult]:
    """Bounded background load through the router: at most `max_requests`, for at most `max_seconds`.

    `send(router_url, index)` makes one request; by default a short native `/generate`.
    """
    result = LoadResult()
    stop = threading.Event()
    lock = threading.Lock()
    sender = send or (lambda url, index: generate(url, f"request {index} about the weather"))

    def one(index: int) -> None:
        try:
            response = sender(router_url, index)
            ok = response.status_code == 200
            detail = f"HTTP {response.status_code}: {response.text[:200]}"
        except requests.RequestException as exc:
            ok, detail = False, str(exc)
        with lock:
            if not ok:
                result.failed += 1
                result.errors.append(detail)

    def loop() -> None:
        deadline = time.monotonic() + max_seconds
        with ThreadPoolExecutor(max_workers=32) as pool:
            while not stop.is_set() and result.sent < max_requests and time.monotonic() < deadline:
                pool.submit(one, result.sent)
                result.sent += 1
                stop.wait(1.0 / rate_per_s)

    driver = threading.Thread(target=loop, daemon=True)
    driver.start()
    try:
        yield result
    finally:
        stop.set()
        driver.join(timeout=90)
