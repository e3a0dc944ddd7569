"""For a policy, build a trace on which it does not dominate HPA: no policy that sees only the past dominates HPA on
every trace (`fleetsim/adversary.py` has the argument).

    python bench/adversary.py --out /tmp/adversary [--shape swing ...] [--policy sglang-operator ...] [--json]
    python bench/autoscale.py --trace /tmp/adversary/swing-sglang-operator.csv     # the benchmark agrees

For each shape of the synthetic family, every request alike and the rate scaled so that the peak needs
--peak-replicas replicas, it runs the policy and HPA as `bench/autoscale.py` does, finds the first scrape at which
they pay for different replica counts, and tries continuations from there (a burst where the policy has fewer
ready replicas than HPA, the trace's end where it pays for more) until one gives a trace the policy does not
dominate HPA on, with the replay factor, the baselines' target and both runs before the continuation unchanged.
It writes that trace as Azure CSV and prints one row per shape and policy. `--set` tunes the operator's policy as
in `bench/autoscale.py`.
"""

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import autoscale
import numpy as np
from fleetsim.adversary import (
    OUTPUT_TOKENS,
    PROMPT_TOKENS,
    Attack,
    attacked,
    attacks,
    first_difference,
    same_until,
    shape_arrivals,
)
from fleetsim.baselines import Hpa, Keda
from fleetsim.ours import Ours
from fleetsim.report import Score, dominates, score
from fleetsim.sim import Controller, SimResult, simulate
from fleetsim.synthetic import SHAPES, shape_named, write_azure_tokens

SPAN_SCRAPES = 24  # continuations are tried over the 6 minutes after the first difference
BURSTS = (0, 150, 400, 1000)  # requests; a burst of 1000 alone needs over 10 replicas, which keeps K at 1
SLOT_S = PROMPT_TOKENS / 10000.0 + OUTPUT_TOKENS / 50.0

Factory = Callable[[autoscale.Prepared, argparse.Namespace], Controller]


def _hpa_at(headroom: float) -> Factory:
    def make(p: autoscale.Prepared, args: argparse.Namespace) -> Controller:
        target = args.concurrency / (float(p.service.mean()) * (1.0 + headroom))
        return Hpa(target, p.initial, args.min_replicas, args.max_replicas, name=f"hpa-headroom-{headroom:g}")

    return make


POLICIES: dict[str, Factory] = {
    "sglang-operator": lambda p, args: Ours(p.spec, p.initial),
    "keda": lambda p, args: Keda(p.target_qps, p.initial, args.min_replicas, args.max_replicas),
    "hpa-headroom-0.15": _hpa_at(0.15),
    "hpa-headroom-0.5": _hpa_at(0.5),
}


@dataclass(frozen=True)
class Run:
    """One trace through the benchmark's preparation, the policy under test and HPA."""

    prepared: autoscale.Prepared
    policy: SimResult
    hpa: SimResult

    def scores(self, slo_wait: float) -> tuple[Score, Score]:
        return score(self.policy, slo_wait), score(self.hpa, slo_wait)


def run(path: Path, policy: str, args: argparse.Namespace) -> Run:
    options = ["--trace", str(path), "--no-plot", f"--concurrency={args.concurrency}", f"--slo-wait={args.slo_wait}"]
    bench_args = autoscale.parse_args([*options, *(f"--set={s}" for s in args.set)])
    p = autoscale.prepare(str(path), bench_args)
    ctrl, hpa = POLICIES[policy](p, bench_args), autoscale.baselines(p, bench_args)[0]
    return Run(p, simulate(p.trace.arrivals, p.service, ctrl, p.cfg), simulate(p.trace.arrivals, p.service, hpa, p.cfg))


def unchanged(before: Run, after: Run, attack: Attack) -> bool:
    """Whether the continuation left everything before it as it was: the whole-trace quantities the benchmark
    derives and both runs up to the attack."""
    a, b = before.prepared, after.prepared
    return (
        (a.scale, a.target_qps, a.initial, a.cfg.history_qps) == (b.scale, b.target_qps, b.initial, b.cfg.history_qps)
        and same_until(before.policy, after.policy, attack.at_s)
        and same_until(before.hpa, after.hpa, attack.at_s)
    )


def write(path: Path, arrivals: np.ndarray) -> Path:
    n = len(arrivals)
    return write_azure_tokens(path, arrivals, np.full(n, PROMPT_TOKENS), np.full(n, OUTPUT_TOKENS))


