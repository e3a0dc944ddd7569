"""Helpers for the simulator tests: an in-process simulator on an ephemeral port, and simulator processes."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from pathlib import Path

import pytest

from sglang_sim.args import parse, resolve
from sglang_sim.knobs import knobs_from_env
from sglang_sim.server import Simulator
from sglang_sim.versions import DEFAULT_VERSION

# Fast by default: no start-up delay, every simulated duration x0.01 (10 ms/token -> 0.1 ms/token).
FAST_ENV = {"SGLANG_SIM_STARTUP_SECONDS": "0", "SGLANG_SIM_TIME_SCALE": "0.01"}


async def wait_until(cond: Callable[[], bool], timeout: float = 5.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.005)


@contextlib.asynccontextmanager
async def run_sim(
    argv: list[str], env: Mapping[str, str] | None = None, wait_up: bool = True, version: str = DEFAULT_VERSION
) -> AsyncIterator[Simulator]:
    """A simulator playing SGLang `version` inside the test's event loop, listening on 127.0.0.1:<ephemeral>."""
    full_env = {**FAST_ENV, **(env or {})}
    ns = parse([*argv, "--host", "127.0.0.1", "--port", "0"], version)
    sim = Simulator(resolve(ns, version).args, knobs_from_env(full_env), full_env, "test")
    await sim.start()
    try:
        if wait_up:
            await wait_until(lambda: sim.status == "Up", what="simulator Up")
        yield sim
    finally:
        await sim.close()


def base_url(sim: Simulator) -> str:
    return f"http://127.0.0.1:{sim.port}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def http_status(url: str, timeout: float = 2.0) -> int:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as e:
        return int(e.code)
    except OSError:
        return 0


def wait_http(url: str, status: int = 200, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while http_status(url) != status:
        if time.monotonic() > deadline:
            raise AssertionError(f"{url} did not answer {status} within {timeout}s")
        time.sleep(0.05)


class Procs:
    """Processes started by a test, stopped (by pid) at teardown."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.procs: list[subprocess.Popen[bytes]] = []

    def sim(self, args: list[str], env: Mapping[str, str] | None = None) -> subprocess.Popen[bytes]:
        full = {**os.environ, **FAST_ENV, **(env or {})}
        log = open(self.tmp / f"sim-{len(self.procs)}.log", "wb")  # noqa: SIM115 - closed with the process
        p = subprocess.Popen(
            [sys.executable, "-m", "sglang_sim", *args], env=full, stdout=log, stderr=subprocess.STDOUT
        )
        self.procs.append(p)
        return p

    def start(self, cmd: list[str]) -> subprocess.Popen[bytes]:
        log = open(self.tmp / f"proc-{len(self.procs)}.log", "wb")  # noqa: SIM115
        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        self.procs.append(p)
        return p

    def log(self, p: subprocess.Popen[bytes]) -> str:
        i = self.procs.index(p)
        name = next(self.tmp.glob(f"*-{i}.log"))
        return name.read_text(errors="replace")

    def stop_all(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[Procs]:
    ps = Procs(tmp_path)
    try:
        yield ps
    finally:
        ps.stop_all()


class Kit:
    """The helpers above, handed to tests as one fixture (test modules do not import conftest)."""

    run = staticmethod(run_sim)
    url = staticmethod(base_url)
    wait_until = staticmethod(wait_until)
    free_port = staticmethod(free_port)
    http_status = staticmethod(http_status)
    wait_http = staticmethod(wait_http)


@pytest.fixture
def kit() -> Kit:
    return Kit()
