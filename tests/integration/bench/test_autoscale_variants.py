"""`bench/autoscale_variants.py --json`: every variant of a trace, each scored as `bench/autoscale.py` scores it."""

from pathlib import Path

from bench.fleetsim.synthetic import poisson, write_azure
from bench.fleetsim.traces import load
from tests.integration.bench.test_autoscale_bench import REPO, run_bench, run_json

VARIANTS = REPO / "bench" / "autoscale_variants.py"


def test_variants_are_the_benchmark_with_one_option_changed(tmp_path: Path) -> None:
    trace = write_azure(tmp_path / "bump.csv", poisson(lambda t: 6.0 if 100 <= t < 200 else 2.0, 300, seed=3), seed=4)
    report = run_json(VARIANTS, "--trace", str(trace), "--jobs", "2", "--no-plot")
    rows = {row["variant"]: row for row in report["variants"]}
    duration = float(load(trace).arrivals[-1])  # stretches: halves, the middle half and thirds of it
    stretches = [f"--start-seconds {s * duration:.0f} --max-seconds {n * duration:.0f}" for s, n in
                 ((0, 1 / 2), (1 / 2, 1 / 2), (1 / 4, 1 / 2), (0, 1 / 3), (1 / 3, 1 / 3), (2 / 3, 1 / 3))]  # fmt: skip
    options = ["--time-scale 0.5", "--time-scale 1.5", "--time-scale 2", "--min-peak-replicas 5",
               "--min-peak-replicas 15", "--min-peak-replicas 20", "--startup 60", "--startup 240",
               "--concurrency 16", "--concurrency 64", "--seed 1", "--seed 2", "--seed 3"]  # fmt: skip
    assert list(rows) == ["bump.csv as given", *(f"bump.csv {o}" for o in stretches + options)]
    # Each row is what the benchmark itself reports with those options.
    for options_given in ("", stretches[4], "--startup 60"):
        name = f"bump.csv {options_given}" if options_given else "bump.csv as given"
        bench = run_bench(trace, "--no-plot", *options_given.split())["policies"]
        for policy in ("sglang-operator", "hpa", "keda"):
            assert rows[name][policy] == [bench[policy]["replica_hours"], bench[policy]["slo_miss_pct"]], name
    summary = report["summary"]
    assert summary["variants"] == 20
    assert summary["dominated"] == sum(set(r["marks"].values()) == {"Y"} for r in rows.values())
    gaps = [r["vs_hpa_at_equal_cost"] for r in rows.values() if r["vs_hpa_at_equal_cost"] is not None]
    assert summary["better_at_equal_cost"] == sum(g < 0 for g in gaps)
