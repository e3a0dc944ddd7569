"""A client that reaches a Service the way kube-proxy would. The local cluster has no Service proxy, and its
EndpointSlices stay empty (the API server refuses loopback addresses in them, and every pod IP here is in
127.0.0.0/8), so each call does what the EndpointSlice controller does for kube-proxy: read the Service's selector,
take the ready, not terminating pods it selects, and send to one of them, in turn. A change of the selector reaches
the next call at once, as soon as or sooner than it would reach a node's kube-proxy.
"""

from __future__ import annotations

import itertools
import threading
from typing import Any

from kubernetes import client

READ_TIMEOUT_S = 5.0


def _ready(pod: Any) -> bool:
    conditions = {c.type: c.status for c in pod.status.conditions or []}
    return conditions.get("Ready") == "True" and not pod.metadata.deletion_timestamp and bool(pod.status.pod_ip)


class ServiceEndpoints:
    def __init__(self, api: client.ApiClient, namespace: str, service: str, port_name: str = "http") -> None:
        self.core = client.CoreV1Api(api)
        self.namespace, self.service, self.port_name = namespace, service, port_name
        self._turn = itertools.count()
        self._lock = threading.Lock()

    def ready(self) -> list[str]:
        """The base URLs of the Service's ready endpoints, sorted."""
        service = self.core.read_namespaced_service(self.service, self.namespace, _request_timeout=READ_TIMEOUT_S)
        selector = ",".join(f"{key}={value}" for key, value in sorted((service.spec.selector or {}).items()))
        if not selector:
            return []
        target = next(p.target_port for p in service.spec.ports if p.name == self.port_name)
        pods = self.core.list_namespaced_pod(self.namespace, label_selector=selector,
                                             _request_timeout=READ_TIMEOUT_S).items  # fmt: skip
        urls = []
        for pod in filter(_ready, pods):
            ports = {p.name: p.container_port for c in pod.spec.containers for p in c.ports or []}
            port = ports.get(target) if isinstance(target, str) else target
            if port is not None:
                urls.append(f"http://{pod.status.pod_ip}:{port}")
        return sorted(urls)

    def next_url(self) -> str:
        """One ready endpoint, round robin; LookupError when the Service has none."""
        urls = self.ready()
        if not urls:
            raise LookupError(f"service {self.namespace}/{self.service} has no ready endpoint")
        with self._lock:
            return urls[next(self._turn) % len(urls)]
