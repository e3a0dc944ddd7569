"""Sweep the operator policy's settings over several traces and mark where it dominates HPA and KEDA.

    python bench/autoscale_sweep.py --trace A.csv --trace B.jsonl \\
        --grid targets.headroom=0.1,0.2,0.3 --grid windows.scaleDownStabilizationSeconds=180,300 [--json]

Every trace is prepared once (replay, oracle plan, HPA and KEDA runs) with the fleet options of
`bench/autoscale.py`; then the policy runs once per point of the grid (the cartesian product of the --grid values,
on top of any --set). The baselines keep the target the default headroom implies, so every point is compared
against the same HPA and KEDA. One row per point: replica-hours / SLO miss % per trace with a mark per baseline
(Y dominates, c costs more, m misses more, = ties) and the misses minus those HPA would have at the same
replica-hours (HPA re-run at other targets, interpolated; negative is better), then how many traces it dominates
both baselines on and how many it beats HPA on at equal cost.
"""

import argparse
import itertools
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing import Pool
from typing import TypeVar

import autoscale
from fleetsim.ours import Ours
from fleetsim.report import Score, dominates, interpolate_miss, score
from fleetsim.sim import simulate

BASELINES = ("hpa", "keda")
J = TypeVar("J")
R = TypeVar("R")


@dataclass(frozen=True)
class Case:
    """One prepared trace, the baselines' scores on it and HPA's cost/miss line (HPA at other targets)."""

    name: str
    prepared: autoscale.Prepared
    baseline_scores: dict[str, Score]
    hpa_line: list[tuple[float, float]]


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, list[list[str]]]:
    grid = argparse.ArgumentParser(add_help=False)
    grid.add_argument("--grid", action="append", default=[], metavar="FIELD=V1,V2,...")
    grid.add_argument("--jobs", type=int, default=1, help="worker processes")
    ours, rest = grid.parse_known_args(argv)
    args = autoscale.parse_args(rest)
    axes = []
    for item in ours.grid:
        field, _, values = item.partition("=")
        axes.append([f"{field}={v}" for v in values.split(",")])
    args.jobs = ours.jobs
    return args, [list(point) for point in itertools.product(*axes)]


def mark(ours: Score, other: Score) -> str:
    """One letter: Y dominates, = ties, c costs more (no more misses), m misses more."""
    if dominates(ours, other):
        return "Y"
    if ours.slo_miss_pct > other.slo_miss_pct + 1e-9:
        return "m"
    return "c" if ours.replica_hours > other.replica_hours + 1e-9 else "="


def prepare_case(path: str, args: argparse.Namespace) -> Case:
    p = autoscale.prepare(path, args)
    scores = {}
    for ctrl in autoscale.baselines(p, args):
        scores[ctrl.name] = score(simulate(p.trace.arrivals, p.service, ctrl, p.cfg), args.slo_wait)
    return Case(p.trace.name, p, scores, [(rh, m) for _, rh, m in autoscale.hpa_frontier(p, args)])


def equal_cost_gap(case: Case, ours: Score) -> float | None:
    """The policy's misses minus those HPA would have at its replica-hours (HPA's line interpolated; negative is
    better), rounded; None outside HPA's measured range."""
    hpa_there = interpolate_miss(case.hpa_line, ours.replica_hours)
    return None if hpa_there is None else round(ours.slo_miss_pct - hpa_there, 3)


def run_jobs(fn: Callable[[J], R], jobs: list[J], workers: int) -> list[R]:
    """`fn` over `jobs`, in order, in `workers` processes (in this one when 1)."""
    if workers > 1:
        with Pool(workers) as pool:
            return pool.map(fn, jobs)
    return [fn(job) for job in jobs]


def evaluate(job: tuple[Case, list[str], float]) -> Score:
    case, point, slo_wait = job
    spec = autoscale.override(case.prepared.spec, point)
    p = case.prepared
    return score(simulate(p.trace.arrivals, p.service, Ours(spec, p.initial), p.cfg), slo_wait)


def _row(point: list[str], cases: list[Case], scores: list[Score]) -> dict[str, object]:
    """The JSON row of one grid point: per trace its hours, misses, marks and misses minus HPA's at the same hours
    (negative: better than HPA at equal cost; None outside HPA's measured range); then the count dominated on both
    baselines, the count better than HPA at equal cost, and the mean of those differences."""
    traces: dict[str, dict[str, object]] = {}
    dominated = 0
    gaps = []
    for case, ours in zip(cases, scores, strict=True):
        marks = {b: mark(ours, case.baseline_scores[b]) for b in BASELINES}
        dominated += all(m == "Y" for m in marks.values())
        gap = equal_cost_gap(case, ours)
        if gap is not None:
            gaps.append(gap)
        traces[case.name] = {
            "replica_hours": round(ours.replica_hours, 4),
            "slo_miss_pct": round(ours.slo_miss_pct, 4),
            "marks": marks,
            "vs_hpa_at_equal_cost": gap,
        }
    return {
        "set": point,
        "traces": traces,
        "dominated_traces": dominated,
        "better_at_equal_cost": sum(g < 0 for g in gaps),
        "mean_vs_hpa_at_equal_cost": round(sum(gaps) / len(gaps), 3) if gaps else None,
    }


def _cells(row: dict[str, object]) -> list[tuple[str, str]]:
    traces = row["traces"]
    assert isinstance(traces, dict)
    cells = []
    for name, t in traces.items():
        gap = t["vs_hpa_at_equal_cost"]
        versus = "" if gap is None else f" {gap:+.1f}"
        cells.append((name, f"{t['replica_hours']:.2f}/{t['slo_miss_pct']:.1f} {''.join(t['marks'].values())}{versus}"))
    return cells


def main(argv: list[str] | None = None) -> int:
    args, points = parse_args(argv)
    cases = [prepare_case(path, args) for path in args.trace]
    jobs = [(case, point, args.slo_wait) for point in points for case in cases]
    results = run_jobs(evaluate, jobs, args.jobs)
    rows = [_row(point, cases, results[i * len(cases) : (i + 1) * len(cases)]) for i, point in enumerate(points)]
    if args.json:
        baselines = {
            c.name: {b: [round(s.replica_hours, 4), round(s.slo_miss_pct, 4)] for b, s in c.baseline_scores.items()}
            for c in cases
        }
        print(json.dumps({"baselines": baselines, "points": rows}))
        return 0
    for case in cases:
        line = ", ".join(
            f"{b} {s.replica_hours:.2f} h / {s.slo_miss_pct:.1f} %" for b, s in case.baseline_scores.items()
        )
        print(f"{case.name}: {line}")
    for point, row in zip(points, rows, strict=True):
        print(
            f"{row['dominated_traces']}/{len(cases)} dominated, {row['better_at_equal_cost']} better than HPA at "
            f"equal cost (mean {row['mean_vs_hpa_at_equal_cost']} points)  {' '.join(point) or '(defaults)'}"
        )
        print("    " + "  ".join(f"{name} {cell}" for name, cell in _cells(row)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
