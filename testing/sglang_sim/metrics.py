"""Prometheus text exposition with SGLang's metric names, labels and buckets, plus dcgm-exporter's GPU gauge.

Written by hand (no prometheus_client) because the output must match what SGLang's multiprocess collector
emits, not what a fresh registry would: counters typed under their `_total` name, no `_created` samples,
label sets that appear only once touched, floats in Go's spelling (`1.0`, `+Inf`).

Label sets follow SGLang 0.5.23: request-side series carry {model_name, engine_type} (request counts and
latency histograms add is_streaming, cached tokens add cache_source); scheduler series carry
{model_name, engine_type, tp_rank, pp_rank, moe_ep_rank} and dp_rank when a DP controller runs (dp or
attention-DP > 1). Every DP rank is exported from the rank-0 process (the real server spreads attention-DP
ranks over nodes when multi-node; the sum over a replica is the same).
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from sglang_operator.api.releases import parse_version

from .args import ServerArgs
from .disagg import BOOTSTRAP_QUEUE_NAMES_SINCE, TRANSFER_HISTOGRAMS_SINCE, PdRankLoad
from .engine import RankLoad, Schedule

Labels = tuple[tuple[str, str], ...]

TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
E2E_BUCKETS = (*TTFT_BUCKETS, 600, 1200, 1800, 2400)
ITL_BUCKETS = (
    0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060, 0.080, 0.100,
    0.200, 0.400, 0.600, 0.800, 1.0, 2.0, 4.0, 6.0, 8.0,
)  # fmt: skip
QUEUE_BUCKETS = (
    0.0, 0.1, 0.2, 0.5, 1, 2, 3, 4, 5, 10, 15, 20, 30, 40, 50, 60, 70, 80, 90, 100, 200, 300, 400, 500,
    600, 700, 800, 900, 1000, 1200, 1400, 1600, 1800, 2000, 2500, 3000,
)  # fmt: skip
KV_MS_BUCKETS = (1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500)  # bootstrap and alloc ms
KV_LATENCY_MS_BUCKETS = (*KV_MS_BUCKETS, 5000)
KV_SPEED_BUCKETS = (0.1, 0.5, 1, 5, 10, 25, 50, 100, 200, 400)
KV_MB_BUCKETS = (1, 5, 10, 50, 100, 500, 1000, 5000, 10000)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# (metric, help, RankLoad field): the scheduler gauges, one series per DP rank.
SCHEDULER_GAUGES = (
    ("sglang:num_running_reqs", "The number of running requests.", "num_running_reqs"),
    ("sglang:num_queue_reqs", "The number of requests in the waiting queue.", "num_waiting_reqs"),
    ("sglang:num_used_tokens", "The number of used tokens.", "num_used_tokens"),
    ("sglang:token_usage", "The token usage.", "token_usage"),
    ("sglang:cache_hit_rate", "The prefix cache hit rate.", "cache_hit_rate"),
    ("sglang:gen_throughput", "The generation throughput (token/s).", "gen_throughput"),
    ("sglang:max_total_num_tokens", "Maximum total number of tokens in the KV cache pool.", "max_total_num_tokens"),
    ("sglang:utilization", "The utilization.", "utilization"),
)


def pd_gauges(version: str) -> tuple[tuple[str, str, str], ...]:
    """(metric, help, PdRankLoad field) of the per-role queue gauges. Every server exports them (0 outside its role),
    as SGLang's scheduler sets them all on each stats pass; 0.5.9-0.5.11 name the prefill bootstrap queue
    `prealloc`, and 0.5.9 exports the last KV transfer's speed and latency as gauges (later releases: histograms)."""
    v = parse_version(version)
    bootstrap = (
        ("sglang:num_prefill_bootstrap_queue_reqs", "The number of requests in the prefill bootstrap queue.")
        if v >= BOOTSTRAP_QUEUE_NAMES_SINCE
        else ("sglang:num_prefill_prealloc_queue_reqs", "The number of requests in the prefill prealloc queue.")
    )
    out: tuple[tuple[str, str, str], ...] = (
        (*bootstrap, "bootstrap"),
        ("sglang:num_prefill_inflight_queue_reqs", "The number of requests in the prefill inflight queue.", "inflight"),
        ("sglang:num_decode_prealloc_queue_reqs", "The number of requests in the decode prealloc queue.", "prealloc"),
        ("sglang:num_decode_transfer_queue_reqs", "The number of requests in the decode transfer queue.", "transfer"),
    )
    if v < TRANSFER_HISTOGRAMS_SINCE:
        out += (
            ("sglang:kv_transfer_speed_gb_s", "The transfer speed of the KV cache in GB/s.", "kv_transfer_speed_gb_s"),
            ("sglang:kv_transfer_latency_ms", "The transfer latency of the KV cache in ms.", "kv_transfer_latency_ms"),
        )
    return out


