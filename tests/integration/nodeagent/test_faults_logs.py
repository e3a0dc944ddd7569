"""Fault hooks and the kubelet log endpoint, against a state dir laid out as the agent writes it."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from pathlib import Path

import aiohttp
import pytest

from localcluster.nodeagent import faults
from localcluster.nodeagent.layout import Layout, write_json
from localcluster.nodeagent.logserver import LogServer, tail_bytes
from localcluster.nodeagent.process import ProcRecord, save_record, start_ticks


@pytest.fixture
def sleeper(tmp_path: Path) -> tuple[Path, subprocess.Popen[bytes]]:
    """A state dir with pod ns/p whose container c is a real process."""
    layout = Layout(tmp_path)
    proc = subprocess.Popen(["sleep", "30"], start_new_session=True)
    write_json(
        layout.pod_meta("uid-1"), {"namespace": "ns", "name": "p", "uid": "uid-1", "node": "n", "ip": "127.1.0.4"}
    )
    save_record(layout.pidfile("uid-1", "c"), ProcRecord(proc.pid, start_ticks(proc.pid) or 0, 0, "x", time.time()))
    return tmp_path, proc


def test_kill_pod(sleeper: tuple[Path, subprocess.Popen[bytes]]) -> None:
    state, proc = sleeper
    assert faults.kill_pod(state, "ns", "p") == [proc.pid]
    assert proc.wait(timeout=10) == -signal.SIGKILL
    with pytest.raises(faults.FaultError, match="no running process"):
        faults.kill_pod(state, "ns", "p")


def wait_state(pid: int, letter: str, timeout: float = 10.0) -> bool:
    """Signals are delivered asynchronously: poll the process state letter."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == letter:
            return True
        time.sleep(0.01)
    return False


def test_pause_and_resume(sleeper: tuple[Path, subprocess.Popen[bytes]]) -> None:
    state, proc = sleeper
    try:
        faults.pause_pod(state, "ns", "p", container="c")
        assert wait_state(proc.pid, "T")
        faults.resume_pod(state, "ns", "p")
        assert wait_state(proc.pid, "S")
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_unknown_pod(tmp_path: Path) -> None:
    with pytest.raises(faults.FaultError, match="does not run on this agent"):
        faults.kill_pod(tmp_path, "ns", "nope")
    assert faults.main(["--state-dir", str(tmp_path), "kill-pod", "ns/nope"]) == 1


def test_node_markers(tmp_path: Path) -> None:
    faults.node_not_ready(tmp_path, "gpu-node-1")
    assert Layout(tmp_path).node_not_ready("gpu-node-1").exists()
    faults.node_ready(tmp_path, "gpu-node-1")
    assert not Layout(tmp_path).node_not_ready("gpu-node-1").exists()


def test_tail_bytes() -> None:
    assert tail_bytes(b"a\nb\nc", 2) == b"b\nc"
    assert tail_bytes(b"a\nb\n", -1) == b"a\nb\n"
    assert tail_bytes(b"a\n", 0) == b""


def test_log_endpoint(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    folder = layout.log_dir("ns", "p", "uid-1", "c")
    folder.mkdir(parents=True)
    (folder / "0.log").write_text("first run\n")
    (folder / "1.log").write_text("second\nrun\n")

    async def fetch(server: LogServer, query: str) -> tuple[int, str]:
        url = f"https://127.0.0.1:{server.port}/containerLogs/ns/p/c{query}"
        async with aiohttp.ClientSession() as session, session.get(url, ssl=False) as response:
            return response.status, await response.text()

    async def scenario() -> list[tuple[int, str]]:
        server = LogServer(layout)
        await server.start(0)
        try:
            return [await fetch(server, q) for q in ("", "?previous=true", "?tailLines=1")]
        finally:
            await server.stop()

    assert asyncio.run(scenario()) == [(200, "second\nrun\n"), (200, "first run\n"), (200, "run\n")]
