"""Fault injection for tests, through the agent's state dir (no agent RPC needed).

Python API (all take the agent's `--state-dir`):
    kill_pod(state_dir, ns, name, container=None)    SIGKILL the container processes (the agent restarts them)
    pause_pod(...) / resume_pod(...)                 SIGSTOP / SIGCONT (probes then time out)
    node_not_ready(state_dir, node) / node_ready(...) stop / resume the node's heartbeats (marker file)
    log_path(state_dir, ns, name, container)          the current log file of a container
CLI: `python -m localcluster.nodeagent.faults --state-dir DIR kill-pod NS/NAME [--container C]`, `pause-pod`,
`resume-pod`, `node-not-ready NODE`, `node-ready NODE`, `logs NS/NAME [--container C]`.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

from localcluster.nodeagent.layout import Layout, read_json
from localcluster.nodeagent.process import ProcRecord, alive, load_record, signal_group


class FaultError(Exception):
    pass


def _layout(state_dir: Path | str) -> Layout:
    return Layout(Path(state_dir).resolve())


def find_pod(state_dir: Path | str, namespace: str, name: str) -> str:
    """The uid of the pod this agent runs as namespace/name (the newest, if a name was reused)."""
    layout = _layout(state_dir)
    matches = []
    for meta_file in layout.pods.glob("*/pod.json") if layout.pods.is_dir() else []:
        meta = read_json(meta_file) or {}
        if meta.get("namespace") == namespace and meta.get("name") == name:
            matches.append((meta_file.stat().st_mtime, meta_file.parent.name))
    if not matches:
        raise FaultError(f"pod {namespace}/{name} does not run on this agent ({layout.root})")
    return max(matches)[1]


def _records(state_dir: Path | str, namespace: str, name: str, container: str | None) -> list[ProcRecord]:
    layout = _layout(state_dir)
    uid = find_pod(state_dir, namespace, name)
    records = []
    for pidfile in layout.pod(uid).glob("containers/*/pid.json"):
        if container is not None and pidfile.parent.name != container:
            continue
        record = load_record(pidfile)
        if record is not None and alive(record):
            records.append(record)
    if not records:
        which = f"container {container} of " if container else ""
        raise FaultError(f"no running process for {which}pod {namespace}/{name}")
    return records


def _signal(state_dir: Path | str, namespace: str, name: str, container: str | None, sig: int) -> list[int]:
    records = _records(state_dir, namespace, name, container)
    for record in records:
        signal_group(record.pid, sig)
    return [r.pid for r in records]


def kill_pod(state_dir: Path | str, namespace: str, name: str, container: str | None = None) -> list[int]:
    """SIGKILL the pod's container process groups; returns the pids killed."""
    return _signal(state_dir, namespace, name, container, signal.SIGKILL)


def pause_pod(state_dir: Path | str, namespace: str, name: str, container: str | None = None) -> list[int]:
    return _signal(state_dir, namespace, name, container, signal.SIGSTOP)


def resume_pod(state_dir: Path | str, namespace: str, name: str, container: str | None = None) -> list[int]:
    return _signal(state_dir, namespace, name, container, signal.SIGCONT)


def node_not_ready(state_dir: Path | str, node: str) -> None:
    """The agent reports the node Ready=False within a second, then stops its heartbeats."""
    marker = _layout(state_dir).node_not_ready(node)
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.touch()


def node_ready(state_dir: Path | str, node: str) -> None:
    _layout(state_dir).node_not_ready(node).unlink(missing_ok=True)


def log_path(state_dir: Path | str, namespace: str, name: str, container: str) -> Path:
    """The log of the container's latest start."""
    layout = _layout(state_dir)
    uid = find_pod(state_dir, namespace, name)
    folder = layout.log_dir(namespace, name, uid, container)
    logs = sorted(folder.glob("*.log"), key=lambda p: int(p.stem)) if folder.is_dir() else []
    if not logs:
        raise FaultError(f"no logs for container {container} of pod {namespace}/{name}")
    return logs[-1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m localcluster.nodeagent.faults", description=__doc__)
    parser.add_argument("--state-dir", required=True, type=Path)
    sub = parser.add_subparsers(dest="action", required=True)
    for action in ("kill-pod", "pause-pod", "resume-pod", "logs"):
        cmd = sub.add_parser(action)
        cmd.add_argument("pod", help="NAMESPACE/NAME")
        cmd.add_argument("--container", default=None)
    for action in ("node-not-ready", "node-ready"):
        sub.add_parser(action).add_argument("node")
    args = parser.parse_args(argv)
    try:
        if args.action in ("node-not-ready", "node-ready"):
            (node_not_ready if args.action == "node-not-ready" else node_ready)(args.state_dir, args.node)
            return 0
        namespace, _, name = args.pod.partition("/")
        if not name:
            parser.error("pod must be NAMESPACE/NAME")
        if args.action == "logs":
            container = args.container or _only_container(args.state_dir, namespace, name)
            sys.stdout.write(log_path(args.state_dir, namespace, name, container).read_text(errors="replace"))
            return 0
        act = {"kill-pod": kill_pod, "pause-pod": pause_pod, "resume-pod": resume_pod}[args.action]
        pids = act(args.state_dir, namespace, name, args.container)
        print(f"{args.action}: signalled pids {' '.join(map(str, pids))}")
    except FaultError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


def _only_container(state_dir: Path, namespace: str, name: str) -> str:
    layout = _layout(state_dir)
    uid = find_pod(state_dir, namespace, name)
    names = sorted(p.name for p in (layout.pod(uid) / "containers").iterdir())
    if len(names) != 1:
        raise FaultError(f"pod {namespace}/{name} has containers {names}: pass --container")
    return names[0]


if __name__ == "__main__":
    sys.exit(main())
