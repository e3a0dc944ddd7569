"""Colocated vs prefill/decode (PD) at equal GPUs, on the simulator's model: one trace, replayed open-loop.

    .venv/bin/python bench/pd.py [--trace FILE] [--layouts colocated:4x1,pd:2x1+2x1,pd:1x2+2x1,pd:1x1+3x1] [--json]

What this measures is the SGLang simulator's model (`testing/sglang_sim`, docs/sim-pd.md), not a GPU: every number
follows from the knobs printed with the table. Per layout: fresh simulator processes (`python -m sglang_sim`) and a
fresh `smg launch` with the flags the operator renders for that fleet (`render/router.py`: regular mode for the
colocated fleet, `--pd-disaggregation` with its prefill/decode policies for a PD fleet), all on 127.0.0.1. Workers
are registered the operator's way (`RouterClient.add_worker`: `POST /workers`, with `worker_type` and, for a
prefill, its `bootstrap_port` once that port answers; each prefill process has a free port of its own). The flags
of each server are the ones the operator renders for its role (`--disaggregation-mode`, `--disaggregation-transfer-
backend mooncake_tcp`, `--disaggregation-bootstrap-port`, `--tp-size`).

Layouts: `colocated:NxT` (N replicas of tp T) and `pd:PxT+DxU` (P prefill replicas of tp T, D decode replicas of
tp U); every layout must use as many GPUs as the first one.

The trace (Mooncake JSONL or Azure CSV, `routing_model.load_trace`): the requests of its first --trace-seconds,
arrivals compressed by --rate-scale, each sent at its time as a streaming native `/generate` with its output length
(`max_new_tokens`, `ignore_eos`). A prompt of n trace tokens is ceil(n / 32) simulator tokens of text built from the
request's 512-token block ids (`routing_model.prompt_text`: equal leading ids give equal leading text, so a trace's
shared prefixes reach the prefix caches and the router's tree as they would); the prefill rate is divided and the KV
bytes per token multiplied by the same 32, so prefill and KV-transfer times are the trace's. Output lengths are not
scaled: every output token is streamed, so inter-token latency is measured at the decode rate itself.

Measured per request at the client (wall clock, divided by the time scale into simulated seconds): TTFT = first
streamed chunk; ITL = (last chunk - first chunk) / (tokens between them), the request's mean inter-token latency
(requests of one output token have none). Reported: mean, p50, p90 and p99 of both, output tokens/s (completed requests'
output tokens over the simulated time from the first send to the last answer) and per GPU, the prefix-cache hit rate
of the servers that prefill (from their `sglang:cached_tokens_total` / `sglang:prompt_tokens_total`), requests each
server counted, and every ratio against the first layout. The load average is printed with each run: the
processes share the machine's cores with whatever else runs, and scheduling delay shows up as latency.

Bounded: --trace-seconds and --limit requests per run, --max-seconds of sending per run, a timeout on every request
and wait; every process started here is stopped by its own handle at the end of its run, also on error.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from routing import Procs, free_port, http_get, running, wait_until_ok  # bench/ is this script's folder
from routing_model import SCALE, TraceRequest, load_trace, percentile, prompt_text

from sglang_operator.api.spec import SGLangDeploymentSpec
from sglang_operator.render.router import router_command
from sglang_operator.router.client import RouterClient

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TRACE = REPO.parent / "shared" / "traces" / "mooncake_synthetic_trace.jsonl"
SMG = Path(sys.executable).parent / "smg"
MODEL = "sim-model"
CHARS_PER_TOKEN = 4  # sglang_sim/tokens.py
TRANSFER_BACKEND = "mooncake_tcp"  # examples/pd-small.yaml: KV over TCP, no RDMA device
DEFAULT_LAYOUTS = "colocated:4x1,pd:2x1+2x1,pd:1x2+2x1,pd:1x1+3x1"


# -- layouts and the model (pure) -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Layout:
    """A fleet: colocated replicas (`regular`) or prefill and decode replicas, each a tp size."""

    text: str
    regular: tuple[int, ...] = ()
    prefill: tuple[int, ...] = ()
    decode: tuple[int, ...] = ()

    @property
    def pd(self) -> bool:
        return bool(self.prefill)

    @property
    def gpus(self) -> int:
        return sum(self.regular) + sum(self.prefill) + sum(self.decode)


def _replicas(part: str, text: str) -> tuple[int, ...]:
    count, sep, tp = part.strip().partition("x")
    if not sep or not count.isdigit() or not tp.isdigit() or int(count) < 1 or int(tp) < 1:
        raise ValueError(f"layout {text!r}: {part!r} is not COUNTxTP (e.g. 2x1)")
    return (int(tp),) * int(count)


def parse_layout(text: str) -> Layout:
    """`colocated:4x1` or `pd:1x2+2x1` (prefill first, then decode)."""
    kind, _, rest = text.strip().partition(":")
    if kind == "colocated":
        return Layout(text.strip(), regular=_replicas(rest, text))
    if kind == "pd":
        parts = rest.split("+")
        if len(parts) != 2:
            raise ValueError(f"layout {text!r}: a PD layout is pd:PREFILL+DECODE, e.g. pd:1x2+2x1")
        return Layout(text.strip(), prefill=_replicas(parts[0], text), decode=_replicas(parts[1], text))
    raise ValueError(f"layout {text!r}: starts with colocated: or pd:")


def parse_layouts(text: str) -> list[Layout]:
    layouts = [parse_layout(t) for t in text.split(",") if t.strip()]
    if not layouts:
        raise ValueError("no layout given")
    if len({lay.gpus for lay in layouts}) != 1:
        raise ValueError(f"layouts use different GPU counts: {', '.join(f'{x.text}={x.gpus}' for x in layouts)}")
    return layouts


@dataclass(frozen=True)
class Model:
    """The simulator's parameters for every server of a run (trace units; the environment gets them in simulator
    tokens: one simulator token stands for SCALE = 32 prompt tokens)."""

    prefill_tps: float = 20000.0  # prompt tokens/s of one request's prefill (SGLANG_SIM_PREFILL_TOKENS_PER_S)
    decode_tps: float = 100.0  # output tokens/s of one request (SGLANG_SIM_DECODE_TOKENS_PER_S): ITL 10 ms
    kv_bytes_per_token: float = 131072.0  # SGLANG_SIM_KV_BYTES_PER_TOKEN: 8B-class model, bf16
    kv_transfer_gbps: float = 25.0  # SGLANG_SIM_KV_TRANSFER_GBPS: GB/s of one transfer
    slots_per_gpu: int = 8  # SGLANG_SIM_SLOTS_PER_GPU: running requests per replica = this x tp
    kv_gib_per_gpu: float = 60.0  # KV pool (and prefix cache) per GPU: --max-total-tokens = tp x this / bytes
    time_scale: float = 0.5  # SGLANG_SIM_TIME_SCALE: wall seconds per simulated second
    version: str = "0.5.23"  # SGLANG_SIM_VERSION
    # --disaggregation-decode-extra-slots of decode servers (0.5.14+): request slots for requests still receiving
    # KV, beyond the running ones; None: the release's default (0.5.14+: none without --max-running-requests)
    decode_extra_slots: int | None = None

    def env(self) -> dict[str, str]:
        return {
            "SGLANG_SIM_VERSION": self.version,
            "SGLANG_SIM_STARTUP_SECONDS": "0",
            "SGLANG_SIM_TIME_SCALE": repr(self.time_scale),
            "SGLANG_SIM_PREFILL_TOKENS_PER_S": repr(self.prefill_tps / SCALE),
            "SGLANG_SIM_DECODE_TOKENS_PER_S": repr(self.decode_tps),
            "SGLANG_SIM_KV_BYTES_PER_TOKEN": repr(self.kv_bytes_per_token * SCALE),
            "SGLANG_SIM_KV_TRANSFER_GBPS": repr(self.kv_transfer_gbps),
            "SGLANG_SIM_SLOTS_PER_GPU": str(self.slots_per_gpu),
        }

    def kv_pool_tokens(self, tp: int) -> int:
        """--max-total-tokens of a replica, in simulator tokens."""
        return max(1, int(tp * self.kv_gib_per_gpu * 2**30 / self.kv_bytes_per_token / SCALE))

    def prefill_s(self, prompt_tokens: int) -> float:
        return prompt_tokens / self.prefill_tps

    def transfer_s(self, prompt_tokens: int) -> float:
        return prompt_tokens * self.kv_bytes_per_token / (self.kv_transfer_gbps * 1e9)

    def decode_s(self, output_tokens: int) -> float:
        return max(0, output_tokens - 1) / self.decode_tps


def sim_prompt_tokens(trace_tokens: int) -> int:
    return max(1, math.ceil(trace_tokens / SCALE))


def request_text(req: TraceRequest) -> str:
    """ceil(n / 32) simulator tokens of the request's block text (the last block cut to the prompt's length)."""
    return prompt_text(req.blocks)[: sim_prompt_tokens(req.input_tokens) * CHARS_PER_TOKEN]


def trace_window(trace: Sequence[TraceRequest], seconds: float, limit: int) -> list[TraceRequest]:
    if not trace:
        return []
    t0 = trace[0].t
    return [r for r in trace if r.t - t0 < seconds][:limit]


# -- outcomes and the summary (pure) --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Outcome:
    """One request as the client saw it, in wall seconds from the run's first send."""

    ok: bool
    sent: float
    ttft: float | None = None  # first chunk - sent
    itl: float | None = None  # mean seconds per token after the first chunk
    done: float | None = None  # last chunk
    output_tokens: int = 0
    error: str = ""


