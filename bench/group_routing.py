"""Worker-group routing benchmark: does the real smg router share load in proportion to capacity (issue #19)?

    .venv/bin/python bench/group_routing.py [--variants round_robin,least_load,...] [--levels 0.5,0.8,1.2] [--json]

One fleet of unequal replicas on 127.0.0.1, no Kubernetes: by default group A = one tp=4 replica, group B = two
tp=2 replicas, simulator replicas (`python -m sglang_sim`) with SGLANG_SIM_SLOTS_PER_GPU=4, so they run
16, 8 and 8 requests at once (32 slots, capacity shares 1/2, 1/4, 1/4), and a KV pool that grows with the TP group
(`--max-total-tokens`, sized so a full replica's token usage is --kv-fill). For each variant (a policy and its
flags, plus what is sent at registration): fresh replicas and a fresh `smg launch` with the flags the operator
renders (`render/router.py`) and the variant's; workers are registered the operator's way, `POST /workers`.

Load: closed-loop clients (level x 32 of them: 50 % of the slots is 16 clients, 120 % is 38), each sending
non-streaming `/generate` requests with a unique prompt and an output length drawn around --output-tokens, one
after the other, for --seconds (and at most --max-requests per level). Levels run one after the other on the same
fleet, with a pause between them. Counted per replica: requests finished during the level after a warm-up (each
simulator's own `sglang:num_requests_total`, which health probes do not touch), their share, and the deviation
from the capacity share, |share - capacity| / capacity; the verdict is the largest deviation over replicas.

Time is compressed by --time-scale (every simulated duration x this) and smg's load monitor interval with it (the
operator renders `--load-monitor-interval`; it becomes that x time-scale, but smg takes whole seconds, at least 1:
at the default 0.5 the operator's 1 s poll stays 1 s, i.e. a 2 s poll at full scale). Latencies are reported in
simulated seconds. Bounded: a time limit and a request budget
per level, a timeout on every wait and request; every process started here is stopped, by its own handle.

--sample-loads adds, per level after the warm-up, what takes a share off capacity: the fraction of 20 Hz samples in
which a replica had a free slot while another had a waiting request (each replica's `/v1/loads`), and the mean number
of workers smg had flagged overloaded (`smg_workers_overloaded`, left out of routing until the next load poll). The
local cluster's share measure (e2e/tests/test_worker_groups.py) is `--levels 1.2 --output-tokens 80 --decode-tps 40
--time-scale 1 --prompt-tokens 18 --kv-fill 0.002` (docs/worker-groups-routing.md, "On the local cluster").
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import re
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import aiohttp
from routing import Procs, free_port, http_get, operator_router_flags, router_argv, running, served, wait_until_ok

MODEL = "sim-model"
CHARS_PER_TOKEN = 4  # sglang_sim/tokens.py


@dataclass(frozen=True)
class Replica:
    group: str
    tp: int


DEFAULT_FLEET = (Replica("a", 4), Replica("b", 2), Replica("b", 2))


@dataclass(frozen=True)
class Variant:
    flags: tuple[str, ...]
    registration: str = "post"  # "post": {"url"}; "capacity": + priority and cost from the replica's slots;
    # "launch": `--worker-urls` at start instead of POST /workers (power_of_two refuses to start with fewer than 2)
    note: str = ""


# Variant name -> policy flags (appended after the operator's rendered command: argparse, last wins) and the
# registration body. smg 1.13.0 source (docs/worker-groups-routing.md): priority and cost are stored, never read by
# a policy; "capacity" registration is here to show that on the wire.
VARIANTS: dict[str, Variant] = {
    "round_robin": Variant(("--policy", "round_robin")),
    "random": Variant(("--policy", "random")),
    "power_of_two": Variant(
        ("--policy", "power_of_two"), "launch", note="--power-of-two-load-metric expected_wait (default)"
    ),
    "power_of_two_requests": Variant(("--policy", "power_of_two", "--power-of-two-load-metric", "requests"), "launch"),
    "power_of_two_least_requests": Variant(
        ("--policy", "power_of_two", "--power-of-two-load-metric", "least_requests"), "launch"
    ),
    "cache_aware": Variant(("--policy", "cache_aware"), note="the operator's default; 64 / 1.5"),
    "cache_aware_spill": Variant(
        ("--policy", "cache_aware", "--balance-abs-threshold", "1", "--balance-rel-threshold", "1.1"),
        note="balance thresholds tuned to spill early",
    ),
    "least_load": Variant(("--policy", "least_load")),
    "cache_aware_capacity_reg": Variant(
        ("--policy", "cache_aware"), "capacity", note="POST /workers with priority = slots, cost = 32 / slots"
    ),
    "round_robin_capacity_reg": Variant(
        ("--policy", "round_robin"), "capacity", note="POST /workers with priority = slots, cost = 32 / slots"
    ),
    "round_robin_overload1": Variant(
        ("--policy", "round_robin", "--worker-overload-waiting-requests", "1"),
        note="a worker with any queued request is left out (default 8)",
    ),
    "least_load_overload1": Variant(("--policy", "least_load", "--worker-overload-waiting-requests", "1")),
    "cache_aware_overload1": Variant(("--policy", "cache_aware", "--worker-overload-waiting-requests", "1")),
    "cache_aware_overload_off": Variant(
        ("--policy", "cache_aware", "--disable-worker-overload-protection"),
        note="no overload veto: a worker is never left out for its last report's queue",
    ),
}
DEFAULT_VARIANTS = tuple(VARIANTS)


@dataclass(frozen=True)
class Setup:
    fleet: tuple[Replica, ...]
    slots_per_gpu: int
    levels: tuple[float, ...]
    seconds: float  # wall seconds of sending per level
    warmup: float  # wall seconds at the start of a level not counted
    max_requests: int  # per level
    prompt_tokens: int
    output_tokens: int  # mean; each request draws uniformly from [0.5, 1.5] x this
    decode_tps: float  # per request, simulated
    time_scale: float
    kv_fill: float  # token usage of a replica with every slot running a mean request
    seed: int
    rendered_monitor_interval: int  # the operator's `--load-monitor-interval` (smg's default: 10)
    sample_loads: bool = False  # sample every replica's /v1/loads and smg's overload gauge at 20 Hz

    def slots(self, replica: Replica) -> int:
        return self.slots_per_gpu * replica.tp

    @property
    def total_slots(self) -> int:
        return sum(self.slots(r) for r in self.fleet)

    def capacity_shares(self) -> list[float]:
        return [self.slots(r) / self.total_slots for r in self.fleet]

    def kv_tokens(self, replica: Replica) -> int:
        return math.ceil(self.slots(replica) * (self.prompt_tokens + self.output_tokens) / self.kv_fill)

    @property
    def monitor_interval(self) -> int:
        """The operator's load poll interval in compressed time; smg takes whole seconds, at least 1."""
        return max(1, round(self.rendered_monitor_interval * self.time_scale))

    def sim_env(self) -> dict[str, str]:
        return {
            "SGLANG_SIM_STARTUP_SECONDS": "0",
            "SGLANG_SIM_SLOTS_PER_GPU": str(self.slots_per_gpu),
            "SGLANG_SIM_TIME_SCALE": repr(self.time_scale),
            "SGLANG_SIM_DECODE_TOKENS_PER_S": repr(self.decode_tps),
        }


