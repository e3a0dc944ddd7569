"""`bench/autoscale.py --json` on small synthetic traces in both formats and on short slices of the shipped traces.

The synthetic traces (`bench/fleetsim/synthetic.py`, seeded) are written to a temporary folder, so the benchmark is
shown to read any file in the two formats, not only the shipped ones. They are minutes long, so each run takes a
few seconds.
"""

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bench.fleetsim.synthetic import poisson, shape_named, write_azure, write_shape

REPO = Path(__file__).resolve().parents[3]
BENCH = REPO / "bench" / "autoscale.py"
SHIPPED = REPO.parent / "shared" / "traces"
POLICIES = {"sglang-operator", "hpa", "keda", "static-peak", "oracle"}
SMALL = ["--no-plot"]


def run_json(script: Path, *args: str, timeout: float = 120) -> dict[str, Any]:
    """Run a benchmark script with `--json` and parse what it printed."""
    out = subprocess.run(
        [sys.executable, str(script), "--json", *args], capture_output=True, text=True, timeout=timeout, check=True
    )
    report: dict[str, Any] = json.loads(out.stdout)
    return report


def run_bench(trace: Path, *extra: str) -> dict[str, Any]:
    return run_json(BENCH, "--trace", str(trace), *extra)


def assert_shape(report: dict[str, Any], trace_name: str) -> None:
    assert report["trace"] == trace_name
    assert set(report["policies"]) >= POLICIES
    for name, row in report["policies"].items():
        assert set(row) >= {"replica_hours", "slo_miss_pct", "scale_events"}, name
        assert row["replica_hours"] > 0 and 0 <= row["slo_miss_pct"] <= 100 and row["scale_events"] >= 0, name
    assert report["policies"]["static-peak"]["scale_events"] == 0


def assert_fewer_misses_at_equal_cost(report: dict[str, Any]) -> None:
    """The policy misses less than HPA would at the policy's replica-hours (HPA re-run at other targets and
    interpolated: `--equal-cost`). Dominance at the defaults was the measure before the burst envelope; with it the
    policy spends more than HPA's defaults to miss far less, and cost at equal SLO is the measure (`--frontier`)."""
    ours = report["policies"]["sglang-operator"]
    hpa_there = report["equal_cost"]["hpa_miss_pct_at_our_replica_hours"]
    assert hpa_there is not None and ours["slo_miss_pct"] < hpa_there, (ours, hpa_there)


def test_daily_swing_in_azure_format(tmp_path: Path) -> None:
    # A day compressed into 40 minutes. The morning ramp decides the misses: without the sustained-rise rule the
    # 120 s stable rate lags it and misses more than HPA, with it less. (At equal cost HPA now misses less: the
    # burst envelope holds the 20-minute decline, which on a real day is hours long: docs/autoscaling.md.)
    swing = shape_named("swing")
    trace = write_shape(swing, tmp_path, "azure")
    report = run_bench(trace, *SMALL)
    assert_shape(report, "swing.csv")
    assert report["requests"] == len(poisson(swing.rate, swing.seconds, swing.seed)) * report["scale"]
    ours = report["policies"]["sglang-operator"]
    lagging = run_bench(trace, "--set", "sustainedRise.enabled=false", *SMALL)["policies"]["sglang-operator"]
    assert lagging["slo_miss_pct"] > report["policies"]["hpa"]["slo_miss_pct"] > ours["slo_miss_pct"]


def test_static_fleets_of_equal_cost(tmp_path: Path) -> None:
    # Static fleets of 1 .. peak + 2: each replica costs the same, and capacity never delays a FIFO start.
    report = run_bench(write_shape(shape_named("swing"), tmp_path, "mooncake"), "--equal-cost", *SMALL)
    assert_shape(report, "swing.jsonl")
    statics = report["equal_cost"]["static_points"]
    assert [p["replicas"] for p in statics] == list(range(1, len(statics) + 1))
    hours = [p["replica_hours"] for p in statics]
    assert all(abs(h - hours[0] * (i + 1)) < 1e-3 for i, h in enumerate(hours))
    misses = [p["slo_miss_pct"] for p in statics]
    assert misses == sorted(misses, reverse=True) and misses[-1] < misses[0]
    assert report["equal_cost"]["static_miss_pct_at_hpa_replica_hours"] is not None