@dataclass(frozen=True)
class Quantiles:
    mean: float | None
    p50: float | None
    p90: float | None
    p99: float | None

    @staticmethod
    def of(values: Sequence[float]) -> Quantiles:
        mean = sum(values) / len(values) if values else None
        return Quantiles(mean, percentile(values, 0.5), percentile(values, 0.9), percentile(values, 0.99))


@dataclass(frozen=True)
class LayoutResult:
    layout: str
    gpus: int
    requests: int
    failed: int
    ttft_s: Quantiles  # simulated seconds
    itl_ms: Quantiles  # simulated milliseconds
    output_tokens_per_s: float  # simulated
    output_tokens_per_s_per_gpu: float
    span_s: float  # simulated seconds from the first send to the last answer
    hit_rate: float | None = None  # cached / prompt tokens on the servers that prefill
    served: dict[str, list[int]] = field(default_factory=dict)  # role -> requests each server counted
    load: tuple[float, float] = (0.0, 0.0)  # 1-minute load average at the start and the end of the run
    errors: tuple[str, ...] = ()  # the first few failures, as the client saw them


def summarize(
    layout: Layout,
    outcomes: Sequence[Outcome],
    time_scale: float,
    hit_rate: float | None = None,
    served: dict[str, list[int]] | None = None,
    load: tuple[float, float] = (0.0, 0.0),
) -> LayoutResult:
    ok = [o for o in outcomes if o.ok]
    ttfts = [o.ttft / time_scale for o in ok if o.ttft is not None]
    itls = [o.itl / time_scale * 1000 for o in ok if o.itl is not None]
    ends = [o.done for o in ok if o.done is not None]
    span = (max(ends) - min(o.sent for o in outcomes)) / time_scale if ends else 0.0
    tokens = sum(o.output_tokens for o in ok)
    tps = tokens / span if span > 0 else 0.0
    return LayoutResult(
        layout=layout.text,
        gpus=layout.gpus,
        requests=len(outcomes),
        failed=len(outcomes) - len(ok),
        ttft_s=Quantiles.of(ttfts),
        itl_ms=Quantiles.of(itls),
        output_tokens_per_s=tps,
        output_tokens_per_s_per_gpu=tps / layout.gpus if layout.gpus else 0.0,
        span_s=span,
        hit_rate=hit_rate,
        served=served or {},
        load=load,
        errors=tuple(sorted({o.error for o in outcomes if o.error}))[:5],
    )


def ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


def _f(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


ROWS: tuple[tuple[str, str, str], ...] = (
    # (label, attribute path, format); ratios are against the first layout
    ("TTFT mean s", "ttft_s.mean", ".3f"),
    ("TTFT p50 s", "ttft_s.p50", ".3f"),
    ("TTFT p90 s", "ttft_s.p90", ".3f"),
    ("TTFT p99 s", "ttft_s.p99", ".3f"),
    ("ITL mean ms", "itl_ms.mean", ".2f"),
    ("ITL p50 ms", "itl_ms.p50", ".2f"),
    ("ITL p90 ms", "itl_ms.p90", ".2f"),
    ("ITL p99 ms", "itl_ms.p99", ".2f"),
    ("output tokens/s", "output_tokens_per_s", ".0f"),
    ("output tokens/s per GPU", "output_tokens_per_s_per_gpu", ".1f"),
    ("prefix-cache hit rate (prefilling servers)", "hit_rate", ".3f"),
)


def value(r: LayoutResult, path: str) -> float | None:
    obj: Any = r
    for part in path.split("."):
        obj = getattr(obj, part)
    return None if obj is None else float(obj)


def render_table(results: Sequence[LayoutResult]) -> str:
    """Markdown: one row per measure, one column per layout, then each later layout's ratio to the first."""
    base = results[0]
    head = [
        "measure (simulated time)",
        *(r.layout for r in results),
        *(f"{r.layout} / {base.layout}" for r in results[1:]),
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label, path, spec in ROWS:
        cells = [_f(value(r, path), spec) for r in results]
        cells += [_f(ratio(value(r, path), value(base, path)), ".2f") for r in results[1:]]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines.append("| GPUs | " + " | ".join(str(r.gpus) for r in results) + " |" + " |" * (len(results) - 1))
    lines.append(
        "| requests (failed) | " + " | ".join(f"{r.requests} ({r.failed})" for r in results) + " |"
        + " |" * (len(results) - 1)
    )  # fmt: skip
    return "\n".join(lines)


def describe(model: Model, trace: Sequence[TraceRequest], rate_scale: float) -> list[str]:
    """The model's parameters and what they mean for this trace window (means over its requests)."""
    n = len(trace)
    span = (trace[-1].t - trace[0].t) / rate_scale if n > 1 else 0.0
    mean_in = sum(r.input_tokens for r in trace) / n if n else 0.0
    prompts = Quantiles.of([float(r.input_tokens) for r in trace])
    mean_out = sum(r.output_tokens for r in trace) / n if n else 0.0
    return [
        "The simulator's model (testing/sglang_sim, docs/sim-pd.md), not a GPU measurement:",
        f"  SGLang {model.version} as simulated; prefill {model.prefill_tps:.0f} prompt tokens/s per request, "
        f"decode {model.decode_tps:.0f} tokens/s per request ({1000 / model.decode_tps:.1f} ms a token), "
        f"each request at its own rate (no batching slowdown, no prefill/decode interference)",
        f"  {model.slots_per_gpu} running requests per GPU (x tp per replica), KV pool and prefix cache "
        f"{model.kv_gib_per_gpu:g} GiB per GPU = {model.kv_pool_tokens(1) * SCALE} prompt tokens",
        f"  KV handoff {model.kv_bytes_per_token:.0f} bytes per prompt token over {model.kv_transfer_gbps:g} GB/s; "
        f"transfer backend {TRANSFER_BACKEND}; time scale {model.time_scale:g} wall s per simulated s",
        "  a decode server takes a request slot when the request arrives (preallocation) and holds it through the "
        "prefill, the transfer and the decode; extra slots for requests still receiving KV: "
        + (
            "the release's default (none without --max-running-requests)"
            if model.decode_extra_slots is None
            else f"{model.decode_extra_slots} per decode server (--disaggregation-decode-extra-slots)"
        ),
        f"  trace window: {n} requests over {span:.0f} simulated s ({n / span if span else 0:.2f} req/s), "
        f"prompt {mean_in:.0f} / output {mean_out:.0f} tokens on average (prompt p50 {_f(prompts.p50, '.0f')}, "
        f"p90 {_f(prompts.p90, '.0f')}); per request on average: "
        f"prefill {model.prefill_s(round(mean_in)):.3f} s, KV transfer {model.transfer_s(round(mean_in)):.3f} s, "
        f"decode {model.decode_s(round(mean_out)):.3f} s (before prefix-cache hits and queueing)",
    ]


# -- processes ------------------------------------------------------------------------------------------------------
def fleet_spec(layout: Layout, policy: str, prefill_policy: str | None, decode_policy: str | None) -> dict[str, Any]:
    """The SGLangDeployment spec of the layout, as a user would write it: what the operator renders the router from."""
    spec: dict[str, Any] = {"model": {"path": "org/model", "servedName": MODEL}, "router": {"policy": policy}}
    if layout.pd:
        groups = []
        for role, tps in (("prefill", layout.prefill), ("decode", layout.decode)):
            for tp in sorted(set(tps)):
                name = f"{role}-tp{tp}"
                groups.append({"name": name, "role": role, "replicas": tps.count(tp), "parallelism": {"tp": tp}})
        spec["disaggregation"] = {"transferBackend": TRANSFER_BACKEND}
        spec["workerGroups"] = groups
        if prefill_policy:
            spec["router"]["prefillPolicy"] = prefill_policy
        if decode_policy:
            spec["router"]["decodePolicy"] = decode_policy
    return spec


def router_argv(spec: dict[str, Any], port: int, metrics_port: int) -> list[str]:
    flags = list(router_command(SGLangDeploymentSpec.model_validate(spec)))[2:]
    local = {"--host": "127.0.0.1", "--port": str(port), "--prometheus-host": "127.0.0.1",
             "--prometheus-port": str(metrics_port)}  # fmt: skip
    for i, flag in enumerate(flags[:-1]):
        if flag in local:
            flags[i + 1] = local[flag]
    smg = str(SMG) if SMG.exists() else "smg"
    return [smg, "launch", *flags, "--log-level", "warn", "--shutdown-grace-period-secs", "1"]


@dataclass(frozen=True)
class Server:
    role: str  # regular, prefill or decode
    tp: int
    url: str
    bootstrap_port: int | None = None


def start_servers(procs: Procs, layout: Layout, model: Model) -> list[Server]:
    plan = [("regular", tp) for tp in layout.regular]
    plan += [("prefill", tp) for tp in layout.prefill] + [("decode", tp) for tp in layout.decode]
    servers = []
    for i, (role, tp) in enumerate(plan):
        port = free_port()
        argv = [sys.executable, "-m", "sglang_sim", "--model-path", "org/model", "--served-model-name", MODEL,
                "--tp-size", str(tp), "--host", "127.0.0.1", "--port", str(port), "--enable-metrics",
                "--max-total-tokens", str(model.kv_pool_tokens(tp))]  # fmt: skip
        bootstrap = None
        if role != "regular":
            argv += ["--disaggregation-mode", role, "--disaggregation-transfer-backend", TRANSFER_BACKEND]
        if role == "decode" and model.decode_extra_slots is not None:
            argv += ["--disaggregation-decode-extra-slots", str(model.decode_extra_slots)]
        if role == "prefill":
            bootstrap = free_port()
            argv += ["--disaggregation-bootstrap-port", str(bootstrap)]
        procs.start(f"{role}-{i}-tp{tp}", argv, model.env())
        servers.append(Server(role, tp, f"http://127.0.0.1:{port}", bootstrap))
    for s in servers:
        wait_until_ok(f"{s.url}/ready", timeout=60)
        if s.bootstrap_port is not None:  # the operator registers a prefill once its bootstrap port answers
            wait_until_ok(f"http://127.0.0.1:{s.bootstrap_port}/health", timeout=60)
    return servers


def register(router: str, servers: Sequence[Server]) -> None:
    """The operator's registration: its own client, `POST /workers` with the worker type and bootstrap port."""
    client = RouterClient(router, timeout=10)
    for s in servers:
        if s.role == "regular":
            client.add_worker(s.url)
        elif s.role == "prefill":
            client.add_worker(s.url, worker_type="prefill", bootstrap_port=s.bootstrap_port)
        else:
            client.add_worker(s.url, worker_type="decode")
    deadline = time.monotonic() + 60
    while len(client.list_workers()) < len(servers):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{router} lists fewer than {len(servers)} workers after 60 s")
        time.sleep(0.2)
    wait_until_ok(f"{router}/readiness", timeout=60)


def counters(url: str) -> dict[str, float]:
    """Totals of the simulator's request and token counters (summed over labels)."""
    status, text = http_get(f"{url}/metrics", timeout=5)
    if status != 200:
        raise RuntimeError(f"{url}/metrics answered {status}")
    names = ("sglang:num_requests_total", "sglang:prompt_tokens_total", "sglang:cached_tokens_total")
    out = dict.fromkeys(names, 0.0)
    for line in text.splitlines():
        name = line.partition("{")[0].partition(" ")[0]
        if name in out:
            out[name] += float(line.rsplit(" ", 1)[1])
    return out


# -- replay ---------------------------------------------------------------------------------------------------------
async def _one(session: aiohttp.ClientSession, router: str, req: TraceRequest, start: float, timeout: float) -> Outcome:
    params = {"max_new_tokens": max(1, req.output_tokens), "ignore_eos": True}
    body = {"text": request_text(req), "stream": True, "sampling_params": params}
    sent = time.monotonic() - start
    first: tuple[float, int] | None = None
    last: tuple[float, int] | None = None
    try:
        async with session.post(f"{router}/generate", json=body,
                                timeout=aiohttp.ClientTimeout(total=timeout)) as resp:  # fmt: skip
            if resp.status != 200:
                text = (await resp.text())[:200]
                return Outcome(False, sent, error=f"HTTP {resp.status}: {text}")
            async for raw in resp.content:
                line = raw.strip()
                if not line.startswith(b"data:") or line == b"data: [DONE]":
                    continue
                chunk = json.loads(line[5:])
                meta = chunk.get("meta_info", {})
                finish = meta.get("finish_reason")
                if isinstance(finish, dict) and finish.get("type") == "abort":
                    return Outcome(False, sent, error=f"abort: {str(finish.get('message'))[:200]}")
                if "error" in chunk:
                    return Outcome(False, sent, error=f"error: {str(chunk['error'])[:200]}")
                now = time.monotonic() - start
                tokens = int(meta.get("completion_tokens", 0))
                first = first or (now, tokens)
                last = (now, tokens)
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        return Outcome(False, sent, error=f"{type(exc).__name__}: {exc}"[:200])
    if first is None or last is None:
        return Outcome(False, sent, error="no chunk")
    between = last[1] - first[1]
    itl = (last[0] - first[0]) / between if between > 0 else None
    return Outcome(True, sent, first[0] - sent, itl, last[0], last[1])


async def replay(
    router: str, trace: Sequence[TraceRequest], wall_per_trace_s: float, max_seconds: float
) -> list[Outcome]:
    """Send every request at its scaled arrival time (open loop); stop sending at max_seconds, wait for the rest."""
    t0 = trace[0].t if trace else 0.0
    per_request = max(60.0, max_seconds)
    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=conn) as session:
        start = time.monotonic()
        tasks: list[asyncio.Task[Outcome]] = []
        for req in trace:
            at = (req.t - t0) * wall_per_trace_s
            if at > max_seconds:
                break
            delay = start + at - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(_one(session, router, req, start, per_request)))
        return list(await asyncio.gather(*tasks))


