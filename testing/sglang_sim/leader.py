"""Rank >= 1 of a multi-node replica: mirror rank 0's activity so this node's GPUs look as busy as rank 0's.

The real worker node computes with its leader in lockstep, so its DCGM utilisation matches rank 0's. The
simulated worker has no engine, so it samples rank 0's `/v1/loads` once a second (sooner
with SGLANG_SIM_TIME_SCALE < 1, never more than 10 times a second) and records, per DP rank,
whether anything was running. The leader URL is `SGLANG_SIM_LEADER_URL`, else derived from --dist-init-addr's
host and --port, but only when that host is an IP literal or localhost: the simulator never resolves a
cluster DNS name (no traffic may leave 127.0.0.0/8 here). Unreachable leader -> idle.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import time
from collections.abc import Callable

import aiohttp

from .args import ServerArgs
from .engine import BusyTracker

log = logging.getLogger(__name__)
WINDOW_SECONDS = 10.0


def leader_url(args: ServerArgs, override: str | None) -> str | None:
    if override:
        return override.rstrip("/")
    if not args.dist_init_addr:
        return None
    host = args.dist_init_addr.rsplit(":", 1)[0].strip("[]")
    if host != "localhost":
        try:
            ipaddress.ip_address(host)
        except ValueError:
            return None
    return f"http://{'[' + host + ']' if ':' in host else host}:{args.port}"


class LeaderMirror:
    def __init__(
        self,
        url: str | None,
        api_key: str | None,
        num_ranks: int,
        poll_seconds: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.url = url
        self.poll_seconds = poll_seconds
        self.api_key = api_key
        self.clock = clock
        self.start = clock()
        self.trackers = [BusyTracker(WINDOW_SECONDS, self.start) for _ in range(num_ranks)]

    def busy(self) -> list[float]:
        now = self.clock()
        return [t.fraction(now) for t in self.trackers]

    def record(self, running: dict[int, int]) -> None:
        now = self.clock()
        for i, t in enumerate(self.trackers):
            t.set(running.get(i, 0) > 0, now)

    async def run(self) -> None:
        if self.url is None:
            return
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        timeout = aiohttp.ClientTimeout(total=max(1.0, self.poll_seconds))
        async with aiohttp.ClientSession(timeout=timeout, headers=headers) as session:
            while True:
                running: dict[int, int] = {}
                with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError, ValueError, KeyError, TypeError):
                    async with session.get(f"{self.url}/v1/loads", params={"include": "core"}) as resp:
                        body = await resp.json()
                    running = {int(e["dp_rank"]): int(e["num_running_reqs"]) for e in body["loads"]}
                self.record(running)
                await asyncio.sleep(self.poll_seconds)
