"""Ranks >= 1: the leader URL and mirroring rank 0's activity into this node's GPU utilisation."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp

from sglang_sim.args import ServerArgs, parse, resolve
from sglang_sim.leader import leader_url


def worker_args(addr: str) -> ServerArgs:
    ns = parse(["--model", "m", "--tp", "2", "--nnodes", "2", "--node-rank", "1", "--dist-init-addr", addr])
    return resolve(ns).args


def test_leader_url_only_from_ip_literals_or_override() -> None:
    assert leader_url(worker_args("127.0.0.5:5000"), None) == "http://127.0.0.5:30000"
    assert leader_url(worker_args("localhost:5000"), None) == "http://localhost:30000"
    assert leader_url(worker_args("[::1]:5000"), None) == "http://[::1]:30000"
    assert leader_url(worker_args("llama-0-leader.ns.svc:5000"), None) is None  # never resolve cluster DNS
    assert leader_url(worker_args("llama-0-leader:5000"), "http://127.0.0.9:8000/") == "http://127.0.0.9:8000"


def test_worker_gpus_mirror_the_leaders_activity(kit: Any) -> None:
    async def body() -> None:
        # polls every 0.1 s; no drain, so closing does not wait for the long request
        env = {
            "SGLANG_SIM_TIME_SCALE": "0.1",
            "SGLANG_SIM_DECODE_TOKENS_PER_S": "1000",
            "SGLANG_SIM_DRAIN_SECONDS": "0",
        }
        leader_argv = ["--model", "m", "--tp", "2", "--nnodes", "2", "--dist-init-addr", "127.0.0.1:5000"]
        async with kit.run([*leader_argv, "--skip-server-warmup"], env) as leader:
            worker_env = {**env, "SGLANG_SIM_LEADER_URL": kit.url(leader)}
            worker_argv = [*leader_argv, "--node-rank", "1", "--enable-metrics"]
            async with kit.run(worker_argv, worker_env) as worker, aiohttp.ClientSession() as s:
                req = {"text": "busy", "sampling_params": {"max_new_tokens": 30000}}
                task = asyncio.create_task(s.post(f"{kit.url(leader)}/generate", json=req))

                async def worker_util() -> float:
                    async with s.get(f"{kit.url(worker)}/metrics") as r:
                        lines = [x for x in (await r.text()).splitlines() if x.startswith("DCGM_FI_DEV_GPU_UTIL{")]
                    assert len(lines) == 1  # tp 2 over 2 nodes: one GPU on this pod
                    return float(lines[0].rsplit(" ", 1)[1])

                utils: list[float] = []

                def busy_seen() -> bool:
                    return bool(utils) and utils[-1] > 0

                deadline = asyncio.get_running_loop().time() + 5
                while not busy_seen() and asyncio.get_running_loop().time() < deadline:
                    utils.append(await worker_util())
                    await asyncio.sleep(0.1)
                assert busy_seen(), f"worker GPU never showed the leader's activity: {utils[-3:]}"
                task.cancel()

    asyncio.run(body())