@dataclass(frozen=True)
class Run:
    model: Model
    rate_scale: float
    max_seconds: float
    policy: str
    prefill_policy: str | None
    decode_policy: str | None


def run_layout(layout: Layout, trace: Sequence[TraceRequest], run: Run, logdir: Path) -> LayoutResult:
    logdir.mkdir(parents=True, exist_ok=True)
    with running(logdir) as procs:
        servers = start_servers(procs, layout, run.model)
        port, metrics_port = free_port(), free_port()
        spec = fleet_spec(layout, run.policy, run.prefill_policy, run.decode_policy)
        procs.start("smg", router_argv(spec, port, metrics_port))
        router = f"http://127.0.0.1:{port}"
        try:
            wait_until_ok(f"{router}/health", timeout=60)
            register(router, servers)
        except RuntimeError as exc:
            tail = (logdir / "smg.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"{exc}; smg's log ends:\n{tail}") from exc
        before = {s.url: counters(s.url) for s in servers}
        load_start = os.getloadavg()[0]
        wall = run.model.time_scale / run.rate_scale
        outcomes = asyncio.run(replay(router, trace, wall, run.max_seconds))
        load_end = os.getloadavg()[0]
        after = {s.url: counters(s.url) for s in servers}
    delta = {u: {k: after[u][k] - before[u][k] for k in after[u]} for u in after}
    served: dict[str, list[int]] = {}
    for s in servers:
        served.setdefault(s.role, []).append(round(delta[s.url]["sglang:num_requests_total"]))
    prefilling = [s for s in servers if s.role != "decode"]
    prompt = sum(delta[s.url]["sglang:prompt_tokens_total"] for s in prefilling)
    cached = sum(delta[s.url]["sglang:cached_tokens_total"] for s in prefilling)
    return summarize(layout, outcomes, run.model.time_scale, cached / prompt if prompt else None, served,
                     (load_start, load_end))  # fmt: skip


def public(r: LayoutResult) -> dict[str, Any]:
    out = asdict(r)
    out["load"] = list(r.load)
    out["errors"] = list(r.errors)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    d = Model()
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trace", type=Path, default=DEFAULT_TRACE, help="Mooncake JSONL or Azure CSV")
    p.add_argument("--layouts", default=DEFAULT_LAYOUTS, help=f"comma-separated (default {DEFAULT_LAYOUTS})")
    p.add_argument("--trace-seconds", type=float, default=240.0, help="replay the trace's first N s (default 240)")
    p.add_argument("--limit", type=int, default=2000, help="at most this many requests per run (default 2000)")
    p.add_argument("--rate-scale", type=float, default=2.0, help="arrivals this many times faster (default 2)")
    p.add_argument("--max-seconds", type=float, default=180.0, help="wall seconds of sending per run (default 180)")
    p.add_argument("--prefill-tps", type=float, default=d.prefill_tps, help="prompt tokens/s per request")
    p.add_argument("--decode-tps", type=float, default=d.decode_tps, help="output tokens/s per request")
    p.add_argument("--kv-bytes-per-token", type=float, default=d.kv_bytes_per_token)
    p.add_argument("--kv-transfer-gbps", type=float, default=d.kv_transfer_gbps)
    p.add_argument("--slots-per-gpu", type=int, default=d.slots_per_gpu, help="running requests per GPU")
    p.add_argument("--kv-gib-per-gpu", type=float, default=d.kv_gib_per_gpu, help="KV pool per GPU, GiB")
    p.add_argument("--time-scale", type=float, default=d.time_scale, help="wall seconds per simulated second")
    p.add_argument("--sim-version", default=d.version, help="the SGLang release the simulator plays")
    p.add_argument("--decode-extra-slots", type=int, default=None, help="--disaggregation-decode-extra-slots (0.5.14+)")
    p.add_argument("--policy", default="cache_aware", help="router.policy of every fleet (default cache_aware)")
    p.add_argument("--prefill-policy", default="cache_aware", help="router.prefillPolicy (examples/pd-small.yaml)")
    p.add_argument("--decode-policy", default="least_load", help="router.decodePolicy (examples/pd-small.yaml)")
    p.add_argument("--json", action="store_true", help="print JSON instead of the table")
    args = p.parse_args(argv)

    try:
        layouts = parse_layouts(args.layouts)
    except ValueError as exc:
        p.error(str(exc))
    trace = trace_window(load_trace(args.trace), args.trace_seconds, args.limit)
    if not trace:
        p.error("no request in the trace window")
    model = Model(args.prefill_tps, args.decode_tps, args.kv_bytes_per_token, args.kv_transfer_gbps,
                  args.slots_per_gpu, args.kv_gib_per_gpu, args.time_scale, args.sim_version,
                  args.decode_extra_slots)  # fmt: skip
    run = Run(model, args.rate_scale, args.max_seconds, args.policy, args.prefill_policy, args.decode_policy)
    results = []
    with tempfile.TemporaryDirectory(prefix="pd-bench-") as tmp:
        for i, layout in enumerate(layouts):
            print(f"[pd] {layout.text} ...", file=sys.stderr, flush=True)
            results.append(run_layout(layout, trace, run, Path(tmp) / f"{i}"))
            r = results[-1]
            print(f"[pd] {layout.text}: {r.requests} requests, {r.failed} failed, served {r.served}, "
                  f"load {r.load[0]:.2f} -> {r.load[1]:.2f}", file=sys.stderr, flush=True)  # fmt: skip
    about = describe(model, trace, args.rate_scale)
    if args.json:
        out = {
            "model": {**asdict(model), "transfer_backend": TRANSFER_BACKEND, "trace_tokens_per_sim_token": SCALE,
                      "sim_env": model.env(), "kv_pool_sim_tokens_per_gpu": model.kv_pool_tokens(1)},
            "about": about,
            "run": {"trace": str(args.trace), "requests": len(trace), "rate_scale": args.rate_scale,
                    "trace_seconds": args.trace_seconds, "policy": args.policy,
                    "prefill_policy": args.prefill_policy, "decode_policy": args.decode_policy,
                    "cpus": os.cpu_count()},
            "layouts": [public(r) for r in results],
            "table": render_table(results),
        }  # fmt: skip
        print(json.dumps(out, indent=2))
    else:
        print("\n".join(about))
        print(f"  router: colocated --policy {args.policy}; PD --prefill-policy {args.prefill_policy} "
              f"--decode-policy {args.decode_policy}; {os.cpu_count()} CPUs, load average "
              + ", ".join(f"{r.layout} {r.load[0]:.1f}->{r.load[1]:.1f}" for r in results))  # fmt: skip
        print()
        print(render_table(results))
        for r in results:
            if r.errors:
                print(f"{r.layout}: first errors: {list(r.errors)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
