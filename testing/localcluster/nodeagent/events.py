"""Pod events in the kubelet's words (Started, Killing, Unhealthy, BackOff, Failed, FailedMount).

Repeats of the same (pod, reason, message) within ten minutes bump the existing event's count instead of
creating a new one, as client-go's event correlator does. Sending is best effort and never blocks a pod.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections.abc import Mapping
from typing import Any

import aiohttp

from localcluster.nodeagent.kube import ApiError, Kube, decode
from localcluster.nodeagent.status import rfc3339

log = logging.getLogger(__name__)
DEDUP_WINDOW_S = 600.0
MAX_TRACKED = 4096


class EventRecorder:
    def __init__(self, kube: Kube) -> None:
        self._kube = kube
        self._seen: dict[tuple[str, str, str], tuple[str, str, int, float]] = {}  # key -> ns, name, count, at
        self._tasks: set[asyncio.Task[None]] = set()

    def emit(self, pod: Mapping[str, Any], kind: str, reason: str, message: str, field_path: str = "") -> None:
        task = asyncio.get_running_loop().create_task(self._send(pod, kind, reason, message, field_path))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send(self, pod: Mapping[str, Any], kind: str, reason: str, message: str, field_path: str) -> None:
        meta = pod.get("metadata", {})
        namespace, uid = meta.get("namespace", "default"), meta.get("uid", "")
        node = pod.get("spec", {}).get("nodeName", "")
        key = (uid, reason, message)
        now = time.time()
        stamp = rfc3339(now)
        try:
            seen = self._seen.get(key)
            if seen and now - seen[3] < DEDUP_WINDOW_S:
                count = seen[2] + 1
                self._seen[key] = (seen[0], seen[1], count, now)
                body = {"count": count, "lastTimestamp": stamp}
                await decode(
                    self._kube.core.patch_namespaced_event_without_preload_content(
                        seen[1], seen[0], body, _content_type="application/merge-patch+json"
                    )
                )
                return
            digest = hashlib.sha256(f"{uid}{reason}{message}{now}".encode()).hexdigest()[:16]
            name = f"{meta.get('name', 'pod')}.{digest}"
            involved: dict[str, Any] = {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": meta.get("name"),
                "namespace": namespace,
                "uid": uid,
                "resourceVersion": meta.get("resourceVersion"),
            }
            if field_path:
                involved["fieldPath"] = field_path
            event = {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"name": name, "namespace": namespace},
                "involvedObject": involved,
                "reason": reason,
                "message": message,
                "type": kind,
                "count": 1,
                "firstTimestamp": stamp,
                "lastTimestamp": stamp,
                "source": {"component": "kubelet", "host": node},
                "reportingComponent": "kubelet",
                "reportingInstance": node,
            }
            await decode(self._kube.core.create_namespaced_event_without_preload_content(namespace, event))
            if len(self._seen) > MAX_TRACKED:
                self._seen.clear()
            self._seen[key] = (namespace, name, 1, now)
        except (TimeoutError, ApiError, aiohttp.ClientError, OSError) as err:
            log.debug("event %s for %s/%s not recorded: %s", reason, namespace, meta.get("name"), err)

    async def drain(self, timeout: float = 5.0) -> None:
        if self._tasks:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.gather(*self._tasks, return_exceptions=True), timeout)
