"""Autoscaling benchmark: the operator's policy against HPA, KEDA, a static peak fleet and an oracle on real traces.

    python bench/autoscale.py --trace ../shared/traces/AzureLLMInferenceTrace_code.csv [--json]

Each request of the trace is replayed K times with jitter (default: the smallest K for which the oracle needs at
least --min-peak-replicas at peak), served by replicas of C slots each with service time from its tokens, through
the simulator in fleetsim/sim.py. Replica-hours count starting and draining replicas; a request misses the SLO when
it waits longer than --slo-wait for a slot. See docs/autoscaling.md for the model and the baselines' targets.
"""

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass
from multiprocessing import Pool
from pathlib import Path

import numpy as np
from fleetsim import frontier, traces
from fleetsim.baselines import Hpa, Keda, Oracle, Static, capacity_need, oracle_plan, slo_need
from fleetsim.ours import Ours
from fleetsim.report import Score, dominates, interpolate_miss, plot, score, table
from fleetsim.sim import Controller, SimConfig, SimResult, simulate

from sglang_operator.api.spec import AutoscalingSpec

BIN_S = 15.0  # the oracle's interval: the autoscalers' decision interval
SLO_BIN_S = 1.0  # the zero-miss oracle's resolution
FRONTIER_HEADROOMS = (0.0, 0.15, 0.3, 0.5, 0.8, 1.2, 2.0)
KNOB_GRID = (0.0, 0.15, 0.3, 0.6, 1.0, 2.0, 3.0)  # --frontier: headroom of ours, and of HPA's / KEDA's target
MISS_TARGETS = (1.0, 0.1)  # percent: the frontier's two SLO targets
BISECT_STEPS = 3
LOWER_BOUND_BINS_S = (1.0, 5.0, 10.0, 20.0)  # the greedy zero-miss plan's resolutions tried for the lower bound
FRONTIER_POLICIES = ("sglang-operator", "hpa", "keda", "static")
OUR_KNOB = "targets.headroom"  # ours' knob on the frontier (why this one: docs/autoscaling-experiments.md)
STATIC_ABOVE_PEAK = 2  # --frontier's static fleets go from 1 to the oracle's peak plus this
HISTORY_RATE_S = 60.0  # the pre-trace history runs at the trace's mean rate over its first minute


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trace", action="append", required=True, help="Azure CSV or Mooncake JSONL (repeatable)")
    p.add_argument("--json", action="store_true", help="print one JSON object per trace instead of tables")
    p.add_argument("--scale", type=int, default=None, help="replay each request K times (default: auto)")
    p.add_argument("--min-peak-replicas", type=int, default=10, help="auto K: oracle peak at least this")
    p.add_argument("--jitter", type=float, default=1.0, help="seconds of uniform jitter per replayed copy")
    p.add_argument("--time-scale", type=float, default=1.0, help="compress the trace's time by this factor")
    p.add_argument("--start-seconds", type=float, default=0.0, help="skip the first seconds (after compression)")
    p.add_argument("--max-seconds", type=float, default=None, help="use only the first seconds (after the skip)")
    p.add_argument("--concurrency", type=int, default=32, help="C: requests one replica serves at once")
    p.add_argument("--prefill-tps", type=float, default=10000.0, help="prompt tokens/s for one request")
    p.add_argument("--decode-tps", type=float, default=50.0, help="output tokens/s for one request")
    p.add_argument("--startup", type=float, default=120.0, help="seconds from start to ready for a new replica")
    p.add_argument("--scrape", type=float, default=15.0, help="Prometheus scrape interval, seconds")
    p.add_argument("--slo-wait", type=float, default=1.0, help="a request waiting longer misses the SLO")
    p.add_argument("--headroom", type=float, default=None, help="headroom for every policy (default: spec's)")
    p.add_argument(
        "--baseline-qps",
        choices=("arrivals", "finished"),
        default="arrivals",
        help="request counter HPA/KEDA read: the router's arrivals (as the policy) or the workers' finished requests",
    )
    p.add_argument("--min-replicas", type=int, default=1)
    p.add_argument("--max-replicas", type=int, default=1000)
    p.add_argument("--warm-replicas", type=int, default=0, help="warm replicas for the operator's policy")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="override the operator policy's spec.autoscaling field, e.g. windows.scaleDownStabilizationSeconds=300",
    )
    p.add_argument(
        "--frontier",
        action="store_true",
        help="sweep each policy's knob (ours: targets.headroom; HPA/KEDA: the target per replica; static: the "
        "count) for the cheapest replica-hours at <= 1 %% and <= 0.1 %% misses, and find the cheapest zero-miss "
        "plan; implies --equal-cost",
    )
    p.add_argument(
        "--equal-cost",
        action="store_true",
        help="also run HPA at other targets and static fleets of every size, and report the misses each would have "
        "at the policy's (and the static fleets at HPA's) replica-hours (--frontier does this too)",
    )
    p.add_argument(
        "--jobs", type=int, default=1, help="--frontier: worker processes for the policies' sweeps (at most 2 here)"
    )
    p.add_argument("--only", action="append", default=None, help="run only these policies (debugging)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=Path(__file__).parent / "out", help="where PNGs go")
    p.add_argument("--no-plot", action="store_true")
    return p.parse_args(argv)


def choose_scale(base: traces.Trace, args: argparse.Namespace) -> int:
    """Smallest K whose replay makes the oracle need --min-peak-replicas at peak."""

    def peak(k: int) -> int:
        tr = traces.replay(base, k, args.jitter, args.seed)
        svc = traces.service_times(tr, args.prefill_tps, args.decode_tps)
        return int(capacity_need(tr.arrivals, svc, args.concurrency, BIN_S).max())

    k: int = max(1, math.floor(args.min_peak_replicas / max(peak(1), 1)))
    for _ in range(1000):
        if peak(k) >= args.min_peak_replicas:
            return k
        k += 1
    return k


@dataclass(frozen=True)
class Prepared:
    """One trace made ready for simulation: the replayed requests and everything every policy shares."""

    base: traces.Trace
    scale: int
    trace: traces.Trace
    service: np.ndarray
    needed: np.ndarray
    plan: np.ndarray
    spec: AutoscalingSpec
    target_qps: float
    initial: int
    cfg: SimConfig


def prepare(path: str, args: argparse.Namespace) -> Prepared:
    """Load, slice, compress and replay a trace; derive the oracle's plan, the policy's spec and the baselines'
    target: the QPS per replica that C and the trace's mean slot time imply at the spec's default headroom (or
    --headroom), which is what an operator would compute from a load test. `--set` overrides reach the policy
    only, so tuning it is always measured against the same HPA and KEDA."""
    base = traces.window(traces.load(path), args.max_seconds, args.time_scale, args.start_seconds)
    k = args.scale or choose_scale(base, args)
    tr = traces.replay(base, k, args.jitter, args.seed)
    svc = traces.service_times(tr, args.prefill_tps, args.decode_tps)
    needed = capacity_need(tr.arrivals, svc, args.concurrency, BIN_S)
    spec = AutoscalingSpec(
        enabled=True,
        min_replicas=args.min_replicas,
        max_replicas=args.max_replicas,
        warm_replicas=args.warm_replicas,
        startup_seconds=int(args.startup),
    )
    spec = override(spec, [f"targets.headroom={args.headroom}"] if args.headroom is not None else [])
    target_qps = args.concurrency / (float(svc.mean()) * (1.0 + spec.targets.headroom))
    spec = override(spec, args.set)  # --set tunes the policy only; --headroom moves the baselines' target too
    plan = oracle_plan(needed, BIN_S, args.startup)
    return Prepared(base, k, tr, svc, needed, plan, spec, target_qps, int(plan[0]), sim_config(tr, svc, args))


def baselines(p: Prepared, args: argparse.Namespace) -> list[Controller]:
    finished = args.baseline_qps == "finished"
    return [
        Hpa(p.target_qps, p.initial, args.min_replicas, args.max_replicas, finished=finished),
        Keda(p.target_qps, p.initial, args.min_replicas, args.max_replicas, finished=finished),
    ]


def hpa_frontier(p: Prepared, args: argparse.Namespace) -> list[tuple[float, float, float]]:
    """(headroom, replica-hours, SLO miss %) of HPA at the targets FRONTIER_HEADROOMS imply: its cost/miss line."""
    points = []
    for h in FRONTIER_HEADROOMS:
        target = args.concurrency / (float(p.service.mean()) * (1.0 + h))
        hpa = Hpa(target, p.initial, args.min_replicas, args.max_replicas, args.baseline_qps == "finished")
        s = score(simulate(p.trace.arrivals, p.service, hpa, p.cfg), args.slo_wait)
        points.append((h, s.replica_hours, s.slo_miss_pct))
    return points


def static_frontier(p: Prepared, args: argparse.Namespace) -> list[tuple[int, float, float]]:
    """(replicas, replica-hours, SLO miss %) of static fleets from 1 to the oracle's peak + STATIC_ABOVE_PEAK."""
    points = []
    for n in range(1, int(p.needed.max()) + STATIC_ABOVE_PEAK + 1):
        s = score(simulate(p.trace.arrivals, p.service, Static(n, name=f"static-{n}"), p.cfg), args.slo_wait)
        points.append((n, s.replica_hours, s.slo_miss_pct))
    return points


def settled_miss_pct(p: Prepared, result: SimResult, args: argparse.Namespace) -> float:
    """SLO misses among the requests that arrive after the first start-up delay: before it, no policy can have
    added a replica, so those misses are the opening count's, the same for every policy that starts there."""
    late = p.trace.arrivals >= args.startup
    if not late.any():
        return 0.0
    return 100.0 * float(np.mean(result.waits[late] > args.slo_wait))


def knob_point(p: Prepared, args: argparse.Namespace, policy: str, knob: float) -> frontier.Point:
    """One run of `policy` with its knob at `knob`: ours with targets.headroom = knob; HPA and KEDA with the target
    C / (mean slot x (1 + knob)); static with `knob` replicas."""
    finished = args.baseline_qps == "finished"
    target = args.concurrency / (float(p.service.mean()) * (1.0 + knob))
    ctrl: Controller
    if policy == "sglang-operator":
        ctrl = Ours(override(p.spec, [f"{OUR_KNOB}={knob}"]), p.initial)
    elif policy == "hpa":
        ctrl = Hpa(target, p.initial, args.min_replicas, args.max_replicas, finished=finished)
    elif policy == "keda":
        ctrl = Keda(target, p.initial, args.min_replicas, args.max_replicas, finished=finished)
    else:
        ctrl = Static(int(knob), name=f"static-{int(knob)}")
    result = simulate(p.trace.arrivals, p.service, ctrl, p.cfg)
    return frontier.Point(knob, result.replica_seconds / 3600.0, settled_miss_pct(p, result, args))


def policy_frontier(p: Prepared, args: argparse.Namespace, policy: str) -> dict[str, object]:
    """The cheapest replica-hours at which `policy` meets each miss target, its knob there, and every point run."""
    if policy == "static":
        best = {
            target: frontier.smallest_static(
                lambda n: knob_point(p, args, policy, n), max(1, int(p.needed.max())), target
            )
            for target in MISS_TARGETS
        }
        points: list[frontier.Point] = []
    else:
        best, points = frontier.cheapest(
            lambda k: knob_point(p, args, policy, k), KNOB_GRID, MISS_TARGETS, BISECT_STEPS
        )
    out: dict[str, object] = {}
    for target, key in zip(MISS_TARGETS, ("1pct", "01pct"), strict=True):
        point = best[target]
        out[f"cost_{key}_h"] = round(point.replica_hours, 4) if point else None
        out[f"knob_{key}"] = round(point.knob, 4) if point else None
        out[f"miss_{key}_pct"] = round(point.miss_pct, 4) if point else None
    out["points"] = [[round(x.knob, 4), round(x.replica_hours, 4), round(x.miss_pct, 4)] for x in points]
    return out


def zero_miss_plans(p: Prepared, args: argparse.Namespace) -> dict[str, object]:
    """The cheapest zero-miss plan found, and a proven lower bound on every zero-miss plan.

    Found: the greedy zero-miss profile (`slo_need`) at each resolution of LOWER_BOUND_BINS_S, planned as the
    oracle plans (gaps shorter than a start-up bridged, replicas started a start-up ahead), each run in the
    simulator; the cheapest with no miss after the first start-up delay counts. The greedy at 1 s is
    `slo-oracle`. It is a plan, so an upper bound on the cheapest zero-miss cost, not a lower bound.
    Proven: `frontier.proven_bound_s`, which no zero-miss plan can undercut."""
    found: list[tuple[float, float]] = []
    for bin_s in LOWER_BOUND_BINS_S:
        need = slo_need(p.trace.arrivals, p.service, args.concurrency, args.slo_wait, bin_s)
        plan = oracle_plan(need, bin_s, args.startup)
        result = simulate(p.trace.arrivals, p.service, Oracle(plan, bin_s, name=f"zero-miss-{bin_s:g}s"), p.cfg)
        if settled_miss_pct(p, result, args) == 0.0:
            found.append((result.replica_seconds / 3600.0, bin_s))
    proven = frontier.proven_bound_s(p.trace.arrivals, p.service, args.concurrency, args.slo_wait, args.startup)
    best = min(found) if found else None
    return {
        "lower_bound_h": round(best[0], 4) if best else None,
        "lower_bound_bin_s": best[1] if best else None,
        "zero_miss_plans_h": {f"{b:g}s": round(h, 4) for h, b in sorted(found, key=lambda x: x[1])},
        "proven_lower_bound_h": round(proven / 3600.0, 4),
    }


def _frontier_task(job: tuple[Prepared, argparse.Namespace, str]) -> tuple[str, dict[str, object]]:  # a Pool job
    p, args, what = job
    return what, zero_miss_plans(p, args) if what == "bound" else policy_frontier(p, args, what)


def frontiers(p: Prepared, args: argparse.Namespace) -> tuple[dict[str, dict[str, object]], dict[str, object]]:
    """Every policy's frontier and the zero-miss plans, in `--jobs` processes."""
    jobs = [(p, args, what) for what in ("bound", *FRONTIER_POLICIES)]
    if args.jobs > 1:
        with Pool(args.jobs) as pool:
            done = dict(pool.map(_frontier_task, jobs, chunksize=1))
    else:
        done = dict(map(_frontier_task, jobs))
    bound = done.pop("bound")
    return done, bound


def run_trace(path: str, args: argparse.Namespace) -> dict[str, object]:
    started = time.monotonic()
    p = prepare(path, args)
    base, k, tr, svc, needed, plan, spec = p.base, p.scale, p.trace, p.service, p.needed, p.plan, p.spec
    c, target_qps, initial = args.concurrency, p.target_qps, p.initial
    slo_plan = oracle_plan(slo_need(tr.arrivals, svc, c, args.slo_wait, SLO_BIN_S), SLO_BIN_S, args.startup)
    controllers: list[Controller] = [
        Ours(spec, initial),
        *baselines(p, args),
        Static(int(needed.max())),
        Oracle(plan, BIN_S),
        Oracle(slo_plan, SLO_BIN_S, name="slo-oracle"),
    ]
    cfg = p.cfg
    always = {"sglang-operator", "oracle"}
    controllers = [x for x in controllers if args.only is None or x.name in set(args.only) | always]
    results = [simulate(tr.arrivals, svc, ctrl, cfg) for ctrl in controllers]
    scores = {s.name: s for s in (score(r, args.slo_wait) for r in results)}
    ours = scores["sglang-operator"]
    oracle_h = scores["oracle"].replica_hours
    title = (
        f"{tr.name}: {len(base.arrivals)} requests x K={k} = {len(tr.arrivals)}, "
        f"{tr.arrivals[-1] / 60:.1f} min, C={c}, mean slot {svc.mean():.2f}s, start-up {args.startup:.0f}s, "
        f"SLO wait {args.slo_wait:g}s, baseline target {target_qps:.2f} req/s/replica"
    )
    equal_cost = cost_frontier = bound = None
    if args.frontier or args.equal_cost:
        points, statics = hpa_frontier(p, args), static_frontier(p, args)
        hpa_line = [(rh, m) for _, rh, m in points]
        static_line = [(rh, m) for _, rh, m in statics]
        hpa_hours = scores["hpa"].replica_hours if "hpa" in scores else None
        equal_cost = {
            "hpa_points": [
                {"headroom": h, "replica_hours": round(rh, 4), "slo_miss_pct": round(m, 4)} for h, rh, m in points
            ],
            "hpa_miss_pct_at_our_replica_hours": interpolate_miss(hpa_line, ours.replica_hours),
            "static_points": [
                {"replicas": n, "replica_hours": round(rh, 4), "slo_miss_pct": round(m, 4)} for n, rh, m in statics
            ],
            "static_miss_pct_at_our_replica_hours": interpolate_miss(static_line, ours.replica_hours),
            "static_miss_pct_at_hpa_replica_hours": (
                interpolate_miss(static_line, hpa_hours) if hpa_hours is not None else None
            ),
        }
    if args.frontier:
        cost_frontier, bound = frontiers(p, args)
    png = None
    if not args.no_plot:
        png = args.out / f"autoscale-{Path(path).stem}.png"
        plot(png, title, BIN_S, needed, results, tr.arrivals, args.slo_wait)
    return {
        "trace": tr.name,
        "scale": k,
        "requests": len(tr.arrivals),
        "title": title,
        "target_qps_per_replica": target_qps,
        "dominates": {b: dominates(ours, scores[b]) for b in ("hpa", "keda") if b in scores},
        "goal_met": ours.replica_hours <= 1.25 * oracle_h and ours.slo_miss_pct <= 1.0,
        "policies": {name: _as_json(s, oracle_h) for name, s in scores.items()},
        "frontier": cost_frontier,
        **(bound or {}),
        "equal_cost": equal_cost,
        "png": str(png) if png else None,
        "seconds": round(time.monotonic() - started, 2),
        "_scores": list(scores.values()),
    }


def sim_config(tr: traces.Trace, svc: np.ndarray, args: argparse.Namespace) -> SimConfig:
    """The simulator's settings; Prometheus starts with an hour of history at the trace's opening rate."""
    opening = min(HISTORY_RATE_S, float(tr.arrivals[-1]))
    return SimConfig(
        concurrency=args.concurrency,
        startup_s=args.startup,
        scrape_s=args.scrape,
        slo_wait_s=args.slo_wait,
        horizon_s=float(tr.arrivals[-1]),
        history_s=3600.0,
        history_qps=float(np.sum(tr.arrivals <= opening)) / max(opening, 1.0),
        history_slot_s=float(svc.mean()),
    )


def override(spec: AutoscalingSpec, assignments: list[str]) -> AutoscalingSpec:
    """Apply FIELD=VALUE overrides (camelCase paths under spec.autoscaling), validated by the spec model."""
    data = spec.model_dump(by_alias=True)
    for item in assignments:
        path, _, value = item.partition("=")
        *parents, leaf = path.split(".")
        node = data
        for key in parents:
            node = node[key]
        node[leaf] = None if value.lower() in ("", "none", "null") else json.loads(value)
    return AutoscalingSpec.model_validate(data)


def _as_json(s: Score, oracle_hours: float) -> dict[str, float | int]:
    return {
        "replica_hours": round(s.replica_hours, 4),
        "ratio_to_oracle": round(s.replica_hours / oracle_hours, 4) if oracle_hours > 0 else 0.0,
        "slo_miss_pct": round(s.slo_miss_pct, 4),
        "p99_wait_s": round(s.p99_wait_s, 3),
        "scale_events": s.scale_events,
    }


def frontier_table(report: dict[str, object]) -> str:
    """The cheapest replica-hours each policy reaches each miss target at, over the lower bound found."""
    front: dict[str, dict[str, object]] = report["frontier"]  # type: ignore[assignment]
    bound = report.get("lower_bound_h")
    lines = [
        f"cost at equal SLO (misses after the first start-up delay; knob swept): lower bound found {bound} h "
        f"({report.get('zero_miss_plans_h')}), proven {report.get('proven_lower_bound_h')} h",
        f"{'policy':<16}{'<= 1 %: h':>11}{'x bound':>9}{'knob':>8}{'<= 0.1 %: h':>13}{'x bound':>9}{'knob':>8}",
    ]
    for name, row in front.items():
        cells = []
        for key in ("1pct", "01pct"):
            h, knob = row[f"cost_{key}_h"], row[f"knob_{key}"]
            ratio = f"{h / bound:.3f}" if isinstance(h, float) and isinstance(bound, float) and bound else "-"
            cells.append((f"{h:.3f}" if isinstance(h, float) else "never", ratio, "-" if knob is None else f"{knob:g}"))
        (a, b, c), (d, e, f) = cells
        lines.append(f"{name:<16}{a:>11}{b:>9}{c:>8}{d:>13}{e:>9}{f:>8}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    for path in args.trace:
        report = run_trace(path, args)
        scores: list[Score] = report.pop("_scores")  # type: ignore[assignment]
        if args.json:
            print(json.dumps(report))
            continue
        oracle_h = next(s.replica_hours for s in scores if s.name == "oracle")
        print(table(str(report["title"]), scores, oracle_h))
        dom = report["dominates"]
        if report["equal_cost"]:
            front: dict[str, object] = report["equal_cost"]  # type: ignore[assignment]
            print(
                f"at the policy's replica-hours (interpolated): HPA at other targets would miss "
                f"{front['hpa_miss_pct_at_our_replica_hours']} %, a static fleet "
                f"{front['static_miss_pct_at_our_replica_hours']} %; "
                f"at HPA's replica-hours a static fleet would miss {front['static_miss_pct_at_hpa_replica_hours']} %"
            )
        if report["frontier"]:
            print(frontier_table(report))
        print(
            f"dominates: {dom}; "
            f"goal (<= 1.25 x oracle, <= 1 % misses): {report['goal_met']}; "
            f"plot: {report['png']}; {report['seconds']}s\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
