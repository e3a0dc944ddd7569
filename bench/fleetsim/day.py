"""Day-long traces: a daily cycle with bursts, built from the shipped traces' request sizes and arrival burstiness.

The shipped traces last an hour or less, where a 2-minute start-up leaves autoscaling little to win. A day has
troughs and peaks (production traces show 3-5x between them), and bursts on top. Each `Day` is seeded, so the
files `bench/day_traces.py` writes into `bench/traces/` can be written again byte for byte from the shared traces.

How a day is built, per 10 s bin (the arrival rate is `base_qps` x cycle x burst multiplier x drift):
- **Cycle:** a smooth curve from `trough` (04:00) to 1 (16:00) and back; `1 / trough` is the peak-to-trough ratio.
- **Burst multiplier:** the shape of a shipped trace's arrivals. Its 10 s arrival counts over its 10-minute mean
  are cut into 10-minute tiles; the day is covered by tiles drawn at random (seeded), each raised to `burstiness`
  (1 keeps the shipped trace's bursts as they are; 0.5 halves them on a log scale), renormalised to mean 1.
- **Events:** `events_per_hour` extra bursts (Poisson), each `event_height` x for `event_minutes`: the batch jobs
  and launches a day has and an hour does not.
- **Drift:** a slow random walk of a few percent, so no two days are alike.
- Request sizes (prompt and output tokens) are drawn, seeded, from the size trace's requests; `pairs` writes
  requests two by two with one timestamp, as the Mooncake trace's batches come.
- Written at the full rate (about 450 000 requests a day) as Azure CSV, xz-compressed (about 2 MB each).
"""

import lzma
import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np

from . import traces

DAY_S = 86400.0
BIN_S = 10.0
TILE_S = 600.0


@dataclass(frozen=True)
class Day:
    name: str
    burst_trace: str  # shipped trace whose arrival shape gives the bursts
    size_trace: str  # shipped trace whose requests give the sizes
    seed: int
    base_qps: float = 9.0  # requests/s at the cycle's peak (before bursts and events)
    trough: float = 0.25
    burstiness: float = 0.5
    events_per_hour: float = 0.25
    event_height: tuple[float, float] = (1.3, 2.0)
    event_minutes: tuple[float, float] = (1.0, 5.0)
    pairs: bool = False
    days: float = 1.0


AZURE = "AzureLLMInferenceTrace_code.csv"
MOONCAKE = "mooncake_synthetic_trace.jsonl"

DAYS = (
    # Azure code trace's bursts (softened), Mooncake's long prompts; peak-to-trough 4x.
    Day("day-code-bursts", AZURE, MOONCAKE, seed=101, trough=0.25, burstiness=0.5),
    # Mooncake's own (flat, batched) arrivals, a 4x day and twice the events.
    Day("day-chat", MOONCAKE, MOONCAKE, seed=202, trough=0.25, burstiness=1.0, events_per_hour=0.5,
        pairs=True),
)  # fmt: skip

# The benchmark options the day traces are measured with (docs/autoscaling.md): every request once (the files hold
# the full rate: replaying each request K times would make clumps of K requests of one size, a replica's worth each
# at this C), and a replica holds 4 requests at once (Mooncake's prompts, 15 000 tokens on average, take 4.5 s a
# slot and most of a replica's KV cache).
BENCH_OPTIONS = ("--scale", "1", "--concurrency", "4")


def cycle(t: np.ndarray, trough: float) -> np.ndarray:
    """1 at 16:00, `trough` at 04:00, smooth between (t in seconds from midnight)."""
    phase = 2 * math.pi * (t / 3600.0 - 4.0) / 24.0
    shape: np.ndarray = ((1 - np.cos(phase)) / 2) ** 1.5
    return trough + (1 - trough) * shape


