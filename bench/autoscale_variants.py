"""The benchmark on variants of real traces: stretches of each trace, other time scales, fleet sizes, start-up
delays, slot counts and replay seeds, with the policy's defaults (or --set) against HPA and KEDA on each.

    python bench/autoscale_variants.py --trace ../shared/traces/AzureLLMInferenceTrace_code.csv \\
        --trace ../shared/traces/mooncake_synthetic_trace.jsonl --jobs 2 [--json]

A policy tuned on whole traces can dominate one by luck: lean where the baselines spend and generous where they
save, summing to a little less of both. Its halves, thirds and faster or slower replays are traces in the same
formats, so the requirement (dominate HPA and KEDA on any trace) applies to each. Every variant is one set of
`bench/autoscale.py` options on top of those given here; one row per variant with the policy's and the baselines'
replica-hours / SLO miss %, a mark per baseline (Y dominates, c costs more, m misses more, = ties) and the misses
minus those HPA would have at the same replica-hours (negative is better); then the counts.
"""

import argparse
import json
import sys
from dataclasses import dataclass

import autoscale
import autoscale_sweep
from fleetsim import traces
from fleetsim.report import Score

STRETCHES = ((0.0, 0.5), (0.5, 0.5), (0.25, 0.5), (0.0, 1 / 3), (1 / 3, 1 / 3), (2 / 3, 1 / 3))
"""(start, length) as fractions of the trace: both halves, the middle half and the thirds."""
OPTIONS = (
    ("--time-scale", ("0.5", "1.5", "2")),
    ("--min-peak-replicas", ("5", "15", "20")),
    ("--startup", ("60", "240")),
    ("--concurrency", ("16", "64")),
    ("--seed", ("1", "2", "3")),
)
POLICIES = ("sglang-operator", *autoscale_sweep.BASELINES)


@dataclass(frozen=True)
class Variant:
    trace: str
    options: tuple[str, ...]
    name: str


def variants(path: str, args: argparse.Namespace) -> list[Variant]:
    """The trace as given, its stretches (of the window `args` selects, in its seconds) and one option changed at a
    time."""
    base = traces.window(traces.load(path), args.max_seconds, args.time_scale, args.start_seconds)
    duration = float(base.arrivals[-1])
    options: list[tuple[str, ...]] = [
        ("--start-seconds", f"{args.start_seconds + start * duration:.0f}", "--max-seconds", f"{length * duration:.0f}")
        for start, length in STRETCHES
    ]
    options += [(flag, value) for flag, values in OPTIONS for value in values]
    given = Variant(path, (), f"{base.name} as given")
    return [given, *(Variant(path, o, " ".join((base.name, *o))) for o in options)]


def _run(job: tuple[Variant, list[str]]) -> tuple[autoscale_sweep.Case, Score]:
    """Prepare one variant (replay, baselines, HPA's line) and run the policy on it."""
    variant, common = job
    args = autoscale.parse_args(["--trace", variant.trace, *common, *variant.options])
    case = autoscale_sweep.prepare_case(variant.trace, args)
    return case, autoscale_sweep.evaluate((case, [], args.slo_wait))


@dataclass(frozen=True)
class Row:
    """One variant's result: replica-hours and SLO miss % per policy, a mark per baseline, and the misses minus
    those HPA would have at the policy's replica-hours (None outside HPA's measured range)."""

    variant: str
    scores: dict[str, tuple[float, float]]
    marks: dict[str, str]
    vs_hpa_at_equal_cost: float | None

    @classmethod
    def of(cls, variant: Variant, case: autoscale_sweep.Case, ours: Score) -> "Row":
        scores = {"sglang-operator": ours, **case.baseline_scores}
        return cls(
            variant=variant.name,
            scores={name: (round(s.replica_hours, 4), round(s.slo_miss_pct, 4)) for name, s in scores.items()},
            marks={b: autoscale_sweep.mark(ours, case.baseline_scores[b]) for b in autoscale_sweep.BASELINES},
            vs_hpa_at_equal_cost=autoscale_sweep.equal_cost_gap(case, ours),
        )

    def line(self, width: int) -> str:
        cells = "  ".join(f"{self.scores[p][0]:7.3f} h/{self.scores[p][1]:5.2f}" for p in POLICIES)
        gap = "" if self.vs_hpa_at_equal_cost is None else f"{self.vs_hpa_at_equal_cost:+.1f}"
        return f"{self.variant:{width}s}  {cells}  {''.join(self.marks.values()):5s}  {gap}"


def main(argv: list[str] | None = None) -> int:
    jobs_option = argparse.ArgumentParser(add_help=False)
    jobs_option.add_argument("--jobs", type=int, default=1, help="worker processes")
    mine, rest = jobs_option.parse_known_args(sys.argv[1:] if argv is None else argv)
    args = autoscale.parse_args(rest)
    common = _without_traces(rest)
    jobs = [(v, common) for path in args.trace for v in variants(path, args)]
    results = autoscale_sweep.run_jobs(_run, jobs, mine.jobs)
    rows = [Row.of(variant, case, ours) for (variant, _), (case, ours) in zip(jobs, results, strict=True)]
    gaps = [r.vs_hpa_at_equal_cost for r in rows if r.vs_hpa_at_equal_cost is not None]
    summary = {
        "variants": len(rows),
        "dominated": sum(set(r.marks.values()) == {"Y"} for r in rows),
        "better_at_equal_cost": sum(g < 0 for g in gaps),
        "mean_vs_hpa_at_equal_cost": round(sum(gaps) / len(gaps), 3) if gaps else None,
    }
    if args.json:
        print(json.dumps({"variants": [_json(r) for r in rows], "summary": summary}))
        return 0
    width = max(len(r.variant) for r in rows)
    print(f"{'variant':{width}s}  {'sglang-operator':>15s}  {'hpa':>15s}  {'keda':>15s}  marks  vs HPA")
    for r in rows:
        print(r.line(width))
    print(
        f"dominates both on {summary['dominated']} of {summary['variants']}, better than HPA at equal cost on "
        f"{summary['better_at_equal_cost']} (mean {summary['mean_vs_hpa_at_equal_cost']} points)"
    )
    return 0


def _json(row: Row) -> dict[str, object]:
    return {"variant": row.variant, **row.scores, "marks": row.marks, "vs_hpa_at_equal_cost": row.vs_hpa_at_equal_cost}


def _without_traces(argv: list[str]) -> list[str]:
    """The options every variant shares: argv without --trace FILE (or --trace=FILE) and --json."""
    out, skip = [], False
    for arg in argv:
        if not skip and arg not in ("--trace", "--json") and not arg.startswith("--trace="):
            out.append(arg)
        skip = arg == "--trace"
    return out


if __name__ == "__main__":
    sys.exit(main())