# -- pure arithmetic ----------------------------------------------------------------------------------------------
def shares(counts: Sequence[int]) -> list[float]:
    total = sum(counts)
    return [c / total if total else 0.0 for c in counts]


def deviations(observed: Sequence[float], capacity: Sequence[float]) -> list[float]:
    """|observed - capacity| / capacity per replica: 0.2 is the issue's bound."""
    return [abs(o - c) / c for o, c in zip(observed, capacity, strict=True)]


@dataclass
class LevelResult:
    level: float
    clients: int
    counts: list[int]
    shares: list[float]
    max_deviation: float
    failed: int
    latency_p50_s: float | None  # simulated seconds
    latency_p99_s: float | None
    # With --sample-loads (after the warm-up): per replica, the fraction of samples in which it had a free slot while
    # another replica had a waiting request (capacity idle beside a queue: what takes a share off capacity), and the
    # mean number of workers smg had flagged overloaded (left out of routing until the next load poll).
    free_beside_queue: list[float] | None = None
    mean_overloaded: float | None = None


@dataclass
class VariantResult:
    variant: str
    flags: list[str]
    registration: str
    levels: list[LevelResult] = field(default_factory=list)
    error: str | None = None


# -- processes ----------------------------------------------------------------------------------------------------
def start_fleet(procs: Procs, setup: Setup) -> list[str]:
    urls = []
    for i, replica in enumerate(setup.fleet):
        port = free_port()
        procs.start(
            f"sim-{i}-{replica.group}-tp{replica.tp}",
            [sys.executable, "-m", "sglang_sim", "--model-path", "org/model", "--served-model-name", MODEL,
             "--tp-size", str(replica.tp), "--host", "127.0.0.1", "--port", str(port), "--enable-metrics",
             "--max-total-tokens", str(setup.kv_tokens(replica))],
            setup.sim_env(),
        )  # fmt: skip
        urls.append(f"http://127.0.0.1:{port}")
    for url in urls:
        wait_until_ok(f"{url}/ready", timeout=60)
    return urls


