"""The agent: registers the nodes, watches pods bound to them, runs one worker per pod, cleans up orphans.

Start-up order: connect, register nodes (Ready), list pods, adopt live processes recorded in the state dir for
pods that still exist and stop those whose pod is gone, then watch. On SIGTERM every pod process is stopped
(SIGTERM, up to 10 s, SIGKILL) so nothing outlives the agent; the pod objects stay and a new agent restarts
their containers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from localcluster.nodeagent import sandbox
from localcluster.nodeagent.context import Context
from localcluster.nodeagent.envvars import service_env
from localcluster.nodeagent.events import EventRecorder
from localcluster.nodeagent.heartbeat import NodeKeeper, host_facts
from localcluster.nodeagent.images import Toolchain
from localcluster.nodeagent.ipam import Allocations
from localcluster.nodeagent.kube import Kube, watch_pods
from localcluster.nodeagent.layout import Layout
from localcluster.nodeagent.light import LightServer
from localcluster.nodeagent.logserver import LogServer
from localcluster.nodeagent.nodes import NodeShape, allocatable, node_names
from localcluster.nodeagent.podworker import PodWorker
from localcluster.nodeagent.process import ProcRecord, alive, load_record, namespaces_supported, signal_group
from localcluster.nodeagent.status import TERMINAL

log = logging.getLogger(__name__)
SHUTDOWN_GRACE_S = 10.0
ORPHAN_KILL_WAIT_S = 5.0
MAX_FINISHED = 10_000
MARKER_ENV = "LOCALCLUSTER_STATE"  # set by `python -m localcluster up`; lets `down` sweep pod processes too
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class Settings:
    kubeconfig: str
    state_dir: Path
    nodes: int = 4
    gpus_per_node: int = 8
    node_prefix: str = "gpu-node"
    restart_backoff_s: float = 10.0


def base_env(tools: Toolchain) -> dict[str, str]:
    """What an image's ENV would give every process: the virtualenv first on PATH, a HOME, a UTF-8 locale."""
    env = {"PATH": f"{tools.bindir}:{SYSTEM_PATH}", "HOME": "/root", "LANG": "C.UTF-8"}
    if MARKER_ENV in os.environ:
        env[MARKER_ENV] = os.environ[MARKER_ENV]
    return env


def recorded_processes(layout: Layout) -> dict[str, dict[str, ProcRecord]]:
    """uid -> container -> pidfile record, for every pod folder in the state dir."""
    found: dict[str, dict[str, ProcRecord]] = {}
    if not layout.pods.is_dir():
        return found
    for pod_dir in layout.pods.iterdir():
        records = {}
        for pidfile in pod_dir.glob("containers/*/pid.json"):
            record = load_record(pidfile)
            if record is not None:
                records[pidfile.parent.name] = record
        found[pod_dir.name] = records
    return found


async def kill_records(records: dict[str, ProcRecord]) -> None:
    """Stop processes of a pod that no longer exists (SIGTERM, then SIGKILL)."""
    live = [r for r in records.values() if alive(r)]
    for record in live:
        signal_group(record.pid, signal.SIGTERM)
    for _ in range(int(ORPHAN_KILL_WAIT_S * 10)):
        if not any(alive(r) for r in live):
            return
        await asyncio.sleep(0.1)
    for record in live:
        if alive(record):
            signal_group(record.pid, signal.SIGKILL)


