"""Where the node agent keeps its state.

The agent, the fault CLI and a restarted agent all read the same tree, so every path is named here:

    <state>/ipam.json                          pod IP and GPU allocations (survive an agent restart)
    <state>/pods/<uid>/pod.json                namespace, name, node and IP of a pod this agent runs
    <state>/pods/<uid>/volumes/<volume>/       the pod's secret/configMap/projected/emptyDir contents
    <state>/pods/<uid>/etc-hosts               the pod's /etc/hosts
    <state>/pods/<uid>/containers/<c>/pid.json the running process of a container (pid + kernel start time)
    <state>/logs/<ns>_<pod>_<uid>/<c>/<n>.log  stdout+stderr of restart n (kept after the pod is gone)
    <state>/faults/node-not-ready/<node>       marker: stop heartbeating this node
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SHM_ROOT = Path("/dev/shm")


@dataclass(frozen=True)
class Layout:
    root: Path

    @property
    def ipam(self) -> Path:
        return self.root / "ipam.json"

    @property
    def pods(self) -> Path:
        return self.root / "pods"

    def pod(self, uid: str) -> Path:
        return self.pods / uid

    def pod_meta(self, uid: str) -> Path:
        return self.pod(uid) / "pod.json"

    def volume(self, uid: str, name: str) -> Path:
        return self.pod(uid) / "volumes" / name

    @property
    def memory_root(self) -> Path:
        """Memory-backed emptyDirs live on the host's /dev/shm tmpfs, one folder per agent state dir."""
        digest = hashlib.sha256(str(self.root.resolve()).encode()).hexdigest()[:10]
        return SHM_ROOT / f"localcluster-nodeagent-{digest}"

    def memory_volume(self, uid: str, name: str) -> Path:
        return self.memory_root / uid / name

    def etc_hosts(self, uid: str) -> Path:
        return self.pod(uid) / "etc-hosts"

    def workdir(self, uid: str) -> Path:
        """Default working directory of a pod's processes (a container image's WORKDIR has no equivalent)."""
        return self.pod(uid) / "work"

    def container(self, uid: str, name: str) -> Path:
        return self.pod(uid) / "containers" / name

    def pidfile(self, uid: str, name: str) -> Path:
        return self.container(uid, name) / "pid.json"

    def log_dir(self, namespace: str, pod: str, uid: str, container: str) -> Path:
        return self.root / "logs" / f"{namespace}_{pod}_{uid}" / container

    def log_file(self, namespace: str, pod: str, uid: str, container: str, restart: int) -> Path:
        return self.log_dir(namespace, pod, uid, container) / f"{restart}.log"

    @property
    def not_ready_dir(self) -> Path:
        return self.root / "faults" / "node-not-ready"

    def node_not_ready(self, node: str) -> Path:
        return self.not_ready_dir / node


def write_json(path: Path, data: Any) -> None:
    """Write atomically (temp file + rename) so a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    tmp.replace(path)


def read_json(path: Path) -> Any:
    """The parsed file, or None when it is missing or unreadable (a crash mid-write leaves no partial file)."""
    with contextlib.suppress(FileNotFoundError, NotADirectoryError, json.JSONDecodeError):
        return json.loads(path.read_text())
    return None