def registration_body(url: str, replica: Replica, setup: Setup, registration: str) -> dict[str, object]:
    body: dict[str, object] = {"url": url}
    if registration == "capacity":
        slots = setup.slots(replica)
        body |= {"priority": slots, "cost": setup.total_slots / slots}
    return body


def register(router: str, body: dict[str, object]) -> None:
    req = urllib.request.Request(
        f"{router}/workers", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        if resp.status not in (200, 201, 202):
            raise RuntimeError(f"POST /workers answered {resp.status}")


def registered_fields(router: str) -> list[dict[str, object]]:
    status, text = http_get(f"{router}/workers", timeout=5)
    if status != 200:
        return []
    return [
        {"url": w.get("url"), "priority": w.get("priority"), "cost": w.get("cost")}
        for w in json.loads(text).get("workers", [])
    ]


# -- load ---------------------------------------------------------------------------------------------------------
async def _client(
    session: aiohttp.ClientSession,
    router: str,
    setup: Setup,
    rng: random.Random,
    deadline: float,
    budget: list[int],
    latencies: list[float],
    failed: list[int],
) -> None:
    prompt_chars = setup.prompt_tokens * CHARS_PER_TOKEN
    while time.monotonic() < deadline and budget[0] > 0:
        budget[0] -= 1
        text = f"{rng.getrandbits(128):032x}"  # a unique head: no prefix is shared between requests
        text = (text * (prompt_chars // len(text) + 1))[:prompt_chars]
        out = max(1, round(setup.output_tokens * rng.uniform(0.5, 1.5)))
        body = {"text": text, "sampling_params": {"max_new_tokens": out, "ignore_eos": True}}
        t0 = time.monotonic()
        try:
            async with session.post(f"{router}/generate", json=body) as resp:
                await resp.read()
                ok = resp.status == 200
        except (aiohttp.ClientError, TimeoutError):
            ok = False
        if ok:
            latencies.append((time.monotonic() - t0) / setup.time_scale)
        else:
            failed[0] += 1


async def drive(router: str, setup: Setup, clients: int, seed: int) -> tuple[list[float], int]:
    per_request = 60.0 + 20 * setup.output_tokens / setup.decode_tps * setup.time_scale
    conn = aiohttp.TCPConnector(limit=0)
    latencies: list[float] = []
    failed = [0]
    budget = [setup.max_requests]
    deadline = time.monotonic() + setup.seconds
    async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=per_request)) as session:
        await asyncio.gather(
            *(
                _client(session, router, setup, random.Random(seed * 1000 + i), deadline, budget, latencies, failed)
                for i in range(clients)
            )
        )
    return latencies, failed[0]


def _percentile(xs: Sequence[float], q: float) -> float | None:
    if not xs:
        return None
    ordered = sorted(xs)
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]