def test_periodic_busy_stretches_keep_their_capacity_through_the_troughs(tmp_path: Path) -> None:
    # Five busy minutes, five quiet ones. A fleet released in the trough meets the next rise a start-up delay short
    # (HPA misses over half the requests); the quiet lookback (600 s) keeps it, at the same cost as HPA.
    report = run_bench(write_shape(shape_named("on-off-300s"), tmp_path, "mooncake"), "--equal-cost", *SMALL)
    assert_shape(report, "on-off-300s.jsonl")
    ours = report["policies"]["sglang-operator"]
    at_equal_cost = report["equal_cost"]["hpa_miss_pct_at_our_replica_hours"]
    assert at_equal_cost is not None and ours["slo_miss_pct"] < at_equal_cost / 2
    assert ours["replica_hours"] <= 1.05 * report["policies"]["hpa"]["replica_hours"]


def test_a_wave_keeps_its_capacity_through_its_troughs(tmp_path: Path) -> None:
    # A 10-minute wave. The fleet meets its SLO at the crest, but its rate rose within the quiet lookback: the
    # trough is not a decline, so the full window keeps the crest's replicas for the next rise. Without that test
    # (a huge windows.quietMaxRise) the SLO reading releases them in the trough and the next crest misses more.
    trace = write_shape(shape_named("slow-wave"), tmp_path, "azure")
    report = run_bench(trace, *SMALL)
    ours = report["policies"]["sglang-operator"]
    released = run_bench(trace, "--set", "windows.quietMaxRise=1000", *SMALL)["policies"]["sglang-operator"]
    # Five points more before the burst envelope; the envelope now holds much of the crest's capacity itself.
    assert released["slo_miss_pct"] > ours["slo_miss_pct"] + 1
    assert released["replica_hours"] < ours["replica_hours"]


def test_options_compress_and_slice(tmp_path: Path) -> None:
    arrivals = poisson(lambda t: 2.0, 600, seed=5)
    trace = write_azure(tmp_path / "flat.csv", arrivals, seed=6)
    report = run_bench(trace, "--scale", "2", "--time-scale", "2", "--max-seconds", "120", *SMALL)
    assert report["scale"] == 2
    # Twice as fast, first 120 s: the requests of the trace's first 240 s, each replayed twice.
    assert report["requests"] == 2 * int(np.sum((arrivals - arrivals[0]) / 2 <= 120))
    # A stretch from the middle: 100 s on (after compression), the next 120 s.
    later = run_bench(
        trace, "--scale", "2", "--time-scale", "2", "--start-seconds", "100", "--max-seconds", "120", "--no-plot"
    )
    shifted = (arrivals - arrivals[0]) / 2 - 100
    assert later["requests"] == 2 * int(np.sum((shifted >= 0) & (shifted <= 120)))
    with pytest.raises(subprocess.CalledProcessError):  # nothing left: an error, not an empty table
        run_bench(trace, "--start-seconds", "1000", *SMALL)


def test_set_tunes_the_policy_and_headroom_moves_every_target(tmp_path: Path) -> None:
    trace = write_azure(tmp_path / "flat.csv", poisson(lambda t: 3.0, 600, seed=9), seed=10)
    fixed = ("--no-plot", "--scale", "3", "--only", "hpa", "--only", "keda")
    default = run_bench(trace, *fixed)
    tuned = run_bench(trace, *fixed, "--set", "targets.headroom=2.0")
    assert tuned["target_qps_per_replica"] == default["target_qps_per_replica"]
    for baseline in ("hpa", "keda"):
        assert tuned["policies"][baseline] == default["policies"][baseline]
    ours = "sglang-operator"
    assert tuned["policies"][ours]["replica_hours"] > default["policies"][ours]["replica_hours"]
    everyone = run_bench(trace, *fixed, "--headroom", "2.0")
    assert everyone["target_qps_per_replica"] < default["target_qps_per_replica"]
    assert everyone["policies"][ours] == tuned["policies"][ours]