def defeat(shape_name: str, policy: str, args: argparse.Namespace) -> dict[str, object]:
    """The row for one shape and policy: the run on the shape, the first difference, and the first continuation
    that leaves the policy not dominating HPA (its trace written to --out)."""
    shape = shape_named(shape_name)
    arrivals = shape_arrivals(shape, args.peak_replicas, SLOT_S, args.concurrency)
    base_path = write(args.out / f"{shape_name}.csv", arrivals)
    base = run(base_path, policy, args)
    if base.prepared.scale != 1:
        raise SystemExit(f"{shape_name}: the benchmark replays it {base.prepared.scale} times; raise --peak-replicas")
    ours, hpa = base.scores(args.slo_wait)
    row: dict[str, object] = {
        "shape": shape_name,
        "policy": policy,
        "on_the_shape": _pair(ours, hpa),
        "dominates_on_the_shape": dominates(ours, hpa),
    }
    first = first_difference(base.policy, base.hpa)
    if first is None:
        same = {"found": True, "loses": False, "why": "never differs from HPA: a tie", "trace": str(base_path)}
        return row | same | {"first_difference_s": None, "tries": 0}
    row["first_difference_s"] = base.policy.timeline_t[first]
    return row | search(base, arrivals, first, args.out / f"{shape_name}-{policy}.csv", policy, args)


def search(
    base: Run, arrivals: np.ndarray, first: int, path: Path, policy: str, args: argparse.Namespace
) -> dict[str, object]:
    """Try the continuations in order; the first after which the policy loses to HPA (more replica-hours or more
    misses) wins; failing that, the first after which it only ties. Its trace is left at `path`."""
    tries = skipped = 0
    tie: tuple[Attack, Score, Score] | None = None
    for attack in attacks(base.policy, base.hpa, first, SPAN_SCRAPES, BURSTS):
        tries += 1
        after = run(write(path, attacked(arrivals, attack)), policy, args)
        if not unchanged(base, after, attack):
            skipped += 1
            continue
        ours, hpa = after.scores(args.slo_wait)
        if worse_somewhere(ours, hpa):
            return _found(attack, ours, hpa, path) | {"tries": tries, "skipped": skipped}
        if tie is None and not dominates(ours, hpa):
            tie = attack, ours, hpa
    counts: dict[str, object] = {"tries": tries, "skipped": skipped}
    if tie is None:
        path.unlink(missing_ok=True)
        return counts | {"found": False}
    attack, ours, hpa = tie
    return counts | _found(attack, ours, hpa, write(path, attacked(arrivals, attack)))


def worse_somewhere(ours: Score, hpa: Score) -> bool:
    """More replica-hours or more SLO misses than HPA: a loss, not only a tie."""
    return ours.replica_hours > hpa.replica_hours + 1e-9 or ours.slo_miss_pct > hpa.slo_miss_pct + 1e-9


def _found(attack: Attack, ours: Score, hpa: Score, path: Path) -> dict[str, object]:
    return {
        "found": True,
        "at_s": round(attack.at_s, 1),
        "burst": attack.burst,
        "trickle_s": attack.trickle_s,
        "why": attack.why,
        "after": _pair(ours, hpa),
        "loses": worse_somewhere(ours, hpa),
        "trace": str(path),
    }


def _pair(ours: Score, hpa: Score) -> dict[str, list[float]]:
    return {s.name: [round(s.replica_hours, 4), round(s.slo_miss_pct, 3)] for s in (ours, hpa)}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True, help="folder for the shapes' and the attacks' traces")
    p.add_argument("--shape", action="append", choices=[s.name for s in SHAPES], help="default: every shape")
    p.add_argument("--policy", action="append", choices=list(POLICIES), help="default: sglang-operator")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", help="the operator policy's spec")
    p.add_argument("--peak-replicas", type=float, default=12.0, help="replicas the shape's peak rate needs")
    p.add_argument("--concurrency", type=int, default=32, help="as bench/autoscale.py's default")
    p.add_argument("--slo-wait", type=float, default=1.0, help="as bench/autoscale.py's default")
    p.add_argument("--json", action="store_true")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    rows = [defeat(s, pol, args) for pol in args.policy or ["sglang-operator"] for s in args.shape or _all()]
    if args.json:
        print(json.dumps({"rows": rows}))
        return 0
    for r in rows:
        print(_line(r))
    print(f"{sum(bool(r['found']) for r in rows)} of {len(rows)}: a trace on which the policy does not dominate HPA")
    return 0


def _line(r: dict[str, object]) -> str:
    """One row as text: the run on the shape, then the continuation found and the runs after it."""
    head = f"{r['shape']:<12} {r['policy']:<18} on the shape: {_scores(r['on_the_shape'])}"
    head += f" dominates={r['dominates_on_the_shape']}"
    if not r["found"]:
        return f"{head} | no continuation found in {r['tries']} tries"
    if r["first_difference_s"] is None:
        return f"{head} | {r['why']}"
    return (
        f"{head} | differs at {r['first_difference_s']:.0f}s; {r['why']} at {r['at_s']}s, {r['burst']} requests, "
        f"{r['trickle_s']}s of 1/s: {_scores(r['after'])} ({'a loss' if r['loses'] else 'a tie'}, "
        f"{r['tries']} tries) -> {r['trace']}"
    )


def _scores(pair: object) -> str:
    hours_and_misses = cast(dict[str, list[float]], pair)
    return " ".join(f"{name} {h:.3f}h/{m:.2f}%" for name, (h, m) in hours_and_misses.items())


def _all() -> list[str]:
    return [s.name for s in SHAPES]


if __name__ == "__main__":
    sys.exit(main())