class LoadSampler:
    """Samples each replica's running and waiting requests (`/v1/loads`) and smg's `smg_workers_overloaded` gauge
    every `interval` seconds on a thread of its own, from `start()` to `stop()`."""

    def __init__(self, workers: Sequence[str], slots: Sequence[int], metrics_url: str, interval: float = 0.05) -> None:
        self.workers, self.slots, self.metrics_url, self.interval = list(workers), list(slots), metrics_url, interval
        self.rows: list[list[tuple[int, int]]] = []
        self.overloaded: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            row = []
            for w in self.workers:
                status, text = http_get(f"{w}/v1/loads?include=core", timeout=1)
                if status != 200:
                    break
                load = json.loads(text)["loads"][0]
                row.append((int(load["num_running_reqs"]), int(load["num_waiting_reqs"])))
            if len(row) == len(self.workers):
                self.rows.append(row)
            status, text = http_get(self.metrics_url, timeout=1)
            gauges = re.findall(r"^smg_workers_overloaded(?:\{[^}]*\})? (\S+)$", text, re.M) if status == 200 else []
            self.overloaded.append(sum(float(g) for g in gauges))
            self._stop.wait(self.interval)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def free_beside_queue(self) -> list[float]:
        n = max(1, len(self.rows))
        out = []
        for i, slots in enumerate(self.slots):
            hits = sum(
                1 for row in self.rows if row[i][0] < slots and any(w > 0 for j, (_, w) in enumerate(row) if j != i)
            )
            out.append(round(hits / n, 3))
        return out

    def mean_overloaded(self) -> float:
        return round(sum(self.overloaded) / max(1, len(self.overloaded)), 2)


def run_level(
    router: str, workers: Sequence[str], setup: Setup, level: float, seed: int, metrics_url: str = ""
) -> LevelResult:
    clients = max(1, round(level * setup.total_slots))
    marks: list[list[int]] = []
    sampler = LoadSampler(workers, [setup.slots(r) for r in setup.fleet], metrics_url) if setup.sample_loads else None

    async def both() -> tuple[list[float], int]:
        task = asyncio.create_task(drive(router, setup, clients, seed))
        await asyncio.sleep(setup.warmup)
        marks.append([served(w) for w in workers])  # blocking but short: 3 local GETs
        if sampler is not None:
            sampler.start()
        return await task

    try:
        latencies, failed = asyncio.run(both())
    finally:
        if sampler is not None:
            sampler.stop()
    after = [served(w) for w in workers]
    counts = [a - b for a, b in zip(after, marks[0], strict=True)]
    observed = shares(counts)
    return LevelResult(
        level=level,
        clients=clients,
        counts=counts,
        shares=[round(s, 4) for s in observed],
        max_deviation=round(max(deviations(observed, setup.capacity_shares())), 4),
        failed=failed,
        latency_p50_s=None if not latencies else round(statistics.median(latencies), 3),
        latency_p99_s=None if not latencies else round(_percentile(latencies, 0.99) or 0.0, 3),
        free_beside_queue=None if sampler is None else sampler.free_beside_queue(),
        mean_overloaded=None if sampler is None else sampler.mean_overloaded(),
    )


