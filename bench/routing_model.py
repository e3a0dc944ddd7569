"""The pure half of `bench/routing.py`: trace prompts as simulator prompts, the direct cache count, the summary.

A Mooncake request names its prompt by `hash_ids`, one id per 512-token block, equal leading ids meaning a
shared prefix. The simulator caches 16-token blocks of text (4 characters a token, `sglang_sim/tokens.py`), and smg's
cache-aware tree matches request text, so each trace block becomes one simulator block: 64 characters derived
only from the block id. Equal leading ids then give equal leading text (the router's tree sees the shared
prefix) and equal leading cache keys (the simulator's cache does), and different ids differ in their first
characters. One simulator block stands for 512 trace tokens (`SCALE` = 32): times and the KV pool are scaled to
match (prefill and decode rates and the output length divided by 32) and hit rates are reported in trace tokens.

An Azure CSV has no prefix ids: each of its requests gets fresh block ids (nothing is shared), so every policy
reports a hit rate of 0 on it, as it should.
"""

from __future__ import annotations

import csv
import hashlib
import heapq
import json
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

TRACE_BLOCK_TOKENS = 512  # the Mooncake trace's hash_ids block
SIM_BLOCK_TOKENS = 16  # sglang_sim/tokens.py BLOCK_TOKENS
CHARS_PER_TOKEN = 4  # sglang_sim/tokens.py CHARS_PER_TOKEN
SCALE = TRACE_BLOCK_TOKENS // SIM_BLOCK_TOKENS  # trace tokens per simulator token
BLOCK_CHARS = SIM_BLOCK_TOKENS * CHARS_PER_TOKEN
SESSION_HEADER = "x-session-id"  # the operator's default routing-key header (StickySessions.headers)

# Policy name -> `smg launch` flags appended after the operator's rendered command (argparse: the last value wins),
# so each row sets what it varies, whatever the operator renders. "operator" appends nothing: the rendered defaults.
SMG_POLL = "--load-monitor-interval 10"  # smg 1.13.0's default: worker loads polled every 10 s
LM1 = "--load-monitor-interval 1"  # every second (smg takes whole seconds)
STICKY = f"--sticky-sessions --routing-key-headers {SESSION_HEADER}"
POLICIES: dict[str, str] = {
    "operator": "",
    "round_robin": "--policy round_robin",
    "random": "--policy random",
    "power_of_two": f"--policy power_of_two {SMG_POLL}",
    "power_of_two_lm1": f"--policy power_of_two {LM1}",
    # smg 1.13.0's cache-aware defaults: threshold 0.3, balance 64 / 1.5, eviction every 60 s, tree 64 Mi chars
    "cache_aware": f"--policy cache_aware {SMG_POLL}",
    "cache_aware_t0.5": f"--policy cache_aware {SMG_POLL} --cache-threshold 0.5",
    "cache_aware_t0.1": f"--policy cache_aware {SMG_POLL} --cache-threshold 0.1",
    "cache_aware_bal8": f"--policy cache_aware {SMG_POLL} --balance-abs-threshold 8 --balance-rel-threshold 1.2",
    "cache_aware_loose": f"--policy cache_aware {SMG_POLL} --balance-abs-threshold 256 --balance-rel-threshold 3",
    "cache_aware_tree": f"--policy cache_aware {SMG_POLL} --eviction-interval-secs 5 --max-tree-size {{tree}}",
    "cache_aware_book": f"--policy cache_aware {SMG_POLL} --selection-accounting-ttl-ms 2000",
    "cache_aware_warm0": f"--policy cache_aware {SMG_POLL} --worker-warmup-secs 0",
    "cache_aware_lm1": f"--policy cache_aware {LM1}",
    "cache_aware_lm1_t0.1": f"--policy cache_aware {LM1} --cache-threshold 0.1",
    "cache_aware_lm1_t0.5": f"--policy cache_aware {LM1} --cache-threshold 0.5",
    "cache_aware_lm1_bal8": f"--policy cache_aware {LM1} --balance-abs-threshold 8 --balance-rel-threshold 1.2",
    "cache_aware_lm1_tree": f"--policy cache_aware {LM1} --eviction-interval-secs 5 --max-tree-size {{tree}}",
    "sticky": f"--policy round_robin {STICKY}",
    "sticky_cache_aware": f"--policy cache_aware {SMG_POLL} {STICKY}",
    "sticky_cache_aware_lm1": f"--policy cache_aware {LM1} {STICKY}",
}
DEFAULT_POLICIES = (
    "round_robin", "random", "power_of_two", "power_of_two_lm1", "cache_aware", "cache_aware_t0.1",
    "cache_aware_lm1", "cache_aware_lm1_t0.1", "cache_aware_lm1_t0.5", "cache_aware_lm1_bal8", "cache_aware_lm1_tree",
    "sticky", "sticky_cache_aware_lm1",
)  # fmt: skip