def fmt_value(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(float(v))


def _escape(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def labels_of(d: Mapping[str, str]) -> Labels:
    return tuple(sorted(d.items()))


@dataclass(frozen=True)
class Family:
    name: str  # as in the TYPE line
    kind: str  # counter, gauge, histogram
    doc: str
    samples: tuple[tuple[str, Labels, float], ...]


def render(families: Iterable[Family]) -> str:
    lines: list[str] = []
    for fam in families:
        lines.append(f"# HELP {fam.name} {fam.doc}")
        lines.append(f"# TYPE {fam.name} {fam.kind}")
        for name, labels, value in fam.samples:
            body = ",".join(f'{k}="{_escape(v)}"' for k, v in labels)
            lines.append(f"{name}{{{body}}} {fmt_value(value)}" if body else f"{name} {fmt_value(value)}")
    return "\n".join(lines) + "\n"


@dataclass
class _HistState:
    counts: list[float]
    total: float = 0.0
    count: float = 0.0


@dataclass
class Histogram:
    name: str
    doc: str
    buckets: tuple[float, ...]
    series: dict[Labels, _HistState] = field(default_factory=dict)

    def observe(self, labels: Labels, value: float, times: int = 1) -> None:
        st = self.series.setdefault(labels, _HistState([0.0] * len(self.buckets)))
        for i, b in enumerate(self.buckets):
            if value <= b:
                st.counts[i] += times
        st.total += value * times
        st.count += times

    def family(self) -> Family:
        samples: list[tuple[str, Labels, float]] = []
        for labels, st in self.series.items():
            for b, c in zip(self.buckets, st.counts, strict=True):
                samples.append((f"{self.name}_bucket", labels_of({**dict(labels), "le": fmt_value(b)}), c))
            samples.append((f"{self.name}_bucket", labels_of({**dict(labels), "le": "+Inf"}), st.count))
            samples.append((f"{self.name}_count", labels, st.count))
            samples.append((f"{self.name}_sum", labels, st.total))
        return Family(self.name, "histogram", self.doc, tuple(samples))


@dataclass
class Counter:
    name: str  # ends in _total
    doc: str
    series: dict[Labels, float] = field(default_factory=dict)

    def inc(self, labels: Labels, amount: float = 1.0) -> None:
        self.series[labels] = self.series.get(labels, 0.0) + amount

    def family(self) -> Family:
        return Family(self.name, "counter", self.doc, tuple((self.name, k, v) for k, v in self.series.items()))


def engine_type(args: ServerArgs) -> str:
    return args.disaggregation_mode if args.disaggregation_mode in ("prefill", "decode") else "unified"


def scheduler_labels(args: ServerArgs, dp_rank: int) -> Labels:
    """Labels of the scheduler that exports DP rank `dp_rank` (its attention-TP rank 0)."""
    tp_rank = dp_rank * (args.tp_size // args.attn_dp_size) if args.attn_dp_size > 1 else 0
    d = {
        "model_name": args.served_model_name,
        "engine_type": engine_type(args),
        "tp_rank": str(tp_rank),
        "pp_rank": "0",
        "moe_ep_rank": str(tp_rank // max(1, args.tp_size // args.ep_size)),
    }
    if args.num_dp_ranks > 1:
        d["dp_rank"] = str(dp_rank)
    return labels_of(d)


class SimMetrics:
    """The request-side counters and histograms SGLang accumulates; gauges are computed at scrape time."""

    def __init__(self, args: ServerArgs) -> None:
        self.args = args
        self.base = {"model_name": args.served_model_name, "engine_type": engine_type(args)}
        self.num_requests = Counter("sglang:num_requests_total", "Number of requests processed.")
        self.prompt_tokens = Counter("sglang:prompt_tokens_total", "Number of prefill tokens processed.")
        self.generation_tokens = Counter("sglang:generation_tokens_total", "Number of generation tokens processed.")
        self.cached_tokens = Counter("sglang:cached_tokens_total", "Number of cached prompt tokens.")
        self.aborted = Counter("sglang:num_aborted_requests_total", "Number of requests aborted.")
        self.ttft = Histogram(
            "sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.", TTFT_BUCKETS
        )
        self.itl = Histogram(
            "sglang:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", ITL_BUCKETS
        )
        self.e2e = Histogram(
            "sglang:e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds", E2E_BUCKETS
        )
        self.queue_time = Histogram(
            "sglang:queue_time_seconds", "Histogram of queueing time in seconds.", QUEUE_BUCKETS
        )
        # PD disaggregation (scheduler-side: labelled like the scheduler gauges; exported once touched)
        self.bootstrap_failed = Counter(
            "sglang:num_bootstrap_failed_reqs_total", "The number of bootstrap failed requests."
        )
        self.transfer_failed = Counter(
            "sglang:num_transfer_failed_reqs_total", "The number of transfer failed requests."
        )
        self.kv_histograms = parse_version(args.sglang_version) >= TRANSFER_HISTOGRAMS_SINCE
        self.kv_latency = Histogram(
            "sglang:kv_transfer_latency_ms", "Histogram of KV cache transfer latency in ms.", KV_LATENCY_MS_BUCKETS
        )
        self.kv_total_mb = Histogram(
            "sglang:kv_transfer_total_mb", "Histogram of KV cache transfer size in MB.", KV_MB_BUCKETS
        )
        self.kv_speed = Histogram(
            "sglang:kv_transfer_speed_gb_s", "Histogram of KV cache transfer speed in GB/s.", KV_SPEED_BUCKETS
        )
        self.kv_bootstrap_ms = Histogram(
            "sglang:kv_transfer_bootstrap_ms", "Histogram of KV transfer bootstrap time in ms.", KV_MS_BUCKETS
        )
        self.kv_alloc_ms = Histogram(
            "sglang:kv_transfer_alloc_ms", "Histogram of KV transfer allocation waiting time in ms.", KV_MS_BUCKETS
        )

    def _req_labels(self, streaming: bool) -> Labels:
        return labels_of({**self.base, "is_streaming": "true" if streaming else "false"})

    def observe_finished(self, s: Schedule, e2e: float, streaming: bool, first_token: bool = True) -> None:
        """A finished request. A PD prefill server observes no TTFT (or ITL), its warmup included."""
        base = labels_of(self.base)
        req = self._req_labels(streaming)
        self.num_requests.inc(req)
        self.prompt_tokens.inc(base, s.prompt_tokens)
        self.generation_tokens.inc(base, s.output_tokens)
        if s.cached_tokens > 0:
            self.cached_tokens.inc(labels_of({**self.base, "cache_source": "device"}), s.cached_tokens)
        self.e2e.observe(req, e2e)
        if s.output_tokens > 0 and first_token and self.args.disaggregation_mode != "prefill":
            self.ttft.observe(req, s.ttft)
        if s.output_tokens > 1 and self.args.disaggregation_mode != "prefill":
            self.itl.observe(req, s.token_interval, s.output_tokens - 1)
        self.queue_time.observe(scheduler_labels(self.args, s.dp_rank), s.queue_time)

    def observe_aborted(self) -> None:
        self.aborted.inc(labels_of(self.base))

    def observe_pd_failed(self, prompt_tokens: int, e2e: float, streaming: bool) -> None:
        """A PD request the scheduler aborted (bootstrap or transfer failure): it still finishes, as a request."""
        req = self._req_labels(streaming)
        self.num_requests.inc(req)
        self.prompt_tokens.inc(labels_of(self.base), prompt_tokens)
        self.e2e.observe(req, e2e)

    def count_pd_failure(self, stage: str, dp_rank: int) -> None:
        """`increment_bootstrap_failed_reqs` ("bootstrap") or `increment_transfer_failed_reqs` ("transfer")."""
        counter = self.bootstrap_failed if stage == "bootstrap" else self.transfer_failed
        counter.inc(scheduler_labels(self.args, dp_rank))

    def observe_kv_transfer(self, dp_rank: int, latency_ms: float, total_mb: float, speed_gb_s: float) -> None:
        """Prefill, at each finished transfer (0.5.10+ histograms; 0.5.9 keeps only the last values, as gauges)."""
        if self.kv_histograms:
            labels = scheduler_labels(self.args, dp_rank)
            self.kv_latency.observe(labels, latency_ms)
            self.kv_total_mb.observe(labels, total_mb)
            self.kv_speed.observe(labels, speed_gb_s)

    def observe_kv_bootstrap(self, dp_rank: int, bootstrap_ms: float, alloc_ms: float) -> None:
        if self.kv_histograms:
            labels = scheduler_labels(self.args, dp_rank)
            self.kv_bootstrap_ms.observe(labels, bootstrap_ms)
            self.kv_alloc_ms.observe(labels, alloc_ms)

    def families(self, loads: Sequence[RankLoad], pd: Sequence[PdRankLoad] = ()) -> list[Family]:
        fams = [
            Family(
                name,
                "gauge",
                doc,
                tuple((name, scheduler_labels(self.args, r.dp_rank), float(getattr(r, attr))) for r in loads),
            )
            for name, doc, attr in SCHEDULER_GAUGES
        ]
        pd_by_rank = {p.dp_rank: p for p in pd}
        for name, doc, attr in pd_gauges(self.args.sglang_version):
            samples = []
            for r in loads:
                p = pd_by_rank.get(r.dp_rank, PdRankLoad(dp_rank=r.dp_rank))
                samples.append((name, scheduler_labels(self.args, r.dp_rank), float(getattr(p, attr))))
            fams.append(Family(name, "gauge", doc, tuple(samples)))
        for c in (self.bootstrap_failed, self.transfer_failed):
            if c.series:
                fams.append(c.family())
        for h in (self.kv_latency, self.kv_total_mb, self.kv_speed, self.kv_bootstrap_ms, self.kv_alloc_ms):
            if h.series:
                fams.append(h.family())
        fams += [
            c.family() for c in (self.num_requests, self.prompt_tokens, self.generation_tokens, self.cached_tokens)
        ]
        fams += [self.aborted.family(), self.ttft.family(), self.itl.family(), self.e2e.family()]
        fams.append(self.queue_time.family())
        return fams


def gpu_dp_rank(args: ServerArgs, local_gpu: int) -> int:
    """Which DP rank's work runs on this node's GPU `local_gpu` (SGLang's GPU id layout)."""
    g = args.node_rank * args.gpus_per_node + local_gpu
    if args.dp_size > 1:
        return g // (args.tp_size * args.pp_size)
    if args.attn_dp_size > 1:
        return (g % args.tp_size) // (args.tp_size // args.attn_dp_size)
    return 0


@dataclass(frozen=True)
class PodIdentity:
    hostname: str
    pod: str | None
    namespace: str | None
    container: str
    gpu_model: str


def dcgm_family(args: ServerArgs, who: PodIdentity, busy_by_rank: Sequence[float]) -> Family:
    """DCGM_FI_DEV_GPU_UTIL as dcgm-exporter labels it, one series per GPU of this pod, in percent."""
    samples = []
    for i in range(args.gpus_per_node):
        rank = gpu_dp_rank(args, i)
        busy = busy_by_rank[rank] if rank < len(busy_by_rank) else 0.0
        d = {
            "gpu": str(i),
            "UUID": f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{who.hostname}/{who.pod}/{i}')}",
            "pci_bus_id": f"00000000:{0x18 + i:02X}:00.0",
            "device": f"nvidia{i}",
            "modelName": who.gpu_model,
            "Hostname": who.hostname,
        }
        if who.pod:
            d |= {"container": who.container, "namespace": who.namespace or "", "pod": who.pod}
        samples.append(("DCGM_FI_DEV_GPU_UTIL", labels_of(d), float(round(100 * busy))))
    return Family("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", tuple(samples))