def run_variant(name: str, setup: Setup, logdir: Path) -> VariantResult:
    variant = VARIANTS[name]
    flags = [*variant.flags, "--load-monitor-interval", str(setup.monitor_interval)]
    result = VariantResult(name, flags, variant.registration)
    (logdir / name).mkdir(parents=True, exist_ok=True)
    with running(logdir / name) as procs:
        workers = start_fleet(procs, setup)
        port, metrics_port = free_port(), free_port()
        launch = variant.registration == "launch"
        argv = router_argv(port, metrics_port, workers if launch else [], flags)
        if not launch:
            argv.remove("--worker-urls")  # registered below, as the operator does
        procs.start("smg", argv)
        router = f"http://127.0.0.1:{port}"
        try:
            wait_until_ok(f"{router}/health", timeout=60)
        except RuntimeError as exc:
            log = (logdir / name / "smg.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"{exc}; smg's log ends:\n{log}") from exc
        if not launch:
            for url, replica in zip(workers, setup.fleet, strict=True):
                register(router, registration_body(url, replica, setup, variant.registration))
        wait_until_ok(f"{router}/readiness", timeout=60, check=f'"healthy_workers":{len(workers)}')
        if variant.registration == "capacity":
            print(f"[group-routing] {name} registered: {registered_fields(router)}", file=sys.stderr, flush=True)
        for i, level in enumerate(setup.levels):
            if i:
                time.sleep(setup.monitor_interval + 0.5)  # the fleet idles; the load monitor sees it
            result.levels.append(
                run_level(router, workers, setup, level, setup.seed + i, f"http://127.0.0.1:{metrics_port}/metrics")
            )
            lv = result.levels[-1]
            sampled = (
                ""
                if lv.mean_overloaded is None
                else (f"; free slot beside a queue {lv.free_beside_queue}, workers overloaded {lv.mean_overloaded}")
            )
            print(f"[group-routing] {name} {level:.0%}: shares {lv.shares} max dev {lv.max_deviation:.2f}{sampled}",
                  file=sys.stderr, flush=True)  # fmt: skip
    return result


# -- output -------------------------------------------------------------------------------------------------------
def render_table(results: Sequence[VariantResult], setup: Setup) -> str:
    names = [f"{r.group}{i}:tp{r.tp}" for i, r in enumerate(setup.fleet)]
    cap = " / ".join(f"{s:.3f}" for s in setup.capacity_shares())
    sampled = setup.sample_loads
    extra_head = " free slot beside a queue | workers overloaded |" if sampled else ""
    lines = [
        f"capacity shares ({', '.join(names)}): {cap}; bound: max deviation <= 0.20",
        "",
        "| variant | load | clients | requests | shares | max deviation | within 20 % | latency p50 / p99 s | failed |"
        + extra_head,
        "|---|---|---|---|---|---|---|---|---|" + ("---|---|" if sampled else ""),
    ]
    for v in results:
        if v.error is not None:
            lines.append(f"| {v.variant} | - | - | - | failed: {v.error.splitlines()[0]} | - | - | - | - |")
        for lv in v.levels:
            shares_txt = " / ".join(f"{s:.3f}" for s in lv.shares)
            lat = "-" if lv.latency_p50_s is None else f"{lv.latency_p50_s:.2f} / {lv.latency_p99_s:.2f}"
            extra = ""
            if sampled:
                free = "-" if lv.free_beside_queue is None else " / ".join(f"{f:.2f}" for f in lv.free_beside_queue)
                extra = f" {free} | {'-' if lv.mean_overloaded is None else f'{lv.mean_overloaded:.2f}'} |"
            lines.append(
                f"| {v.variant} | {lv.level:.0%} | {lv.clients} | {sum(lv.counts)} | {shares_txt} | "
                f"{lv.max_deviation:.2f} | {'yes' if lv.max_deviation <= 0.2 else 'no'} | {lat} | {lv.failed} |" + extra
            )
    return "\n".join(lines)


def rendered_monitor_interval() -> int:
    flags = operator_router_flags()
    if "--load-monitor-interval" in flags:
        return int(flags[flags.index("--load-monitor-interval") + 1])
    return 10  # smg 1.13.0's default


def parse_fleet(text: str) -> tuple[Replica, ...]:
    """`a:4,b:2,b:2`: group:tp per replica."""
    out = []
    for item in text.split(","):
        group, _, tp = item.strip().partition(":")
        out.append(Replica(group, int(tp)))
    return tuple(out)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--variants", default=",".join(DEFAULT_VARIANTS), help=f"comma-separated, of: {', '.join(VARIANTS)}")
    p.add_argument("--fleet", default="a:4,b:2,b:2", help="group:tp per replica (default a:4,b:2,b:2)")
    p.add_argument("--slots-per-gpu", type=int, default=4)
    p.add_argument("--levels", default="0.5,0.8,1.2", help="closed-loop clients as fractions of the fleet's slots")
    p.add_argument("--seconds", type=float, default=24.0, help="wall seconds of sending per level (default 24)")
    p.add_argument("--warmup", type=float, default=-1.0, help="wall seconds not counted (default 2 load polls)")
    p.add_argument("--max-requests", type=int, default=4000, help="request budget per level (default 4000)")
    p.add_argument("--prompt-tokens", type=int, default=256)
    p.add_argument("--output-tokens", type=int, default=200, help="mean output length (default 200)")
    p.add_argument("--decode-tps", type=float, default=100.0, help="decode tokens/s per request, simulated")
    p.add_argument("--time-scale", type=float, default=0.5, help="wall seconds per simulated second (default 0.5)")
    p.add_argument("--kv-fill", type=float, default=0.6, help="token usage of a full replica (default 0.6)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument(
        "--sample-loads",
        action="store_true",
        help="sample each replica's /v1/loads and smg's overloaded-workers gauge at 20 Hz (adds columns)",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of the table")
    args = p.parse_args(argv)

    names = [n.strip() for n in args.variants.split(",") if n.strip()]
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        p.error(f"unknown variants {unknown}; known: {', '.join(VARIANTS)}")
    setup = Setup(
        fleet=parse_fleet(args.fleet),
        slots_per_gpu=args.slots_per_gpu,
        levels=tuple(float(x) for x in args.levels.split(",") if x.strip()),
        seconds=args.seconds,
        warmup=0.0,
        max_requests=args.max_requests,
        prompt_tokens=args.prompt_tokens,
        output_tokens=args.output_tokens,
        decode_tps=args.decode_tps,
        time_scale=args.time_scale,
        kv_fill=args.kv_fill,
        seed=args.seed,
        rendered_monitor_interval=rendered_monitor_interval(),
        sample_loads=args.sample_loads,
    )
    warmup = args.warmup if args.warmup >= 0 else min(2.0 * setup.monitor_interval, args.seconds / 4)
    setup = Setup(**{**asdict(setup), "fleet": setup.fleet, "warmup": warmup})
    results = []
    with tempfile.TemporaryDirectory(prefix="group-routing-") as tmp:
        for name in names:
            print(f"[group-routing] {name} ...", file=sys.stderr, flush=True)
            try:
                results.append(run_variant(name, setup, Path(tmp)))
            except (RuntimeError, OSError) as exc:  # one variant's failure is reported, the others still run
                print(f"[group-routing] {name} failed: {exc}", file=sys.stderr, flush=True)
                failed = VariantResult(name, list(VARIANTS[name].flags), VARIANTS[name].registration, error=str(exc))
                results.append(failed)
    if args.json:
        out = {
            "setup": {**asdict(setup), "capacity_shares": setup.capacity_shares(), "total_slots": setup.total_slots,
                      "monitor_interval_s": setup.monitor_interval},
            "variants": {r.variant: {"flags": r.flags, "registration": r.registration, "error": r.error,
                                     "levels": [asdict(lv) for lv in r.levels]} for r in results},
        }  # fmt: skip
        print(json.dumps(out, indent=2))
    else:
        print(render_table(results, setup))
    return 0


if __name__ == "__main__":
    sys.exit(main())