@dataclass(frozen=True)
class TraceRequest:
    t: float  # seconds from the trace's start
    input_tokens: int
    output_tokens: int
    blocks: tuple[int, ...]

    @property
    def session(self) -> str:
        """The sticky-session key: the first block (requests that share no first block share nothing)."""
        return f"s{self.blocks[0]}" if self.blocks else "s-"


def load_trace(path: str | Path) -> list[TraceRequest]:
    """Mooncake JSONL (`hash_ids` kept) or Azure CSV (fresh ids per request), sorted by time."""
    p = Path(path)
    with p.open() as f:
        head = f.readline()
    if head.lstrip().startswith("{"):
        rows = [json.loads(line) for line in p.read_text().splitlines() if line.strip()]
        out = [
            TraceRequest(float(r["timestamp"]) / 1000.0, int(r["input_length"]), int(r["output_length"]),
                         tuple(int(h) for h in r["hash_ids"]))
            for r in rows
        ]  # fmt: skip
    else:
        out = []
        next_id = 0
        with p.open(newline="") as f:
            reader = csv.DictReader(f)
            t0: float | None = None
            for r in reader:
                t = _azure_time(r["TIMESTAMP"])
                t0 = t if t0 is None else t0
                n_in = int(r["ContextTokens"])
                n = max(1, math.ceil(n_in / TRACE_BLOCK_TOKENS))
                out.append(TraceRequest(t - t0, n_in, int(r["GeneratedTokens"]), tuple(range(next_id, next_id + n))))
                next_id += n
    out.sort(key=lambda r: r.t)
    return out


def _azure_time(text: str) -> float:
    date, _, frac = text.strip().partition(".")
    return datetime.fromisoformat(date).timestamp() + (float("0." + frac) if frac else 0.0)


def sample_families(trace: Sequence[TraceRequest], every: int, pick: int = 0) -> list[TraceRequest]:
    """Keep whole prefix families: the requests whose first block id is `pick` modulo `every`.

    Requests share a prefix only if they share their first block, so this thins the trace without breaking any
    reuse: each kept request finds exactly the prefixes it found in the full trace, over the same time span.
    """
    if every <= 1:
        return list(trace)
    return [r for r in trace if r.blocks and r.blocks[0] % every == pick % every]


def block_text(block: int) -> str:
    """64 characters (one simulator block) that depend only on the block id; different ids differ at once."""
    digest = hashlib.blake2b(block.to_bytes(8, "little", signed=True), digest_size=32).hexdigest()
    return digest[:BLOCK_CHARS]


def prompt_text(blocks: Iterable[int]) -> str:
    return "".join(block_text(b) for b in blocks)


def sim_output_tokens(trace_output_tokens: int) -> int:
    """Output length in simulator tokens (at least 1): decode time is kept when the decode rate is divided too."""
    return max(1, math.ceil(trace_output_tokens / SCALE))


def matched_blocks(cached_sim_tokens: int) -> int:
    """Blocks behind the simulator's `cached_tokens` (it reports at most prompt - 1 tokens: SGLang always
    computes the last one), so a full match of n blocks reads n."""
    return math.ceil(cached_sim_tokens / SIM_BLOCK_TOKENS)


def hit_tokens(request: TraceRequest, blocks: int) -> int:
    """Trace tokens served from cache when the first `blocks` blocks are cached (never the last token)."""
    return max(0, min(blocks * TRACE_BLOCK_TOKENS, request.input_tokens - 1))


def direct_lru_hit_rate(trace: Sequence[TraceRequest], capacity_blocks: int) -> float:
    """The prefix-hit rate (trace tokens) of one LRU cache of `capacity_blocks` blocks, counted directly.

    Independent of `sglang_sim/prefix_cache.py`: a block is its full prefix (a tuple of ids) with the time it was last
    used; a request hits its longest cached leading run; then every block of the prompt (at most the capacity)
    is stamped, deepest first, so a prefix is always more recent than its extensions; while over capacity, the
    block with the oldest stamp goes (a heap of stamps; stale heap entries are skipped).
    """
    stamp: dict[tuple[int, ...], int] = {}
    heap: list[tuple[int, tuple[int, ...]]] = []
    clock = 0
    hit = total = 0
    for r in trace:
        prefixes = [r.blocks[: i + 1] for i in range(len(r.blocks))]
        n = 0
        for p in prefixes:
            if p not in stamp:
                break
            n += 1
        hit += hit_tokens(r, n)
        total += r.input_tokens
        if capacity_blocks <= 0:
            continue
        for p in reversed(prefixes[:capacity_blocks]):
            clock += 1
            stamp[p] = clock
            heapq.heappush(heap, (clock, p))
        while len(stamp) > capacity_blocks:
            t, p = heapq.heappop(heap)
            if stamp.get(p) == t:
                del stamp[p]
    return hit / total if total else 0.0