@pytest.mark.skipif(not SHIPPED.is_dir(), reason="the shared traces are not on this machine")
@pytest.mark.parametrize("name", ["AzureLLMInferenceTrace_code.csv", "mooncake_synthetic_trace.jsonl"])
def test_shipped_trace_slice_shape(name: str) -> None:
    report = run_bench(SHIPPED / name, "--max-seconds", "600", "--no-plot")
    assert_shape(report, name)
    assert report["policies"]["oracle"]["replica_hours"] <= report["policies"]["static-peak"]["replica_hours"]


@pytest.mark.skipif(not SHIPPED.is_dir(), reason="the shared traces are not on this machine")
def test_mooncake_first_ten_minutes_at_equal_cost() -> None:
    report = run_bench(SHIPPED / "mooncake_synthetic_trace.jsonl", "--max-seconds", "600", "--equal-cost", *SMALL)
    assert_fewer_misses_at_equal_cost(report)


@pytest.mark.skipif(not SHIPPED.is_dir(), reason="the shared traces are not on this machine")
def test_azure_first_ten_minutes_at_equal_cost() -> None:
    # Bursts shorter than the start-up delay: the bursty-traffic rule sizes the fleet for the busiest minute and
    # holds it, instead of paying for replicas that arrive after each burst.
    report = run_bench(SHIPPED / "AzureLLMInferenceTrace_code.csv", "--max-seconds", "600", "--equal-cost", *SMALL)
    assert_fewer_misses_at_equal_cost(report)


@pytest.mark.skipif(not SHIPPED.is_dir(), reason="the shared traces are not on this machine")
def test_mooncake_at_equal_cost() -> None:
    report = run_bench(SHIPPED / "mooncake_synthetic_trace.jsonl", "--equal-cost", *SMALL)
    assert_shape(report, "mooncake_synthetic_trace.jsonl")
    assert_fewer_misses_at_equal_cost(report)


@pytest.mark.skipif(not SHIPPED.is_dir(), reason="the shared traces are not on this machine")
@pytest.mark.parametrize("seed", ["0", "2"])
def test_azure_bursts_are_held_once_seen(seed: str) -> None:
    # The burst envelope: once the first bursts have been seen (about 15 minutes), the fleet holds their level and
    # misses 40 % of what HPA misses, for less than the static fleet sized for the peak. The opening minutes
    # still miss: nothing causal can know the first bursts (no reactive policy reaches 1 % on this trace).
    report = run_bench(SHIPPED / "AzureLLMInferenceTrace_code.csv", "--seed", seed, *SMALL)
    assert_shape(report, "AzureLLMInferenceTrace_code.csv")
    ours, hpa = report["policies"]["sglang-operator"], report["policies"]["hpa"]
    assert ours["slo_miss_pct"] < hpa["slo_miss_pct"] / 2.4
    assert ours["replica_hours"] < report["policies"]["static-peak"]["replica_hours"]


@pytest.mark.skipif(not SHIPPED.is_dir(), reason="the shared traces are not on this machine")
def test_mooncake_middle_half_at_equal_cost() -> None:
    # A variant of `bench/autoscale_variants.py`: Mooncake's middle half.
    options = ("--start-seconds", "256", "--max-seconds", "511")
    assert_fewer_misses_at_equal_cost(
        run_bench(SHIPPED / "mooncake_synthetic_trace.jsonl", *options, "--equal-cost", *SMALL)
    )
