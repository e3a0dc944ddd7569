"""Turning simulation results into the numbers, the table and the plot the benchmark prints."""

import itertools
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .sim import SimResult

NEVER_SERVED_S = 1e9  # a request still waiting when the simulation gives up (a fleet stuck at zero)


@dataclass(frozen=True)
class Score:
    name: str
    replica_hours: float
    slo_miss_pct: float
    p99_wait_s: float
    scale_events: int


def score(result: SimResult, slo_wait_s: float) -> Score:
    waits = result.waits
    return Score(
        name=result.name,
        replica_hours=result.replica_seconds / 3600.0,
        slo_miss_pct=100.0 * float(np.mean(waits > slo_wait_s)) if len(waits) else 0.0,
        p99_wait_s=float(np.percentile(np.minimum(waits, NEVER_SERVED_S), 99)) if len(waits) else 0.0,
        scale_events=result.scale_events,
    )


def dominates(a: Score, b: Score) -> bool:
    """No more replica-hours and no more SLO misses, and strictly fewer of at least one."""
    no_worse = a.replica_hours <= b.replica_hours + 1e-9 and a.slo_miss_pct <= b.slo_miss_pct + 1e-9
    better = a.replica_hours < b.replica_hours - 1e-9 or a.slo_miss_pct < b.slo_miss_pct - 1e-9
    return no_worse and better


def interpolate_miss(points: list[tuple[float, float]], hours: float) -> float | None:
    """Misses a policy family would have at `hours` replica-hours, linear between its measured (hours, miss %)
    points; None outside their range. Misses fall as hours grow, so the points are taken in order of hours."""
    pts = sorted(points)
    for (h0, m0), (h1, m1) in itertools.pairwise(pts):
        if h0 <= hours <= h1:
            return round(m0 if h1 == h0 else m0 + (m1 - m0) * (hours - h0) / (h1 - h0), 3)
    return None


def table(title: str, scores: list[Score], oracle_hours: float) -> str:
    lines = [title, f"{'policy':<16}{'replica-h':>10}{'x oracle':>9}{'SLO miss %':>11}{'p99 wait s':>11}{'events':>8}"]
    for s in scores:
        ratio = s.replica_hours / oracle_hours if oracle_hours > 0 else float("nan")
        lines.append(
            f"{s.name:<16}{s.replica_hours:>10.2f}{ratio:>9.3f}{s.slo_miss_pct:>11.3f}"
            f"{s.p99_wait_s:>11.2f}{s.scale_events:>8d}"
        )
    return "\n".join(lines)


def plot(
    path: Path,
    title: str,
    bin_s: float,
    needed: np.ndarray,
    results: list[SimResult],
    arrivals: np.ndarray,
    slo_wait_s: float,
) -> None:
    """Demand (the oracle's need), replicas paid for by each policy, and SLO misses per minute."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 6), sharex=True, height_ratios=(3, 1.4))
    minutes = np.arange(len(needed)) * bin_s / 60.0
    top.fill_between(minutes, needed, step="post", color="0.85", label="demand: replicas the capacity rule needs")
    for r in results:
        if r.name == "static-peak":
            continue  # a flat line at the peak of the demand: it only squeezes the others
        style = {"lw": 1.6} if r.name == "sglang-operator" else {"lw": 0.9, "alpha": 0.85}
        top.step(np.asarray(r.timeline_t) / 60.0, r.timeline_replicas, where="post", label=r.name, **style)
        missed = arrivals[r.waits > slo_wait_s] / 60.0
        counts, edges = np.histogram(missed, bins=np.arange(0.0, minutes[-1] + 2.0))
        bottom.step(edges[:-1], counts, where="post", label=r.name, **style)
    top.set_ylabel("replicas (ready + starting)")
    top.set_title("\n".join(_wrap(title, 120)), fontsize=8)
    top.legend(fontsize=7, ncol=3, loc="upper right")
    bottom.set_ylabel("SLO misses / min")
    bottom.set_xlabel("minutes")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=72)
    plt.close(fig)


def _wrap(text: str, width: int) -> list[str]:
    lines, line = [], ""
    for word in text.split():
        if line and len(line) + len(word) + 1 > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}".strip()
    return [*lines, line]
