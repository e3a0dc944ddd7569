"""Node registration and heartbeats: the Node objects, their status, and their Leases.

Every ~10 s each node's Lease in kube-node-lease is renewed (what the node lifecycle controller watches);
the Node status is re-posted every minute or at once when a fault marker appears or goes. A node with a
`node-not-ready` marker reports Ready=False once, then goes silent: no lease renewals, no status, and its pod
workers stop writing to the API and the agent stops passing them pod updates (the controller then marks it
Unknown, taints it and, after the pods' tolerations, evicts them) while its processes keep running, as on a
partitioned machine. When the marker goes, the node reports Ready and its pods catch up with the API.
"""

from __future__ import annotations

import asyncio
import logging
import platform
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import aiohttp

from localcluster.nodeagent.kube import MERGE_PATCH, ApiError, Kube, decode
from localcluster.nodeagent.layout import Layout
from localcluster.nodeagent.nodes import (
    AGENT_LABEL,
    LEASE_NAMESPACE,
    HostFacts,
    NodeShape,
    lease_manifest,
    micro_time,
    node_manifest,
    node_status,
)

log = logging.getLogger(__name__)
LEASE_RENEW_S = 10.0
STATUS_REPORT_S = 60.0
TICK_S = 1.0
NOT_READY_MESSAGE = "node-not-ready fault injected by localcluster.nodeagent.faults"
API_ERRORS = (ApiError, aiohttp.ClientError, OSError, asyncio.TimeoutError)


def host_facts(kubelet_version: str, kubelet_port: int) -> HostFacts:
    def read(path: str) -> str:
        try:
            return Path(path).read_text().strip()
        except OSError:
            return ""

    return HostFacts(
        kubelet_version=kubelet_version,
        kernel=platform.release(),
        boot_id=read("/proc/sys/kernel/random/boot_id"),
        machine_id=read("/etc/machine-id"),
        kubelet_port=kubelet_port,
    )


class NodeKeeper:
    def __init__(
        self, kube: Kube, layout: Layout, prefix: str, names: Sequence[str], shape: NodeShape, host: HostFacts
    ) -> None:
        self.kube = kube
        self.prefix = prefix + "-"  # only nodes named like ours are ever deleted (another agent may run)
        self.layout = layout
        self.names = list(names)
        self.shape = shape
        self.host = host
        self._uids: dict[str, str] = {}
        self._cut_off: set[str] = set()  # nodes with a node-not-ready marker
        self._last_status: dict[str, float] = {}
        self._last_lease: dict[str, float] = {}
        self.on_reconnect: Callable[[str], None] = lambda _: None  # a cut-off node talks to the API again

    def reachable(self, node: str) -> bool:
        return node not in self._cut_off

    def _markers(self) -> set[str]:
        folder = self.layout.not_ready_dir
        return {p.name for p in folder.iterdir()} & set(self.names) if folder.is_dir() else set()

    async def register(self) -> None:
        """Create the nodes (or update labels of existing ones), post their status, delete our stale ones."""
        self._cut_off = self._markers()
        for index, name in enumerate(self.names):
            manifest = node_manifest(name, index, self.shape)
            try:
                node = await decode(self.kube.core.create_node_without_preload_content(manifest))
            except ApiError as err:
                if err.status != 409:
                    raise
                node = await decode(
                    self.kube.core.patch_node_without_preload_content(
                        name, {"metadata": manifest["metadata"]}, _content_type=MERGE_PATCH
                    )
                )
            self._uids[name] = node["metadata"]["uid"]
            await self._post_status(name, node)
            if self.reachable(name):
                await self._renew(name)
        existing = await decode(self.kube.core.list_node_without_preload_content(label_selector=AGENT_LABEL))
        for node in existing.get("items", []):
            name = node["metadata"]["name"]
            if name not in self.names and name.startswith(self.prefix):
                log.info("deleting node %s left from an earlier run with more nodes", name)
                await decode(self.kube.core.delete_node_without_preload_content(name))

    async def _post_status(self, name: str, node: dict[str, Any] | None = None) -> None:
        if node is None:
            node = await decode(self.kube.core.read_node_status_without_preload_content(name))
        previous = (node.get("status") or {}).get("conditions") or []
        ready = self.reachable(name)
        status = node_status(self.shape, self.host, ready, time.time(), previous, NOT_READY_MESSAGE)
        await decode(
            self.kube.core.patch_node_status_without_preload_content(
                name, {"status": status}, _content_type=MERGE_PATCH
            )
        )
        self._last_status[name] = time.monotonic()

    async def _renew(self, name: str) -> None:
        now = time.time()
        try:
            await decode(
                self.kube.coordination.patch_namespaced_lease_without_preload_content(
                    name,
                    LEASE_NAMESPACE,
                    {"spec": {"holderIdentity": name, "renewTime": micro_time(now)}},
                    _content_type=MERGE_PATCH,
                )
            )
        except ApiError as err:
            if err.status != 404:
                raise
            lease = lease_manifest(name, self._uids.get(name, ""), now)
            await decode(self.kube.coordination.create_namespaced_lease_without_preload_content(LEASE_NAMESPACE, lease))
        self._last_lease[name] = time.monotonic()

    async def run(self) -> None:
        """Heartbeat forever (cancel to stop)."""
        while True:
            markers = self._markers()
            changed = markers ^ self._cut_off
            if changed:
                log.info("node fault markers now: %s", sorted(markers) or "none")
            for name in self.names:
                try:
                    await self._beat(name, name in changed, name in markers)
                except API_ERRORS as err:
                    log.warning("heartbeat of %s failed: %s", name, err)
            await asyncio.sleep(TICK_S)

    async def _beat(self, name: str, flipped: bool, cut_off: bool) -> None:
        now = time.monotonic()
        if flipped and cut_off:
            self._cut_off.add(name)
            await self._post_status(name)  # the last word before going silent: Ready=False
            return
        if flipped:
            self._cut_off.discard(name)
            await self._post_status(name)
            await self._renew(name)
            self.on_reconnect(name)
            return
        if cut_off:
            return
        if now - self._last_lease.get(name, 0.0) >= LEASE_RENEW_S:
            await self._renew(name)
        if now - self._last_status.get(name, 0.0) >= STATUS_REPORT_S:
            await self._post_status(name)
