"""Seeded synthetic traces in both public formats, for shapes the shipped traces lack (days, steps, ramps, on/off).

The benchmark must work on any file in the two formats, and two real traces are too few to judge a policy by: a
result that holds on one shape may flip on the next. `FAMILY` is a fixed set of shapes with their seeds, written by
`bench/synthetic_traces.py` and used by the tests, so every number quoted from it can be measured again.
Rates are before the benchmark's replay (which multiplies them until the oracle needs 10 replicas at peak).
"""

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np

Rate = Callable[[float], float]


def poisson(rate: Rate, seconds: float, seed: int) -> np.ndarray:
    """Arrival times of a Poisson process with a time-varying rate (thinning)."""
    rng = np.random.default_rng(seed)
    peak = max(rate(t) for t in np.arange(0.0, seconds, 1.0))
    t = np.cumsum(rng.exponential(1.0 / peak, size=int(peak * seconds * 1.5) + 100))
    t = t[t < seconds]
    return t[rng.uniform(0.0, peak, size=len(t)) < np.array([rate(x) for x in t])]


def _tokens(n: int, seed: int, prompt: float, output: float) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (
        rng.lognormal(np.log(prompt), 0.8, n).astype(int) + 1,
        rng.lognormal(np.log(output), 0.8, n).astype(int) + 1,
    )


def write_azure(path: Path, arrivals: np.ndarray, seed: int) -> Path:
    """Azure CSV with code-like token counts."""
    prompt, output = _tokens(len(arrivals), seed, 1500, 120)
    return write_azure_tokens(path, arrivals, prompt, output)


def write_azure_tokens(path: Path, arrivals: np.ndarray, prompt: np.ndarray, output: np.ndarray) -> Path:
    """Azure CSV with the given token counts, timestamps with seven fractional digits as the real trace has."""
    start = datetime(2024, 5, 1, 9, 0, 0)
    lines = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    for t, p, o in zip(arrivals, prompt, output, strict=True):
        stamp = (start + timedelta(seconds=float(t))).strftime("%Y-%m-%d %H:%M:%S.%f") + "0"
        lines.append(f"{stamp},{p},{o}")
    path.write_text("\n".join(lines) + "\n")
    return path


def write_mooncake(path: Path, arrivals: np.ndarray, seed: int) -> Path:
    """Mooncake JSONL (ms timestamps, one hash id per 512-token block); long-context token counts."""
    prompt, output = _tokens(len(arrivals), seed, 6000, 150)
    with path.open("w") as f:
        for t, p, o in zip(arrivals, prompt, output, strict=True):
            blocks = list(range(-(-int(p) // 512)))
            record = {"timestamp": int(t * 1000), "input_length": int(p), "output_length": int(o), "hash_ids": blocks}
            f.write(json.dumps(record) + "\n")
    return path


def swing(t: float) -> float:
    """A compressed day: 40 minutes from night to peak and back (1 to 7 req/s)."""
    return float(1.0 + 6.0 * math.sin(math.pi * t / 2400) ** 2)


def step(t: float) -> float:
    """3 req/s, tripled for five minutes."""
    return 9.0 if 180 <= t < 480 else 3.0


def on_off(on_s: float, off_s: float, high: float, low: float) -> Rate:
    """Busy stretches of `on_s` at `high` req/s between quiet ones of `off_s` at `low` (Azure-like when short)."""
    return lambda t: high if t % (on_s + off_s) < on_s else low


def spikes(base: float, height: float, every_s: float, width_s: float) -> Rate:
    return lambda t: height if t % every_s < width_s else base


@dataclass(frozen=True)
class Shape:
    name: str
    rate: Rate
    seconds: float
    seed: int
    batched: bool = False
    """Mooncake format only: requests come in pairs with equal timestamps (the real trace's batches)."""


SHAPES = (
    Shape("swing", swing, 2400, 1, batched=True),
    Shape("step", step, 720, 5),
    Shape("flat", lambda t: 3.0, 1200, 7),
    Shape("ramp-up", lambda t: 1.0 + 6.0 * t / 1200, 1200, 11),
    Shape("ramp-down", lambda t: 7.0 - 6.0 * t / 1200, 1200, 13),
    Shape("on-off-60s", on_off(60, 120, 6.0, 0.3), 1800, 17),
    Shape("on-off-300s", on_off(300, 300, 6.0, 0.5), 1800, 19),
    Shape("spikes-10s", spikes(2.0, 12.0, 150, 10), 1800, 23),
    Shape("slow-wave", lambda t: 4.0 + 3.0 * math.sin(2 * math.pi * t / 600), 1800, 29),
)


def shape_named(name: str) -> Shape:
    return next(shape for shape in SHAPES if shape.name == name)


def write_shape(shape: Shape, out: Path, fmt: str) -> Path:
    """One shape in one format ("azure" or "mooncake"), named after both."""
    arrivals = poisson(shape.rate, shape.seconds, shape.seed)
    if fmt == "azure":
        return write_azure(out / f"{shape.name}.csv", arrivals, shape.seed + 1)
    if shape.batched:
        arrivals = np.repeat(arrivals[::2], 2)
    return write_mooncake(out / f"{shape.name}.jsonl", arrivals, shape.seed + 1)


def write_family(out: Path, seed_offset: int = 0) -> list[Path]:
    """Every shape in both formats; a `seed_offset` re-seeds every shape (the same shapes, other arrivals)."""
    out.mkdir(parents=True, exist_ok=True)
    shapes = [replace(shape, seed=shape.seed + seed_offset) for shape in SHAPES]
    return [write_shape(shape, out, fmt) for shape in shapes for fmt in ("azure", "mooncake")]
