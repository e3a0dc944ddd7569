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

REPO = Path(__file__).resolve().parents[2]
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


def assert_dominates(report: dict[str, Any]) -> None:
    ours = report["policies"]["sglang-operator"]
    for baseline in ("hpa", "keda"):
        other = report["policies"][baseline]
        no_worse = ours["replica_hours"] <= other["replica_hours"] and ours["slo_miss_pct"] <= other["slo_miss_pct"]
        better = ours["replica_hours"] < other["replica_hours"] or ours["slo_miss_pct"] < other["slo_miss_pct"]
        assert no_worse and better, f"{baseline}: ours {ours} vs {other}"
    assert report["dominates"] == {"hpa": True, "keda": True}


def test_daily_swing_in_azure_format(tmp_path: Path) -> None:
    # The policy dominates, and misses fewer than HPA would at the same replica-hours. The morning ramp is what
    # decides it: without the sustained-rise rule the 120 s stable rate lags it and misses more than HPA.
    swing = shape_named("swing")
    trace = write_shape(swing, tmp_path, "azure")
    report = run_bench(trace, "--equal-cost", *SMALL)
    assert_shape(report, "swing.csv")
    assert report["requests"] == len(poisson(swing.rate, swing.seconds, swing.seed)) * report["scale"]
    assert_dominates(report)
    ours = report["policies"]["sglang-operator"]
    at_equal_cost = report["equal_cost"]["hpa_miss_pct_at_our_replica_hours"]
    assert at_equal_cost is not None and ours["slo_miss_pct"] < at_equal_cost
    lagging = run_bench(trace, "--set", "sustainedRise.enabled=false", *SMALL)["policies"]["sglang-operator"]
    assert lagging["slo_miss_pct"] > report["policies"]["hpa"]["slo_miss_pct"] > ours["slo_miss_pct"]
    # The evening's decline: the fleet met its SLO (the queue-time histogram), so the surplus goes after the quiet
    # window. The queue gauge alone saw the queues the day's peak left in the lookback and kept the full window.
    gauge_only = run_bench(trace, "--set", "slo.enabled=false", *SMALL)["policies"]["sglang-operator"]
    assert gauge_only["replica_hours"] > ours["replica_hours"] + 0.05
    assert gauge_only["slo_miss_pct"] >= ours["slo_miss_pct"]


def test_daily_swing_in_mooncake_format(tmp_path: Path) -> None:
    # Requests in pairs with equal timestamps (Mooncake's batches). The policy dominates, and at equal cost
    # (HPA re-run at other targets, interpolated to our hours) HPA would miss far more.
    report = run_bench(write_shape(shape_named("swing"), tmp_path, "mooncake"), "--equal-cost", *SMALL)
    assert_shape(report, "swing.jsonl")
    assert_dominates(report)
    at_equal_cost = report["equal_cost"]["hpa_miss_pct_at_our_replica_hours"]
    assert at_equal_cost is not None
    assert report["policies"]["sglang-operator"]["slo_miss_pct"] < at_equal_cost
    # Static fleets of 1 .. peak + 2: each replica costs the same, and capacity never delays a FIFO start.
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
    assert_dominates(report)
    ours = report["policies"]["sglang-operator"]
    released = run_bench(trace, "--set", "windows.quietMaxRise=1000", *SMALL)["policies"]["sglang-operator"]
    assert released["slo_miss_pct"] > ours["slo_miss_pct"] + 5
    assert released["replica_hours"] < ours["replica_hours"]


@pytest.mark.xfail(
    strict=True,
    reason="known gap (docs/autoscaling.md): a sudden 3x step overloads every reactive fleet for a start-up "
    "delay; the policy drains the backlog sooner (fewer misses) but pays more replica-hours than HPA/KEDA",
)
def test_step_change_dominance(tmp_path: Path) -> None:
    report = run_bench(write_shape(shape_named("step"), tmp_path, "azure"), *SMALL)
    assert_shape(report, "step.csv")
    assert_dominates(report)


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
def test_mooncake_first_ten_minutes_dominance() -> None:
    # Flat traffic: the fleet goes up by the one replica whose band holds the demand, where HPA rounds up.
    assert_dominates(run_bench(SHIPPED / "mooncake_synthetic_trace.jsonl", "--max-seconds", "600", "--no-plot"))


@pytest.mark.skipif(not SHIPPED.is_dir(), reason="the shared traces are not on this machine")
def test_azure_first_ten_minutes_dominance() -> None:
    # Bursts shorter than the start-up delay: the bursty-traffic rule sizes the fleet for the busiest minute and
    # holds it, instead of paying for replicas that arrive after each burst.
    assert_dominates(run_bench(SHIPPED / "AzureLLMInferenceTrace_code.csv", "--max-seconds", "600", "--no-plot"))


@pytest.mark.skipif(not SHIPPED.is_dir(), reason="the shared traces are not on this machine")
@pytest.mark.parametrize("name", ["AzureLLMInferenceTrace_code.csv", "mooncake_synthetic_trace.jsonl"])
def test_shipped_trace_dominance(name: str) -> None:
    # The requirement on the whole of every shipped trace (about 10 s for Azure's hour).
    report = run_bench(SHIPPED / name, "--no-plot")
    assert_shape(report, name)
    assert_dominates(report)


@pytest.mark.skipif(not SHIPPED.is_dir(), reason="the shared traces are not on this machine")
@pytest.mark.parametrize(
    ("name", "options"),
    [
        ("AzureLLMInferenceTrace_code.csv", ("--seed", "2")),
        ("mooncake_synthetic_trace.jsonl", ("--start-seconds", "256", "--max-seconds", "511")),
    ],
)
def test_shipped_trace_variant_dominance(name: str, options: tuple[str, ...]) -> None:
    # Two of the variants `bench/autoscale_variants.py` finds dominated (docs/autoscaling.md): another replay of
    # Azure's hour, and Mooncake's middle half, where the band scale-up adds one replica fewer than HPA.
    assert_dominates(run_bench(SHIPPED / name, *options, "--no-plot"))
