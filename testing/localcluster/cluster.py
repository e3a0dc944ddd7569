"""The whole local cluster as one unit: build, control plane, GPU node agent, Prometheus.

This is the Python API tests and tools use:

    info = ensure_up()   # reuse the running cluster or start one -> ClusterInfo(kubeconfig, ...)
    shutdown()           # stop everything, leave no process behind

`up` is idempotent: on a running cluster it only starts what is missing (e.g. Prometheus after a test stopped
it). A cluster whose control plane is down is started fresh (empty etcd, empty node-agent state).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from localcluster import controlplane, procs, prometheus
from localcluster.build import ensure_all_built, kube_version
from localcluster.paths import REPO_ROOT, StateLayout, as_layout, bin_dir

AGENT = "nodeagent"
AGENT_READY_TIMEOUT_S = 90.0


@dataclass(frozen=True)
class ClusterInfo:
    kubeconfig: Path
    prometheus_url: str | None
    state_dir: Path
    server: str
    version: str
    agent: bool  # whether the GPU node agent runs (nodes exist, pods run as local processes)


@dataclass
class UpResult:
    info: ClusterInfo
    already_up: bool
    timings: dict[str, float] = field(default_factory=dict)


def nodeagent_available() -> bool:
    return importlib.util.find_spec("localcluster.nodeagent.__main__") is not None


def _info(layout: StateLayout) -> ClusterInfo:
    ports = controlplane.read_ports(layout)
    return ClusterInfo(
        kubeconfig=layout.kubeconfig,
        prometheus_url=prometheus.url(layout) if prometheus.ready(layout) else None,
        state_dir=layout.root,
        server=ports.server if ports else "",
        version=kube_version(),
        agent=procs.running_pid(layout, AGENT) is not None,
    )


def current(state: StateLayout | Path | None = None) -> ClusterInfo | None:
    """The running cluster, or None if its control plane is not up."""
    layout = as_layout(state)
    return _info(layout) if controlplane.is_up(layout) else None


def _ready_nodes(kubeconfig: Path) -> int:
    from kubernetes import client, config  # imported lazily: `down` and `status` do not need it

    api = client.CoreV1Api(config.new_client_from_config(str(kubeconfig)))
    ready = 0
    for node in api.list_node().items:
        conditions = (node.status.conditions if node.status else None) or []
        ready += any(c.type == "Ready" and c.status == "True" for c in conditions)
    return ready


def start_agent(layout: StateLayout, nodes: int, gpus_per_node: int) -> float:
    """Start `python -m localcluster.nodeagent` detached and wait until its nodes are Ready."""
    if not nodeagent_available():
        raise RuntimeError(
            "the GPU node agent (package localcluster.nodeagent) is not installed in this checkout; "
            "run `python -m localcluster up --no-agent` for a control plane without nodes"
        )
    began = time.monotonic()
    layout.nodeagent_dir.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "localcluster.nodeagent", "--kubeconfig", str(layout.kubeconfig)]
    argv += [
        "--state-dir",
        str(layout.nodeagent_dir),
        "--nodes",
        str(nodes),
        "--gpus-per-node",
        str(gpus_per_node),
    ]
    # The agent runs pods' commands (the simulator, `smg`): give it this virtualenv's scripts first on PATH.
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    procs.spawn(layout, AGENT, argv, env=env, cwd=REPO_ROOT)

    def nodes_ready() -> bool:
        if procs.running_pid(layout, AGENT) is None:
            raise RuntimeError("the node agent exited during start-up" + procs.log_tail(layout.logfile(AGENT)))
        return _ready_nodes(layout.kubeconfig) >= nodes

    try:
        procs.wait_for(
            nodes_ready,
            AGENT_READY_TIMEOUT_S,
            f"{nodes} Ready nodes from the node agent",
            interval=0.5,
            on_timeout=lambda: procs.log_tail(layout.logfile(AGENT)),
        )
    except BaseException:
        stop_agent(layout)
        raise
    return time.monotonic() - began


def stop_agent(layout: StateLayout) -> bool:
    """SIGTERM the agent (it stops its pods), then end whatever it left behind in other process groups."""
    was_running = procs.stop(layout, AGENT, timeout=30.0)
    tracked = [pid for name, pid in status(layout).items() if pid and name != AGENT]
    procs.sweep(layout, spare_groups=tracked)
    return was_running


def up(
    state: StateLayout | Path | None = None,
    *,
    agent: bool = True,
    with_prometheus: bool = True,
    nodes: int = 4,
    gpus_per_node: int = 8,
    log: bool = True,
) -> UpResult:
    layout = as_layout(state)
    timings: dict[str, float] = {}
    for build in ensure_all_built(bin_dir(), log=log):
        timings[f"{build.target}_{'build_s' if build.built else 'last_build_s'}"] = build.seconds
    already_up = controlplane.is_up(layout)
    if not already_up:
        stop_agent(layout)
        prometheus.stop_prometheus(layout)
        prometheus.forget(layout)
        shutil.rmtree(layout.nodeagent_dir, ignore_errors=True)
        timings["controlplane_start_s"] = controlplane.start(layout, bin_dir())
    if agent and procs.running_pid(layout, AGENT) is None:
        already_up = False
        timings["agent_start_s"] = start_agent(layout, nodes, gpus_per_node)
    if with_prometheus and not prometheus.ready(layout):
        already_up = False
        began = time.monotonic()
        prometheus.start_prometheus(layout)
        timings["prometheus_start_s"] = time.monotonic() - began
    if any(key.endswith("start_s") for key in timings):
        layout.timings_file.write_text(json.dumps(timings, indent=1) + "\n")
    return UpResult(_info(layout), already_up, timings)


def down(state: StateLayout | Path | None = None) -> list[str]:
    """Stop everything this cluster runs; returns the names of what was running."""
    layout = as_layout(state)
    stopped = []
    if prometheus.stop_prometheus(layout):
        stopped.append(prometheus.NAME)
    if stop_agent(layout):
        stopped.append(AGENT)
    stopped += controlplane.stop(layout)
    prometheus.forget(layout)
    procs.sweep(layout)
    return stopped


def status(state: StateLayout | Path | None = None) -> dict[str, int | None]:
    layout = as_layout(state)
    return {
        **controlplane.running(layout),
        AGENT: procs.running_pid(layout, AGENT),
        prometheus.NAME: procs.running_pid(layout, prometheus.NAME),
    }


def _live_users(layout: StateLayout) -> list[int]:
    users = layout.root / "users"
    return [int(f.name) for f in users.glob("*") if f.name.isdigit() and procs.pid_alive(int(f.name))]


@contextmanager
def session(agent: bool | None = None, with_prometheus: bool = True, keep: bool = False) -> Iterator[ClusterInfo]:
    """Use the running cluster, or start one and stop it afterwards unless another session still uses it.

    Sessions (test runs, the demo) register their pid under `users/`, so a run that started the cluster never
    stops it under a concurrent run that reused it.
    """
    layout = as_layout(None)
    was_up = current(layout) is not None
    info = ensure_up(agent, with_prometheus)
    me = layout.root / "users" / str(os.getpid())
    me.parent.mkdir(parents=True, exist_ok=True)
    me.touch()
    try:
        yield info
    finally:
        me.unlink(missing_ok=True)
        if not was_up and not keep and not _live_users(layout):
            shutdown()


def ensure_up(agent: bool | None = None, with_prometheus: bool = True) -> ClusterInfo:
    """Reuse the running cluster or start one (with the node agent when that package exists)."""
    want_agent = nodeagent_available() if agent is None else agent
    return up(agent=want_agent, with_prometheus=with_prometheus, log=True).info


def shutdown() -> list[str]:
    return down()
