"""The frontier table: `bench/autoscale.py --frontier` on every trace the repository has, as one Markdown table.

    python bench/autoscale_frontier.py --jobs 2                      # family, shipped and day-long traces
    python bench/autoscale_frontier.py --only day --plot docs/       # the day-long traces, and their plot

Traces: the synthetic family (`bench/synthetic_traces.py`, written to a temporary folder), the shipped traces in
`../shared/traces/` (when present), and the day-long traces in `bench/traces/` with their options
(`fleetsim.day.BENCH_OPTIONS`). Each row: the cheapest zero-miss plan found and the proven bound, then per policy
the cheapest replica-hours at <= 1 % and <= 0.1 % misses (after the first start-up delay; knob swept), and ours
over the cheapest of HPA, KEDA and static. `--json FILE` keeps every report.
"""

import argparse
import json
import sys
import tempfile
from multiprocessing import Pool
from pathlib import Path
from typing import Any

import autoscale
import numpy as np
from fleetsim.baselines import Hpa, Static
from fleetsim.day import BENCH_OPTIONS, DAYS
from fleetsim.ours import Ours
from fleetsim.sim import SimResult, simulate
from fleetsim.synthetic import write_family

HERE = Path(__file__).resolve().parent
SHARED = HERE.parents[1] / "shared" / "traces"
OTHERS = ("hpa", "keda", "static")


def day_paths() -> list[Path]:
    return [next((HERE / "traces").glob(f"{day.name}.*")) for day in DAYS]


def run_one(job: tuple[str, tuple[str, ...]]) -> dict[str, Any]:
    path, options = job
    args = autoscale.parse_args(["--trace", path, "--frontier", "--no-plot", *options])
    report = autoscale.run_trace(path, args)
    report.pop("_scores")
    report["options"] = list(options)
    return report


def ratio(ours: float | None, others: list[float | None]) -> str:
    known = [x for x in others if x is not None]
    if ours is None or not known:
        return "-"
    return f"{ours / min(known):.3f}"


def cell(row: dict[str, Any], key: str) -> str:
    h = row[f"cost_{key}_h"]
    return "never" if h is None else f"{h:.2f}"


