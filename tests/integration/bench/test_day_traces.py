"""The day-long traces (`bench/fleetsim/day.py`, `bench/traces/`): what the generator writes, their shape, and the
policy's defaults on days they were not chosen on."""

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from bench.fleetsim.day import BENCH_OPTIONS, DAY_S, DAYS, Day, arrivals, sizes, write_day
from bench.fleetsim.traces import load
from tests.integration.bench.test_autoscale_bench import BENCH, REPO, SHIPPED, run_json

TRACES = REPO / "bench" / "traces"


def shipped(name: str) -> Path:
    return TRACES / f"{name}.csv.xz"


@pytest.mark.skipif(not SHIPPED.is_dir(), reason="the shared traces are not on this machine")
@pytest.mark.parametrize("day", DAYS, ids=lambda d: d.name)
def test_the_shipped_days_are_what_the_generator_writes(day: Day) -> None:
    trace = load(shipped(day.name))
    expected = arrivals(day, SHIPPED)
    np.testing.assert_allclose(trace.arrivals, expected - expected[0], atol=1.5e-3)  # millisecond timestamps
    prompt, output = sizes(day, SHIPPED, len(expected))
    assert np.array_equal(trace.tokens_in, prompt) and np.array_equal(trace.tokens_out, output)


@pytest.mark.parametrize("day", DAYS, ids=lambda d: d.name)
def test_each_day_has_a_daily_cycle_and_bursts(day: Day) -> None:
    t = load(shipped(day.name)).arrivals
    assert t[-1] >= DAY_S - 60
    hourly = np.bincount((t // 3600).astype(int))[:24]
    assert 3.0 <= hourly.max() / hourly.min() <= 5.0  # peak-to-trough, as production traces show
    assert np.argmin(hourly) in range(0, 8) and np.argmax(hourly) in range(12, 20)
    ten = np.bincount((t // 10).astype(int)).astype(float)
    hour_mean = np.repeat(hourly / 360.0, 360)[: len(ten)]
    assert np.max(ten[: len(hour_mean)] / hour_mean) > 2.0  # 10 s stretches at twice the hour's rate and more


@pytest.mark.skipif(not SHIPPED.is_dir(), reason="the shared traces are not on this machine")
@pytest.mark.parametrize("day", DAYS, ids=lambda d: d.name)
def test_the_defaults_on_days_they_were_not_chosen_on(day: Day, tmp_path: Path) -> None:
    """The same days re-seeded (seed + 1000), written after the defaults were chosen: the policy's defaults miss at
    most MISSES % and cost at least 30 % less than a static fleet sized for the peak (docs/autoscaling.md)."""
    reseeded = write_day(replace(day, seed=day.seed + 1000), tmp_path, SHIPPED, compress=False)
    report = run_json(
        BENCH, "--trace", str(reseeded), *BENCH_OPTIONS, "--only", "static-peak", "--no-plot", timeout=600
    )
    ours, static = report["policies"]["sglang-operator"], report["policies"]["static-peak"]
    assert ours["slo_miss_pct"] <= MISSES
    assert ours["replica_hours"] <= 0.7 * static["replica_hours"]


MISSES = 1.0  # measured: 0.84 % (code) and 0.36 % (chat); cost 0.55 x and 0.62 x the static peak fleet