def burst_tiles(trace: traces.Trace, burstiness: float) -> np.ndarray:
    """(tiles, bins) burst multipliers: a trace's 10 s counts over its centred 10-minute mean, as 10-minute tiles."""
    counts = np.bincount((trace.arrivals // BIN_S).astype(int)).astype(float)
    per_tile = int(TILE_S / BIN_S)
    kernel = np.ones(per_tile) / per_tile
    mean = np.convolve(np.pad(counts, per_tile // 2, mode="edge"), kernel, mode="same")[
        per_tile // 2 : per_tile // 2 + len(counts)
    ]
    ratio = counts / np.maximum(mean, 1e-9)
    n = len(ratio) // per_tile
    tiles = ratio[: n * per_tile].reshape(n, per_tile)
    tiles = np.maximum(tiles, 0.02) ** burstiness  # a silent 10 s stays nearly silent
    normalised: np.ndarray = tiles / tiles.mean(axis=1, keepdims=True)
    return normalised


def rate_profile(day: Day, shared: Path) -> np.ndarray:
    """Expected arrivals per second in each 10 s bin of the day."""
    rng = np.random.default_rng(day.seed)
    nbins = int(day.days * DAY_S / BIN_S)
    t = np.arange(nbins) * BIN_S
    tiles = burst_tiles(traces.load(shared / day.burst_trace), day.burstiness)
    per_tile = tiles.shape[1]
    picks = rng.integers(0, len(tiles), size=math.ceil(nbins / per_tile))
    bursts = tiles[picks].reshape(-1)[:nbins]
    events = np.ones(nbins)
    n_events = rng.poisson(day.events_per_hour * day.days * 24)
    for start, minutes, height in zip(
        rng.uniform(0, day.days * DAY_S, n_events),
        rng.uniform(*day.event_minutes, n_events),
        rng.uniform(*day.event_height, n_events),
        strict=True,
    ):
        span = (t >= start) & (t < start + 60 * minutes)
        events[span] = np.maximum(events[span], height)
    steps = rng.normal(0.0, 0.01, size=nbins // 30 + 1)  # one step per 5 minutes
    drift = np.exp(np.clip(np.cumsum(steps) - np.cumsum(steps).mean(), -0.15, 0.15))
    drift = np.repeat(drift, 30)[:nbins]
    profile: np.ndarray = day.base_qps * cycle(t % DAY_S, day.trough) * bursts * events * drift
    return profile


def arrivals(day: Day, shared: Path) -> np.ndarray:
    """Arrival times (seconds), Poisson within each bin at the profile's rate; pairs share a timestamp."""
    rng = np.random.default_rng(day.seed + 1)
    profile = rate_profile(day, shared)
    per = 2 if day.pairs else 1
    counts = rng.poisson(profile * BIN_S / per)
    starts = np.repeat(np.arange(len(profile)) * BIN_S, counts)
    t = np.sort(starts + rng.uniform(0.0, BIN_S, size=len(starts)))
    t = np.round(t, 3)  # millisecond timestamps: small files
    out: np.ndarray = np.repeat(t, per)
    return out


def sizes(day: Day, shared: Path, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Prompt and output tokens of `n` requests drawn from the size trace."""
    source = traces.load(shared / day.size_trace)
    pick = np.random.default_rng(day.seed + 2).integers(0, len(source.arrivals), size=n)
    return source.tokens_in[pick].astype(int), source.tokens_out[pick].astype(int)


def write_day(day: Day, out: Path, shared: Path, compress: bool = True) -> Path:
    """The day as an Azure CSV with millisecond timestamps, xz-compressed unless `compress` is False (the benchmark
    reads .xz directly)."""
    out.mkdir(parents=True, exist_ok=True)
    t = arrivals(day, shared)
    prompt, output = sizes(day, shared, len(t))
    start = datetime(2024, 5, 1, 0, 0, 0)
    lines = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    for ts, p, o in zip(t.tolist(), prompt.tolist(), output.tolist(), strict=True):
        stamp = (start + timedelta(milliseconds=round(ts * 1000))).strftime("%Y-%m-%d %H:%M:%S.%f") + "0"
        lines.append(f"{stamp},{p},{o}")
    data = ("\n".join(lines) + "\n").encode()
    if not compress:
        path = out / f"{day.name}.csv"
        path.write_bytes(data)
        return path
    path = out / f"{day.name}.csv.xz"
    with lzma.open(path, "wb", preset=9) as f:  # xz has no timestamp: the same bytes every time
        f.write(data)
    return path
