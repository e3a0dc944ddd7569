"""Routing benchmark: the real smg router in front of simulator replicas, replaying the Mooncake trace's prompts.

    .venv/bin/python bench/routing.py [--policies round_robin,cache_aware,...] [--json]

For each policy: fresh simulator replicas (`python -m sglang_sim`, bounded prefix caches, cold) and a
fresh `smg launch` with the flags the operator renders (`render/router.py`) plus the policy's flags, all on
127.0.0.1; the trace's requests are sent to the router at their (scaled) arrival times as streaming
`/generate` requests whose text encodes their `hash_ids` (`routing_model.prompt_text`: one simulator block per
trace block). Measured: the prefix-hit rate in trace tokens (from each answer's `cached_tokens`), TTFT p50/p99
(first streamed chunk; simulated seconds), and the coefficient of variation of requests served per replica (from
each replica's `sglang:num_requests_total`). References: round-robin, and one replica with N times the cache
(and slots) fed directly: the ceiling, also counted directly over the trace without any process.

Knobs: --sample keeps one prefix family in K (whole families, so no reuse is broken), --rate-scale compresses
arrivals (more load; service times unchanged), --time-scale runs every simulated duration and the arrivals that
much faster in wall time. Bounded: --limit requests per run, --max-seconds per run, a timeout on every wait; every
process started here is stopped (by its own handle) at the end of its run, also on error.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import aiohttp
from routing_model import (  # bench/ is this script's folder, like registration.py's model
    DEFAULT_POLICIES,
    POLICIES,
    SCALE,
    SESSION_HEADER,
    SIM_BLOCK_TOKENS,
    Outcome,
    PolicyResult,
    TraceRequest,
    direct_lru_hit_rate,
    load_trace,
    prompt_text,
    render_table,
    router_counters,
    sample_families,
    sim_output_tokens,
    summarize,
)

from sglang_operator.api.spec import SGLangDeploymentSpec
from sglang_operator.render.router import router_command

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TRACE = REPO.parent / "shared" / "traces" / "mooncake_synthetic_trace.jsonl"
SMG = Path(sys.executable).parent / "smg"
MODEL = "sim-model"


@dataclass(frozen=True)
class Setup:
    replicas: int
    cache_blocks: int  # per replica, simulator blocks (= trace blocks)
    max_running: int  # per replica
    prefill_tps: float  # trace tokens per simulated second, per request
    decode_tps: float
    time_scale: float
    rate_scale: float
    max_seconds: float

    def sim_env(self) -> dict[str, str]:
        return {
            "SGLANG_SIM_STARTUP_SECONDS": "0",
            "SGLANG_SIM_TIME_SCALE": repr(self.time_scale),
            "SGLANG_SIM_PREFILL_TOKENS_PER_S": repr(self.prefill_tps / SCALE),
            "SGLANG_SIM_DECODE_TOKENS_PER_S": repr(self.decode_tps / SCALE),
        }

    @property
    def tree_chars(self) -> int:
        """The fleet's KV pool in request characters: what smg's approximate tree can usefully remember."""
        return self.replicas * self.cache_blocks * SIM_BLOCK_TOKENS * 4


# -- processes -----------------------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def http_get(url: str, timeout: float = 2.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return int(resp.status), resp.read().decode()
    except urllib.error.HTTPError as e:
        return int(e.code), ""
    except OSError:
        return 0, ""


def wait_until_ok(url: str, timeout: float, check: str | None = None) -> None:
    deadline = time.monotonic() + timeout
    while True:
        status, body = http_get(url)
        if status == 200 and (check is None or check in body):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{url} not ready within {timeout:.0f}s (last status {status})")
        time.sleep(0.1)


class Procs:
    """The processes of one run; each is stopped through its own handle."""

    def __init__(self, logdir: Path) -> None:
        self.logdir = logdir
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, name: str, cmd: list[str], env: dict[str, str] | None = None) -> None:
        log = (self.logdir / f"{name}.log").open("wb")
        self.procs.append(
            subprocess.Popen(cmd, env={**os.environ, **(env or {})}, stdout=log, stderr=subprocess.STDOUT)
        )
        log.close()

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.procs.clear()


def start_sims(procs: Procs, setup: Setup, count: int, cache_blocks: int, max_running: int) -> list[str]:
    urls = []
    for i in range(count):
        port = free_port()
        procs.start(
            f"sim-{i}",
            [sys.executable, "-m", "sglang_sim", "--model-path", "org/model", "--served-model-name", MODEL,
             "--host", "127.0.0.1", "--port", str(port), "--enable-metrics",
             "--max-running-requests", str(max_running), "--max-total-tokens", str(cache_blocks * SIM_BLOCK_TOKENS)],
            setup.sim_env(),
        )  # fmt: skip
        urls.append(f"http://127.0.0.1:{port}")
    for url in urls:
        wait_until_ok(f"{url}/ready", timeout=60)
    return urls


def operator_router_flags() -> list[str]:
    """`smg launch` flags exactly as the operator renders them for a default spec (minus the program words)."""
    spec = SGLangDeploymentSpec.model_validate({"model": {"path": "org/model"}})
    return list(router_command(spec))[2:]


def router_argv(port: int, metrics_port: int, workers: Sequence[str], policy_flags: Sequence[str]) -> list[str]:
    flags = operator_router_flags()
    local = {"--host": "127.0.0.1", "--port": str(port), "--prometheus-host": "127.0.0.1",
             "--prometheus-port": str(metrics_port)}  # fmt: skip
    for i, flag in enumerate(flags[:-1]):
        if flag in local:
            flags[i + 1] = local[flag]
    smg = str(SMG) if SMG.exists() else "smg"
    return [smg, "launch", *flags, "--worker-urls", *workers, "--log-level", "warn",
            "--shutdown-grace-period-secs", "1", *policy_flags]  # fmt: skip


def served(worker: str) -> int:
    """Requests a simulator finished, from its /metrics (its own warm-up included: the caller takes a difference)."""
    status, text = http_get(f"{worker}/metrics", timeout=5)
    if status != 200:
        raise RuntimeError(f"{worker}/metrics answered {status}")
    lines = (line for line in text.splitlines() if line.startswith("sglang:num_requests_total{"))
    return round(sum(float(line.rsplit(" ", 1)[1]) for line in lines))


# -- replay --------------------------------------------------------------------------------------------------
async def _one(
    session: aiohttp.ClientSession, url: str, index: int, req: TraceRequest, sticky: bool, timeout: float
) -> Outcome:
    params = {"max_new_tokens": sim_output_tokens(req.output_tokens), "ignore_eos": True}
    body = {"text": prompt_text(req.blocks), "stream": True, "sampling_params": params}
    headers = {SESSION_HEADER: req.session} if sticky else {}
    t0 = time.monotonic()
    ttft: float | None = None
    cached = 0
    try:
        async with session.post(f"{url}/generate", json=body, headers=headers,
                                timeout=aiohttp.ClientTimeout(total=timeout)) as resp:  # fmt: skip
            if resp.status != 200:
                return Outcome(index, False, None, 0)
            async for raw in resp.content:
                line = raw.strip()
                if not line.startswith(b"data:") or line == b"data: [DONE]":
                    continue
                if ttft is None:
                    ttft = time.monotonic() - t0
                chunk = json.loads(line[5:])
                cached = int(chunk.get("meta_info", {}).get("cached_tokens", cached))
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return Outcome(index, False, ttft, cached)
    return Outcome(index, ttft is not None, ttft, cached)


async def replay(url: str, trace: Sequence[TraceRequest], setup: Setup, sticky: bool) -> list[Outcome]:
    """Send every request at its scaled arrival time; stop sending at --max-seconds, wait for the rest."""
    t_first = trace[0].t if trace else 0.0
    wall = setup.time_scale / setup.rate_scale
    per_request = max(30.0, setup.max_seconds / 4)
    conn = aiohttp.TCPConnector(limit=0, force_close=False)
    async with aiohttp.ClientSession(connector=conn) as session:
        start = time.monotonic()
        tasks: list[asyncio.Task[Outcome]] = []
        for i, req in enumerate(trace):
            at = (req.t - t_first) * wall
            if at > setup.max_seconds:
                break
            delay = start + at - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(_one(session, url, i, req, sticky, per_request)))
        return list(await asyncio.gather(*tasks))


# -- runs ----------------------------------------------------------------------------------------------------
@contextlib.contextmanager
def running(logdir: Path) -> Iterator[Procs]:
    procs = Procs(logdir)
    try:
        yield procs
    finally:
        procs.stop()


def run_policy(name: str, trace: Sequence[TraceRequest], setup: Setup, logdir: Path) -> PolicyResult:
    flags = POLICIES[name].replace("{tree}", str(setup.tree_chars)).split()
    with running(logdir / name) as procs:
        (logdir / name).mkdir(parents=True, exist_ok=True)
        workers = start_sims(procs, setup, setup.replicas, setup.cache_blocks, setup.max_running)
        port, metrics_port = free_port(), free_port()
        procs.start("smg", router_argv(port, metrics_port, workers, flags))
        router = f"http://127.0.0.1:{port}"
        wait_until_ok(f"{router}/readiness", timeout=60, check=f'"healthy_workers":{setup.replicas}')
        before = [served(w) for w in workers]
        outcomes = asyncio.run(replay(router, trace, setup, sticky="--sticky-sessions" in flags))
        per_replica = [served(w) - b for w, b in zip(workers, before, strict=True)]
        _, metrics = http_get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5)
    return summarize(trace, outcomes, per_replica, setup.time_scale, router_counters(metrics))


def run_ceiling(trace: Sequence[TraceRequest], setup: Setup, logdir: Path) -> PolicyResult:
    """One replica with the fleet's cache and slots, fed directly (no router)."""
    (logdir / "ceiling").mkdir(parents=True, exist_ok=True)
    with running(logdir / "ceiling") as procs:
        n = setup.replicas
        (worker,) = start_sims(procs, setup, 1, setup.cache_blocks * n, setup.max_running * n)
        before = served(worker)
        outcomes = asyncio.run(replay(worker, trace, setup, sticky=False))
        return summarize(trace, outcomes, [served(worker) - before], setup.time_scale)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trace", type=Path, default=DEFAULT_TRACE, help="Mooncake JSONL (hash_ids) or Azure CSV")
    p.add_argument("--policies", default=",".join(DEFAULT_POLICIES), help=f"comma-separated, of: {', '.join(POLICIES)}")
    p.add_argument("--sample", type=int, default=4, help="keep one prefix family in K (default 4)")
    p.add_argument("--pick", type=int, default=0, help="which family residue to keep (default 0)")
    p.add_argument("--limit", type=int, default=2000, help="at most this many requests per run (default 2000)")
    p.add_argument("--replicas", type=int, default=4)
    p.add_argument("--cache-blocks", type=int, default=1000, help="prefix cache per replica, in 512-token blocks")
    p.add_argument("--max-running", type=int, default=8, help="running requests per replica (default 8)")
    p.add_argument("--prefill-tps", type=float, default=20000.0, help="prefill tokens/s per request (trace tokens)")
    p.add_argument("--decode-tps", type=float, default=100.0, help="decode tokens/s per request")
    p.add_argument("--rate-scale", type=float, default=6.0, help="arrivals this many times faster (more load)")
    p.add_argument("--time-scale", type=float, default=0.5, help="wall seconds per simulated second")
    p.add_argument("--max-seconds", type=float, default=240.0, help="wall seconds of sending per run (default 240)")
    p.add_argument("--no-ceiling", action="store_true", help="skip the one-replica run (the direct count stays)")
    p.add_argument("--json", action="store_true", help="print JSON instead of the table")
    args = p.parse_args(argv)

    names = [n.strip() for n in args.policies.split(",") if n.strip()]
    unknown = [n for n in names if n not in POLICIES]
    if unknown:
        p.error(f"unknown policies {unknown}; known: {', '.join(POLICIES)}")
    trace = sample_families(load_trace(args.trace), args.sample, args.pick)[: args.limit]
    if not trace:
        p.error("no requests left after sampling")
    setup = Setup(args.replicas, args.cache_blocks, args.max_running, args.prefill_tps, args.decode_tps,
                  args.time_scale, args.rate_scale, args.max_seconds)  # fmt: skip
    direct = {
        "one_replica": direct_lru_hit_rate(trace, setup.cache_blocks),
        "ceiling": direct_lru_hit_rate(trace, setup.cache_blocks * setup.replicas),
        "unbounded": direct_lru_hit_rate(trace, sum(len(r.blocks) for r in trace)),
    }
    results: dict[str, PolicyResult] = {}
    with tempfile.TemporaryDirectory(prefix="routing-bench-") as tmp:
        logdir = Path(tmp)
        for name in names:
            print(f"[routing] {name} ...", file=sys.stderr, flush=True)
            results[name] = run_policy(name, trace, setup, logdir)
        ceiling = None if args.no_ceiling else run_ceiling(trace, setup, logdir)
    ceiling_hit = ceiling.hit_rate if ceiling is not None else direct["ceiling"]
    if args.json:
        out = {
            "policies": {k: v.public() for k, v in results.items()},
            "ceiling": {"hit_rate": round(ceiling_hit, 4), "direct_count": round(direct["ceiling"], 4),
                        **({} if ceiling is None else {"run": ceiling.public()})},
            "direct_count": {k: round(v, 4) for k, v in direct.items()},
            "setup": {**vars(setup), "requests": len(trace), "trace": str(args.trace), "sample": args.sample,
                      "pick": args.pick, "block_tokens": SIM_BLOCK_TOKENS, "trace_tokens_per_sim_token": SCALE},
        }  # fmt: skip
        print(json.dumps(out, indent=2))
    else:
        print(f"{len(trace)} requests, {setup.replicas} replicas x {setup.cache_blocks} blocks of cache, "
              f"{setup.max_running} slots; direct count: one replica {direct['one_replica']:.3f}, "
              f"ceiling {direct['ceiling']:.3f}, unbounded {direct['unbounded']:.3f}")  # fmt: skip
        print(render_table(results, ceiling_hit))
    return 0


if __name__ == "__main__":
    sys.exit(main())
