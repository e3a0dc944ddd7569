"""Cost at equal SLO: each policy's one knob swept, and the cheapest replica-hours at which it reaches a miss target.

A policy is a line of (replica-hours, SLO miss %) points, one per value of its knob, not one point: comparing two
policies at their defaults compares two points of two lines. `cheapest` walks a knob's grid (more capacity as the
knob grows), then bisects between each pair of neighbours where the misses cross the target, and returns the
cheapest run that meets it. Misses are not strictly monotone in a knob (one decision more or less), so every
evaluated point counts, not only the last one of the bisection.

Also here: `zero_miss_plans`, the cheapest zero-miss plan the benchmark can find (the greedy `slo-oracle` at
several resolutions, each checked in the simulator), and `proven_bound_s`, a true lower bound on what any zero-miss
plan pays (a relaxation: see its docstring).
"""

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Point:
    knob: float
    replica_hours: float
    miss_pct: float


def cheapest(
    run: Callable[[float], Point],
    grid: Sequence[float],
    targets: Sequence[float],
    steps: int,
    integer: bool = False,
) -> tuple[dict[float, Point | None], list[Point]]:
    """For each miss target (percent), the cheapest evaluated point at or under it (None: never reached on the
    grid); and every point evaluated, by knob. Between two grid neighbours that straddle a target, `steps` rounds of
    bisection (on integers when `integer`)."""
    seen: dict[float, Point] = {}

    def at(knob: float) -> Point:
        if knob not in seen:
            seen[knob] = run(knob)
        return seen[knob]

    for knob in grid:
        at(knob)
    for target in targets:
        ordered = sorted(seen)
        for lo, hi in itertools.pairwise(ordered):
            if not (seen[lo].miss_pct > target >= seen[hi].miss_pct):
                continue
            for _ in range(steps):
                mid = math.floor((lo + hi) / 2) if integer else (lo + hi) / 2
                if mid in (lo, hi):
                    break
                if at(mid).miss_pct <= target:
                    hi = mid
                else:
                    lo = mid
    points = [seen[k] for k in sorted(seen)]
    best: dict[float, Point | None] = {}
    for target in targets:
        meeting = [p for p in points if p.miss_pct <= target]
        best[target] = min(meeting, key=lambda p: p.replica_hours) if meeting else None
    return best, points


def smallest_static(run: Callable[[int], Point], high: int, target: float) -> Point | None:
    """The smallest static fleet meeting `target`, by binary search: more replicas never delay a FIFO start, so a
    static fleet's misses never grow with its size."""
    lo, hi = 0, high  # lo fails (0 replicas serve nothing); hi is checked first
    top = run(hi)
    while top.miss_pct > target:
        lo, hi = hi, 2 * hi
        top = run(hi)
        if hi > 4096:
            return None
    best = top
    while hi - lo > 1:
        mid = (lo + hi) // 2
        p = run(mid)
        if p.miss_pct <= target:
            hi, best = mid, p
        else:
            lo = mid
    return best


def proven_bound_s(
    arrivals: np.ndarray, service: np.ndarray, concurrency: int, slo_wait_s: float, startup_s: float
) -> float:
    """Replica-seconds every zero-miss plan pays at least (a true lower bound, for the simulator's model).

    A request that starts within `slo_wait_s` of its arrival is certainly in a slot from arrival + SLO to arrival +
    service time, wherever it started; so at each moment the ready replicas hold at least ceil(those requests / C).
    Replica k of that profile (needed whenever it asks for k or more) costs its time on, plus for each gap the
    cheaper of keeping it (the gap) and starting it again (the start-up delay), plus before its first use the
    cheaper of the time since 0 (ready from the start) and a start-up. The bound ignores requests shorter than the
    SLO wait (they can be delayed out of any moment) and all queueing between requests, so it is loose wherever
    short requests dominate; the larger of it and the total work / C is returned.
    """
    long_ = service > slo_wait_s
    starts = arrivals[long_] + slo_wait_s
    ends = arrivals[long_] + service[long_]
    work = float(service.sum()) / concurrency
    if not long_.any():
        return work
    times = np.concatenate([starts, ends])
    delta = np.concatenate([np.ones(len(starts)), -np.ones(len(ends))])
    order = np.argsort(times, kind="stable")
    times, running = times[order], np.cumsum(delta[order])
    need = np.ceil(running / concurrency).astype(int)
    durations = np.diff(times, append=times[-1])
    total = 0.0
    for level in range(1, int(need.max()) + 1):
        on = need >= level
        total += float(durations[on].sum())
        edges = np.flatnonzero(np.diff(on.astype(int)))  # index i: the state changes after segment i
        first = int(np.argmax(on))
        total += min(float(times[first]), startup_s)
        rises = edges[on[edges + 1]]  # off -> on
        falls = edges[~on[edges + 1]]  # on -> off
        nxt = np.searchsorted(rises, falls, side="right")  # the rise after each fall, if any
        back = nxt < len(rises)
        gaps = times[rises[nxt[back]] + 1] - times[falls[back] + 1]
        total += float(np.minimum(gaps, startup_s).sum())
    return max(total, work)