class Agent:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.layout = Layout(settings.state_dir.resolve())
        self.names = node_names(settings.node_prefix, settings.nodes)
        self.shape = NodeShape(gpus=settings.gpus_per_node)
        self.workers: dict[str, PodWorker] = {}
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self.finished: set[str] = set()
        self.adoptable: dict[str, dict[str, ProcRecord]] = {}
        self.deferred: dict[str, tuple[dict[str, Any], bool]] = {}  # uid -> (latest pod, deleted?)

    async def run(self, stop: asyncio.Event) -> None:
        self.layout.root.mkdir(parents=True, exist_ok=True)
        kube = await Kube.connect(self.settings.kubeconfig)
        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True, limit=0))
        logs = LogServer(self.layout)
        light = LightServer()
        try:
            version = await kube.version()
            port = await logs.start()
            keeper = NodeKeeper(
                kube, self.layout, self.settings.node_prefix, self.names, self.shape, host_facts(version, port)
            )
            await keeper.register()
            isolate = namespaces_supported()
            if not isolate:
                log.warning("no mount namespaces (not root?): pods see the host's files, not their volumes")
            tools = Toolchain(python=sys.executable, bindir=str(Path(sys.executable).parent))
            self.ctx = Context(
                kube=kube,
                layout=self.layout,
                allocations=Allocations(self.layout),
                tools=tools,
                isolate=isolate,
                events=EventRecorder(kube),
                session=session,
                backoff_base=self.settings.restart_backoff_s,
                gpus_per_node=self.settings.gpus_per_node,
                node_allocatable=allocatable(self.shape),
                services=service_env(kube.host, kube.port),
                base_env=base_env(tools),
                node_reachable=keeper.reachable,
                light=light,
            )
            self.keeper = keeper
            keeper.on_reconnect = self._reconnected
            self.adoptable = recorded_processes(self.layout)
            log.info(
                "node agent up: nodes %s, kubelet version %s, mount namespaces %s, logs on port %d",
                self.names,
                version,
                isolate,
                port,
            )
            background = [asyncio.create_task(keeper.run()), asyncio.create_task(self._watch())]
            await stop.wait()
            for task in background:
                task.cancel()
            await self._stop_pods()
            # Every container is stopped, as on a reboot: memory-backed emptyDirs go with them.
            shutil.rmtree(self.layout.memory_root, ignore_errors=True)
            await self.ctx.events.drain()
            self.ctx.allocations.close()
        finally:
            await light.close()
            await logs.stop()
            await session.close()
            await kube.close()

    async def _watch(self) -> None:
        async for kind, obj in watch_pods(self.ctx.kube, "spec.nodeName!="):
            if kind == "SYNC":
                await self._resync(obj.get("items") or [])
            elif kind == "DELETED":
                self._dispatch(obj, gone=True)
            else:
                self._dispatch(obj)

    def _ours(self, pod: dict[str, Any]) -> bool:
        return (pod.get("spec") or {}).get("nodeName") in self.names

    def _dispatch(self, pod: dict[str, Any], gone: bool = False) -> None:
        if not self._ours(pod):
            return
        uid = pod["metadata"]["uid"]
        if not self.keeper.reachable(pod["spec"]["nodeName"]):
            self.deferred[uid] = (pod, gone)  # a partitioned kubelet hears nothing; replayed on reconnect
            return
        worker = self.workers.get(uid)
        if worker is not None:
            worker.update(None if gone else pod)
            return
        if gone or uid in self.finished:
            return
        phase = (pod.get("status") or {}).get("phase")
        records = self.adoptable.pop(uid, {})
        if phase in TERMINAL and not records and not pod["metadata"].get("deletionTimestamp"):
            return  # finished before this agent started: nothing to run or report
        worker = PodWorker(self.ctx, pod, records)
        self.workers[uid] = worker
        task = asyncio.create_task(worker.run())
        self.tasks[uid] = task
        task.add_done_callback(lambda _, uid=uid: self._finished(uid))  # type: ignore[misc]

    def _reconnected(self, node: str) -> None:
        for uid, (pod, gone) in list(self.deferred.items()):
            if pod["spec"]["nodeName"] == node:
                del self.deferred[uid]
                self._dispatch(pod, gone)

    def _finished(self, uid: str) -> None:
        self.workers.pop(uid, None)
        self.tasks.pop(uid, None)
        if len(self.finished) > MAX_FINISHED:  # only late events of just-deleted pods need it
            self.finished.clear()
        self.finished.add(uid)

    async def _resync(self, pods: list[dict[str, Any]]) -> None:
        """After a (re)list: start/update workers, end workers whose pod vanished, stop orphaned processes."""
        present = {p["metadata"]["uid"] for p in pods if self._ours(p)}
        for uid, worker in list(self.workers.items()):
            if uid in present:
                continue
            if self.keeper.reachable(worker.node):
                worker.update(None)
            elif worker.pod is not None:
                self.deferred[uid] = (worker.pod, True)
        for pod in pods:
            self._dispatch(pod)
        for uid, records in list(self.adoptable.items()):
            if uid not in present:
                log.info("stopping processes of pod %s, which no longer exists", uid)
                await kill_records(records)
                sandbox.remove(self.layout, uid)
                self.ctx.allocations.release(uid)
        for uid in list(self.adoptable):
            if uid not in self.deferred:  # a cut-off node's pods are adopted when it reconnects
                del self.adoptable[uid]
        for uid in self.ctx.allocations.uids():
            if uid not in present and uid not in self.workers:
                self.ctx.allocations.release(uid)
        memory = self.layout.memory_root
        for folder in memory.iterdir() if memory.is_dir() else []:
            if folder.name not in present and folder.name not in self.workers:  # e.g. a wiped state dir
                shutil.rmtree(folder, ignore_errors=True)

    async def _stop_pods(self) -> None:
        workers = list(self.workers.values())
        for task in self.tasks.values():
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*self.tasks.values(), return_exceptions=True)
        await asyncio.gather(*(w.stop_all(SHUTDOWN_GRACE_S) for w in workers), return_exceptions=True)


def configure_logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
