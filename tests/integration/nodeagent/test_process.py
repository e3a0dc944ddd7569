"""Container processes: exit codes, graceful stop, adoption of a non-child, mount namespace views."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from localcluster.nodeagent.process import (
    Proc,
    ProcRecord,
    alive,
    exec_prefix,
    namespaces_supported,
    spawn,
    start_ticks,
)
from localcluster.nodeagent.volumes import Bind

TIMEOUT_S = 10.0


def record_of(pid: int) -> ProcRecord:
    return ProcRecord(pid, start_ticks(pid) or 0, 0, "nodeagent://t", time.time())


def run_sh(
    script: str, tmp_path: Path, binds: list[Bind] | None = None, isolate: bool = False
) -> subprocess.Popen[bytes]:
    return spawn(
        ["sh", "-c", script],
        {"PATH": "/usr/bin:/bin"},
        binds or [],
        str(tmp_path / "work"),
        tmp_path / "c.log",
        isolate,
    )


def test_exit_code_and_signal(tmp_path: Path) -> None:
    async def scenario() -> tuple[int | None, int | None, int | None]:
        done = Proc(record_of((p := run_sh("exit 3", tmp_path)).pid), p)
        first = await asyncio.wait_for(done.exited, TIMEOUT_S)
        killed = Proc(record_of((q := run_sh("sleep 30", tmp_path)).pid), q)
        killed.signal(signal.SIGKILL)
        return first, await asyncio.wait_for(killed.exited, TIMEOUT_S), killed.signal_number

    assert asyncio.run(scenario()) == (3, 137, 9)


def test_stop_escalates_to_sigkill(tmp_path: Path) -> None:
    async def scenario() -> tuple[int | None, float]:
        popen = run_sh("trap '' TERM; sleep 30 & wait; sleep 30", tmp_path)
        proc = Proc(record_of(popen.pid), popen)
        await asyncio.sleep(0.2)
        began = time.monotonic()
        code = await proc.stop(grace=0.5)
        return code, time.monotonic() - began

    code, took = asyncio.run(scenario())
    assert code == 137
    assert 0.4 < took < 5.0


def test_adopted_process_exit_is_seen_without_status(tmp_path: Path) -> None:
    # A grandchild (reparented away from us) stands for a process left by a previous agent.
    script = "setsid sleep 30 >/dev/null 2>&1 & echo $!"
    out = subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=True)
    pid = int(out.stdout)
    deadline = time.monotonic() + TIMEOUT_S
    while os.getpgid(pid) != pid and time.monotonic() < deadline:  # setsid may not have run yet
        time.sleep(0.01)
    record = record_of(pid)
    assert alive(record)

    async def scenario() -> int | None:
        proc = Proc(record, None)
        proc.signal(signal.SIGTERM)
        return await asyncio.wait_for(proc.exited, TIMEOUT_S)

    assert asyncio.run(scenario()) is None
    assert not alive(record)


@pytest.mark.skipif(not namespaces_supported(), reason="needs mount namespaces (root)")
def test_private_mounts_and_exec_prefix(tmp_path: Path) -> None:
    secret = tmp_path / "vol"
    secret.mkdir()
    (secret / "token").write_text("pod-a")
    target = tmp_path / "mnt" / "serviceaccount"
    binds = [Bind(str(secret), str(target), read_only=True)]

    async def scenario() -> tuple[str, str]:
        popen = run_sh("cat " + str(target / "token") + "; sleep 30", tmp_path, binds, isolate=True)
        proc = Proc(record_of(popen.pid), popen)
        try:
            for _ in range(100):
                if (tmp_path / "c.log").read_text():
                    break
                await asyncio.sleep(0.05)
            probe = await asyncio.create_subprocess_exec(
                *exec_prefix(popen.pid, True), "cat", str(target / "token"), stdout=asyncio.subprocess.PIPE
            )
            seen, _ = await asyncio.wait_for(probe.communicate(), TIMEOUT_S)
            return (tmp_path / "c.log").read_text(), seen.decode()
        finally:
            await proc.stop(grace=1.0)

    logged, via_exec = asyncio.run(scenario())
    assert logged.startswith("pod-a")
    assert via_exec == "pod-a"
    assert not (target / "token").exists()  # the host sees only the empty mount point
