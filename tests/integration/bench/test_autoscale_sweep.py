"""`bench/autoscale_sweep.py --json`: one row per grid point, and the same numbers `bench/autoscale.py` reports."""

from pathlib import Path
from typing import Any

from bench.fleetsim.synthetic import poisson, write_azure, write_family, write_mooncake
from tests.integration.bench.test_autoscale_bench import REPO, run_bench, run_json

SWEEP = REPO / "bench" / "autoscale_sweep.py"


def run_sweep(*args: str) -> dict[str, Any]:
    return run_json(SWEEP, "--no-plot", *args)


def test_grid_points_match_the_benchmark(tmp_path: Path) -> None:
    arrivals = poisson(lambda t: 8.0 if 200 <= t < 400 else 2.0, 1000, seed=3)
    step = write_azure(tmp_path / "step.csv", arrivals, seed=4)
    flat = write_mooncake(tmp_path / "flat.jsonl", poisson(lambda t: 4.0, 600, seed=7), seed=8)
    report = run_sweep(
        "--trace",
        str(step),
        "--trace",
        str(flat),
        "--grid",
        "windows.scaleDownStabilizationSeconds=300",
        "--grid",
        "targets.headroom=0.3,1.0",
    )
    points = report["points"]
    assert [p["set"] for p in points] == [
        ["windows.scaleDownStabilizationSeconds=300", "targets.headroom=0.3"],
        ["windows.scaleDownStabilizationSeconds=300", "targets.headroom=1.0"],
    ]
    for point in points:
        assert set(point["traces"]) == {"step.csv", "flat.jsonl"}
        marks = [cell["marks"] for cell in point["traces"].values()]
        assert all(set(m) == {"hpa", "keda"} and set(m.values()) <= set("Ycm=") for m in marks)
        assert point["dominated_traces"] == sum(all(v == "Y" for v in m.values()) for m in marks)
        gaps = [cell["vs_hpa_at_equal_cost"] for cell in point["traces"].values()]
        assert point["better_at_equal_cost"] == sum(g is not None and g < 0 for g in gaps)
    # The first point is the spec's defaults: the sweep must report what the benchmark itself reports.
    for trace, name in ((step, "step.csv"), (flat, "flat.jsonl")):
        report_one = run_bench(trace, "--no-plot", "--equal-cost", "--only", "hpa", "--only", "keda")
        bench = report_one["policies"]
        ours = points[0]["traces"][name]
        assert (ours["replica_hours"], ours["slo_miss_pct"]) == (
            bench["sglang-operator"]["replica_hours"],
            bench["sglang-operator"]["slo_miss_pct"],
        )
        # Misses against HPA's line at equal cost: the benchmark's own interpolation, as a difference.
        hpa_there = report_one["equal_cost"]["hpa_miss_pct_at_our_replica_hours"]
        gap = ours["vs_hpa_at_equal_cost"]
        assert gap is None if hpa_there is None else abs(gap - (ours["slo_miss_pct"] - hpa_there)) < 1e-2
        for baseline in ("hpa", "keda"):
            expected = [bench[baseline]["replica_hours"], bench[baseline]["slo_miss_pct"]]
            assert report["baselines"][name][baseline] == expected
    # The grid reaches the policy, not the baselines: 100 % headroom costs more, against the same HPA and KEDA.
    for name in ("step.csv", "flat.jsonl"):
        assert points[1]["traces"][name]["replica_hours"] > points[0]["traces"][name]["replica_hours"]


def test_the_defaults_beat_hpa_at_equal_cost_on_traffic_they_were_not_chosen_on(tmp_path: Path) -> None:
    """What a policy can be held to (no policy dominates HPA on every trace: `test_adversary.py`): at equal
    replica-hours it misses less than HPA on most of a family re-seeded after the defaults were chosen. On seed
    offset 9000 the defaults with the burst envelope did on 13 of the 18 traces, by 10.1 points on average, and
    dominated both baselines on 5 (before the envelope: 15, 13.2 and 10; docs/autoscaling-experiments.md, "Four
    seedings not used for the choice"); with the sustained-rise rule's four steps to a new level, 15, 11.0 and 6.
    Losing two more than 13 fails."""
    traces = write_family(tmp_path, seed_offset=9000)
    [point] = run_sweep(*(f"--trace={path}" for path in traces), "--jobs", "2")["points"]
    assert point["set"] == []  # the defaults
    assert point["better_at_equal_cost"] >= 12
    assert point["mean_vs_hpa_at_equal_cost"] <= -8.0
    assert point["dominated_traces"] >= 4