@dataclass(frozen=True)
class Outcome:
    """One replayed request as the client saw it."""

    index: int  # into the replayed trace
    ok: bool
    ttft_s: float | None  # wall seconds, divided back by the time scale by `summarize`
    cached_sim_tokens: int
    worker: str | None = None


@dataclass(frozen=True)
class PolicyResult:
    hit_rate: float  # trace tokens served from cache / trace prompt tokens, over completed requests
    ttft_p50_s: float | None  # simulated seconds
    ttft_p99_s: float | None
    load_cv: float  # coefficient of variation of requests served per replica
    requests: int
    failed: int
    per_replica: tuple[int, ...]
    router: tuple[tuple[str, float], ...] = ()  # the router's own counters (cache-aware branches), if any

    def public(self) -> dict[str, object]:
        return {
            "hit_rate": round(self.hit_rate, 4),
            "ttft_p50_s": None if self.ttft_p50_s is None else round(self.ttft_p50_s, 4),
            "ttft_p99_s": None if self.ttft_p99_s is None else round(self.ttft_p99_s, 4),
            "load_cv": round(self.load_cv, 4),
            "requests": self.requests,
            "failed": self.failed,
            "per_replica": list(self.per_replica),
            **({"router": dict(self.router)} if self.router else {}),
        }


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default); None for no values."""
    if not values:
        return None
    xs = sorted(values)
    pos = (len(xs) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def coefficient_of_variation(counts: Sequence[float]) -> float:
    """Population standard deviation over the mean; 0 for no load or one replica."""
    if len(counts) < 2 or sum(counts) == 0:
        return 0.0
    return statistics.pstdev(counts) / statistics.fmean(counts)


def summarize(
    trace: Sequence[TraceRequest],
    outcomes: Sequence[Outcome],
    per_replica: Sequence[int],
    time_scale: float,
    router: Sequence[tuple[str, float]] = (),
) -> PolicyResult:
    done = [o for o in outcomes if o.ok]
    hit = sum(hit_tokens(trace[o.index], matched_blocks(o.cached_sim_tokens)) for o in done)
    total = sum(trace[o.index].input_tokens for o in done)
    ttfts = [o.ttft_s / time_scale for o in done if o.ttft_s is not None]
    return PolicyResult(
        hit_rate=hit / total if total else 0.0,
        ttft_p50_s=percentile(ttfts, 0.5),
        ttft_p99_s=percentile(ttfts, 0.99),
        load_cv=coefficient_of_variation(per_replica),
        requests=len(outcomes),
        failed=len(outcomes) - len(done),
        per_replica=tuple(per_replica),
        router=tuple(router),
    )


def router_counters(metrics_text: str, prefix: str = "smg_cache_aware_policy_branch_total") -> list[tuple[str, float]]:
    """`branch=value` pairs of a labelled counter in smg's Prometheus text, summed over other labels."""
    out: dict[str, float] = {}
    for line in metrics_text.splitlines():
        if not line.startswith(prefix + "{"):
            continue
        labels, _, value = line.rpartition(" ")
        branch = labels.partition('branch="')[2].partition('"')[0] or labels
        out[branch] = out.get(branch, 0.0) + float(value)
    return sorted(out.items())


def _fmt(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def render_table(results: dict[str, PolicyResult], ceiling: float, baseline: str = "round_robin") -> str:
    """Markdown: one row per policy, with the hit rate relative to round-robin and to the ceiling."""
    base = results.get(baseline)
    lines = [
        "| policy | hit rate (tokens) | vs round-robin | of ceiling | TTFT p50 s | TTFT p99 s | load CV | failed |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        rel = f"{(r.hit_rate / base.hit_rate - 1) * 100:+.0f} %" if base and base.hit_rate > 0 else "-"
        share = f"{r.hit_rate / ceiling * 100:.0f} %" if ceiling > 0 else "-"
        lines.append(
            f"| {name} | {r.hit_rate:.3f} | {rel} | {share} | {_fmt(r.ttft_p50_s, '.3f')} | "
            f"{_fmt(r.ttft_p99_s, '.3f')} | {r.load_cv:.3f} | {r.failed} |"
        )
    lines.append(f"| ceiling: one replica, 4x cache | {ceiling:.3f} | | 100 % | | | | |")
    return "\n".join(lines)