def table(reports: list[dict[str, Any]]) -> str:
    lines = [
        "| trace | zero-miss plan found / proven bound (h) | <= 1 %: ours (knob) | HPA | KEDA | static | ours / best "
        "| <= 0.1 %: ours | best other | ours / best |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in reports:
        f = r["frontier"]
        ours = f["sglang-operator"]
        knob = "" if ours["knob_1pct"] is None else f" ({ours['knob_1pct']:g})"
        best01 = [f[p]["cost_01pct_h"] for p in OTHERS if f[p]["cost_01pct_h"] is not None]
        lines.append(
            f"| {r['trace']} | {r['lower_bound_h']} / {r['proven_lower_bound_h']} | {cell(ours, '1pct')}{knob} | "
            + " | ".join(cell(f[p], "1pct") for p in OTHERS)
            + f" | {ratio(ours['cost_1pct_h'], [f[p]['cost_1pct_h'] for p in OTHERS])} | {cell(ours, '01pct')} | "
            + (f"{min(best01):.2f}" if best01 else "never")
            + f" | {ratio(ours['cost_01pct_h'], [f[p]['cost_01pct_h'] for p in OTHERS])} |"
        )
    return "\n".join(lines)


def plot_day(path: Path, out: Path, static_n: int | None) -> dict[str, Any]:
    """Demand, ours (defaults), HPA (default target) and static fleets (sized for the peak, and the smallest at
    <= 1 % misses) over the day, per 5 minutes; returns each run's replica-hours and misses."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    args = autoscale.parse_args(["--trace", str(path), "--no-plot", *BENCH_OPTIONS])
    p = autoscale.prepare(str(path), args)
    runs: list[tuple[str, SimResult]] = [
        ("sglang-operator", simulate(p.trace.arrivals, p.service, Ours(p.spec, p.initial), p.cfg)),
        ("hpa", simulate(p.trace.arrivals, p.service, Hpa(p.target_qps, p.initial, 1, 1000), p.cfg)),
        ("static-peak", simulate(p.trace.arrivals, p.service, Static(int(p.needed.max())), p.cfg)),
    ]
    if static_n:
        runs.append((f"static-{static_n}", simulate(p.trace.arrivals, p.service, Static(static_n), p.cfg)))
    fig, ax = plt.subplots(figsize=(11, 4.5))
    per = 20  # 15 s bins in 5 minutes
    need = p.needed[: len(p.needed) // per * per].reshape(-1, per)
    hours = np.arange(len(need)) * per * autoscale.BIN_S / 3600.0
    ax.fill_between(hours, need.max(axis=1), step="post", color="0.88", label="demand: busiest 15 s of 5 min")
    ax.step(hours, need.mean(axis=1), where="post", color="0.55", lw=0.8, label="demand: 5-minute mean")
    summary: dict[str, Any] = {}
    for name, r in runs:
        late = p.trace.arrivals >= args.startup
        miss = 100.0 * float(np.mean(r.waits[late] > args.slo_wait))
        hours_paid = r.replica_seconds / 3600.0
        summary[name] = {"replica_hours": round(hours_paid, 2), "slo_miss_pct": round(miss, 3)}
        style: dict[str, Any] = {"lw": 1.6} if name == "sglang-operator" else {"lw": 0.9}
        ax.step(np.asarray(r.timeline_t) / 3600.0, r.timeline_replicas, where="post", **style,
                label=f"{name}: {hours_paid:.0f} replica-h, {miss:.2f} % misses")  # fmt: skip
    ax.set_xlabel("hours")
    ax.set_ylabel("replicas (ready + starting)")
    ax.set_xlim(0, 24)
    ax.set_title(f"{p.trace.name} ({' '.join(BENCH_OPTIONS)}): defaults of each policy", fontsize=9)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    out.mkdir(parents=True, exist_ok=True)
    fig.savefig(out / f"autoscaling-{p.trace.name.split('.')[0]}.png", dpi=72)
    plt.close(fig)
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", choices=("family", "shipped", "day"), action="append", default=None)
    parser.add_argument("--jobs", type=int, default=1, help="traces run at once (at most 2 on a shared machine)")
    parser.add_argument("--json", type=Path, default=None, help="write every report here")
    parser.add_argument("--plot", type=Path, default=None, help="write the day-long traces' plots into this folder")
    parser.add_argument("--trace", action="append", default=[], help="further traces (default options)")
    args = parser.parse_args(argv)
    kinds = set(args.only or ("family", "shipped", "day"))
    with tempfile.TemporaryDirectory(prefix="frontier-") as tmp:
        jobs: list[tuple[str, tuple[str, ...]]] = [(t, ()) for t in args.trace]
        if "day" in kinds:
            jobs += [(str(path), BENCH_OPTIONS) for path in day_paths()]
        if "shipped" in kinds and SHARED.is_dir():
            jobs += [(str(path), ()) for path in sorted(SHARED.glob("*")) if path.suffix in (".csv", ".jsonl")]
        if "family" in kinds:
            jobs += [(str(path), ()) for path in write_family(Path(tmp))]
        with Pool(max(1, args.jobs)) as pool:
            reports = pool.map(run_one, jobs, chunksize=1)
    print(table(reports))
    if args.plot is not None:
        for path in day_paths():
            report = next(r for r in reports if Path(r["trace"]).name == path.name) if "day" in kinds else None
            static = report["frontier"]["static"]["knob_1pct"] if report else None
            summary = plot_day(path, args.plot, int(static) if static else None)
            print(path.name, json.dumps(summary))
    if args.json is not None:
        args.json.write_text(json.dumps(reports, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
