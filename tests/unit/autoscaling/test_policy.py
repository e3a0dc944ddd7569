"""`decide` driven over time with literal readings: each scenario is a table of (time, fleet, reading, expectation).

C = 32 slots per replica and a 1 s slot time throughout, so one replica carries 32 req/s flat out and 24.6 req/s with
the default 30 % headroom: 100 req/s asks for ceil(100 x 1.3 / 32) = 5 replicas.
"""

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from sglang_operator.api.spec import AutoscalingSpec, SustainedRise
from sglang_operator.autoscaling.envelope import ENVELOPE_HOLD_S, declining_level, envelope_qps, rising_level
from sglang_operator.autoscaling.policy import (
    MAX_MEMORY,
    decide,
    declining_slope,
    largest_rise,
    prune_history,
    sustained_slope,
)
from sglang_operator.autoscaling.signals import (
    Block,
    Decision,
    FleetState,
    Recommendation,
    Samples,
    envelope_from_state,
    history_from_state,
    history_to_state,
)

C = 32


def reading(
    qps: float | None,
    t: float,
    *,
    peak: float | None = None,
    burst: float | None = None,
    slot: float | None = 1.0,
    running: float | None = None,
    queued: float = 0.0,
    queued_peak: float | None = None,
    age: float | None = 5.0,
    gpu: float | None = None,
    bursty: tuple[float, float] | None = None,
    trend: Sequence[float] | None = None,
    slo_miss: float | None = None,
) -> Samples:
    """A reading; `bursty` is (mean, busiest) rate over the bursty-traffic rule's windows (its burst rate = mean);
    `trend` the stable rate at 60 s steps up to `t`, oldest first."""
    mean, busiest = bursty if bursty is not None else (None, None)
    return Samples(
        collected_at=t,
        age_seconds=age,
        qps=qps,
        qps_burst=burst if burst is not None else qps,
        qps_peak=peak if peak is not None else qps,
        slot_seconds=slot,
        running=running if running is not None else min(qps or 0.0, 1e9) * (slot or 0.0),
        queued=queued,
        queued_peak=queued_peak,
        gpu_utilization=gpu,
        bursty_qps=mean,
        bursty_qps_burst=mean,
        bursty_qps_peak=busiest,
        qps_trend=None if trend is None else series(t, trend),
        slo_miss_ratio=slo_miss,
    )


def series(t: float, rates: Sequence[float], step: float = 60.0) -> tuple[tuple[float, float], ...]:
    return tuple((t - step * (len(rates) - 1 - k), rate) for k, rate in enumerate(rates))


@dataclass
class Step:
    t: float
    samples: Samples | None
    expect: int
    mode: str = "normal"
    ready: int | None = None  # default: every desired replica is ready
    starting: int = 0
    warm: int = 0
    promote: int | None = None
    reason: str | None = None


@dataclass
class Run:
    spec: AutoscalingSpec
    desired: int
    gpus_per_replica: int = 1
    history: tuple[Recommendation, ...] = ()
    envelope: tuple[Block, ...] = ()
    burst_envelope: bool = True
    """False: every decision starts without the burst envelope's memory (the windows alone, as after a hold expires
    or on traffic whose half-hour mean has fallen as far)."""
    decisions: list[Decision] = field(default_factory=list)

    def play(self, steps: list[Step]) -> None:
        for step in steps:
            ready = step.ready if step.ready is not None else self.desired - step.starting
            fleet = FleetState(self.desired, ready, step.starting, step.warm, self.gpus_per_replica, C)
            d = decide(fleet, step.samples, self.spec, self.history, step.t, self.envelope)
            where = f"t={step.t}: {d.reason}"
            assert d.replicas == step.expect, where
            assert d.mode == step.mode, where
            assert d.metrics_available == (step.mode != "hold"), where
            if step.promote is not None:
                assert d.promote == step.promote, where
            if step.reason is not None:
                assert step.reason in d.reason, where
            self.history, self.desired = d.history, d.replicas
            self.envelope = d.envelope if self.burst_envelope else ()
            self.decisions.append(d)


def spec(**overrides: Any) -> AutoscalingSpec:
    return AutoscalingSpec.model_validate({"enabled": True, "maxReplicas": 100, **overrides})


def test_step_up_is_fast_but_bounded() -> None:
    run = Run(spec(), desired=10)
    run.play(
        [
            Step(0, reading(240, 0), 10, reason="holding 10"),  # 9.75 replicas' worth: within tolerance
            # 600 req/s needs 24.4; not a panic (18.75 < 2 x 10 ready), so at most max(2 x 10, 10 + 4) = 20 now.
            Step(15, reading(600, 15), 20, reason="scaling up 10 -> 20"),
            # Then the smallest count whose 10 % band holds 24.4 (23 x 1.1 = 25.3), not ceil(24.4) = 25.
            Step(30, reading(600, 30), 23, ready=10, starting=10),
            Step(45, reading(600, 45), 23, ready=10, starting=13),
        ]
    )


def test_scale_up_stops_at_the_smallest_count_whose_band_holds_the_demand() -> None:
    # 272 req/s x 1.3 / 32 = 11.05 replicas' worth: just past 10's band (11), within 11's: 11, not ceil = 12.
    run = Run(spec(), desired=10)
    run.play([Step(0, reading(272, 0), 11, reason="scaling up 10 -> 11")])
    # 400 req/s = 16.25: 15 x 1.1 = 16.5 holds it, 14 x 1.1 = 15.4 does not.
    run = Run(spec(), desired=10)
    run.play([Step(0, reading(400, 0), 15, reason="scaling up 10 -> 15")])


def test_bursty_traffic_is_sized_for_its_busiest_rate_without_headroom() -> None:
    # The busiest 60 s rate of the last 10 minutes (400 req/s) is 4 x the 300 s mean: bursty. 400 / 32 = 12.5
    # replicas' worth, no headroom on top; the bursty band is 20 %: 11 x 1.2 = 13.2 holds it, 10 x 1.2 = 12 does not.
    run = Run(spec(), desired=10)
    run.play([Step(0, reading(100, 0, bursty=(100, 400)), 11, reason="bursty traffic (peak 400 req/s is 4.0 x")])
    assert "400 req/s peak x 1s slot / C 32 = 12.50" in run.decisions[0].reason
    assert run.decisions[0].observed["burstyQpsPeak"] == 400


@pytest.mark.parametrize(
    ("busiest", "overrides", "expect"),
    [
        (224.0, {}, 4),  # 2.24 x the mean: the steady rule, 100 x 1.3 / 32 = 4.06 is within 4's band
        (225.0, {}, 6),  # 2.25 x: bursty, 225 / 32 = 7.03; 6 x 1.2 = 7.2 holds it
        (225.0, {"burstyTraffic": {"enabled": False}}, 4),
        (225.0, {"burstyTraffic": {"threshold": 3.0}}, 4),
        (225.0, {"burstyTraffic": {"tolerance": 0.1}}, 7),  # 6 x 1.1 = 6.6 does not hold 7.03
    ],
)
def test_the_bursty_rule_applies_from_its_threshold(busiest: float, overrides: dict[str, Any], expect: int) -> None:
    run = Run(spec(**overrides), desired=4)
    run.play([Step(0, reading(100, 0, bursty=(100, busiest)), expect)])


def test_bursty_traffic_scales_down_after_its_own_window() -> None:
    # The busiest rate falls to 200 req/s (2.5 x an 80 req/s mean: still bursty): 6.25 replicas' worth, below 11's
    # band. The bursty window is 180 s (the lookback already holds the peak), not the steady 300 s.
    run = Run(spec(), desired=10)
    run.play(
        [
            Step(0, reading(100, 0, bursty=(100, 400)), 11),
            Step(15, reading(100, 15, bursty=(100, 400)), 11, starting=1),
            Step(30, reading(80, 30, bursty=(80, 200)), 11, reason="holding 11 (recommending 7, 180s"),
            Step(194, reading(80, 194, bursty=(80, 200)), 11),
            Step(196, reading(80, 196, bursty=(80, 200)), 7, reason="scaling down 11 -> 7"),
        ]
    )


RAMP = [90, 100, 110, 120, 130, 140, 150, 160]  # +10 req/s a minute: every step over 5 % (160 / 150 = 1.067)
SEVEN = SustainedRise(steps=7)  # the cases below were written for seven steps; the default is four


@pytest.mark.parametrize(
    ("rates", "rule", "slope"),
    [
        (RAMP, SEVEN, 70 / 420),
        ([80, *RAMP], SEVEN, 70 / 420),  # older points do not count
        (RAMP[-4:], SustainedRise(steps=3), 30 / 180),
        (RAMP, SustainedRise(enabled=False), None),
        (RAMP[1:], SEVEN, None),  # less history than the span (a young Prometheus)
        ([100, 100, 100, 100, 100, 200, 300, 300], SEVEN, None),  # a step: a 120 s rate rises 2 steps
        ([90, 100, 110, 120, 120, 140, 150, 160], SEVEN, None),  # one step without a rise
        ([96, 100, 104, 108, 112, 117, 122, 127], SEVEN, None),  # under 5 % per step
        ([96, 100, 104, 108, 112, 117, 122, 127], SustainedRise(steps=7, min_rise=0.03), 31 / 420),
        ([0, 1, 2, 3, 4, 5, 6, 7], SEVEN, 7 / 420),  # from no traffic at all
        # The default, four steps: the last five readings, and a 120 s rate lifted by a step rises at three at most.
        (RAMP[-5:], SustainedRise(), 40 / 240),
        (RAMP[-4:], SustainedRise(), None),  # less history than the span
        ([100, 100, 100, 200, 300, 300], SustainedRise(), None),  # a step
        ([100, 100, 100, 150, 250, 300, 300], SustainedRise(), None),  # a step between readings: three rises
        # A rise back to a level the series had before the span (within minRise) is a wave or a recovery, not a new
        # level: no projection. A new level, above every earlier reading by more than minRise, is a ramp.
        ([170, 150, 120, *RAMP[-5:]], SustainedRise(), None),  # the crest before the trough was higher
        ([155, 150, 120, *RAMP[-5:]], SustainedRise(), None),  # 160 is within 5 % of 155
        ([150, 120, 110, *RAMP[-5:]], SustainedRise(), 40 / 240),  # 160 is over 150 x 1.05: a new level
        ([170, *RAMP], SEVEN, None),
    ],
)
def test_a_sustained_rise_is_a_rise_at_every_step(rates: list[float], rule: SustainedRise, slope: float | None) -> None:
    assert sustained_slope(series(1000.0, rates), rule) == (pytest.approx(slope) if slope is not None else None)


def test_a_rise_needs_a_reading_at_every_step() -> None:
    # 40 s apart over 480 s, rising 10 % each time: the span is covered, but 60 s before the newest the nearest
    # readings are 20 s off (more than a quarter step), so there is no verdict.
    sparse = series(1000.0, [100 * 1.1**k for k in range(13)], step=40.0)
    assert sustained_slope(sparse, SustainedRise()) is None
    assert sustained_slope(sparse, SustainedRise(step_seconds=40, steps=7)) is not None  # the same readings
    gap = tuple(p for p in series(1000.0, RAMP) if p[0] != 880.0)
    assert sustained_slope(gap, SustainedRise()) is None
    jitter = tuple((time + 10, rate) if time == 880.0 else (time, rate) for time, rate in series(1000.0, RAMP))
    assert sustained_slope(jitter, SustainedRise()) == pytest.approx(70 / 420)  # within a quarter step


def test_a_sustained_rise_is_projected_over_the_start_up_delay() -> None:
    # 160 req/s alone: 160 x 1.3 / 32 = 6.5, within 6's band. Rising 10 req/s a minute, half the slope over the
    # 120 s start-up plus the 120 s window's 60 s lag: 160 + 0.5 x (1/6) x 180 = 175 req/s, 7.11 replicas' worth.
    run = Run(spec(), desired=6)
    rising = "160 req/s rising 10 req/s per minute, 175 req/s in 180s"
    run.play([Step(0, reading(160, 0, trend=RAMP), 7, reason=rising)])
    assert run.decisions[0].observed["projectedQps"] == pytest.approx(175)
    for quiet in (spec(sustainedRise={"enabled": False}), spec(sustainedRise={"projection": 0})):
        run = Run(quiet, desired=6)
        run.play([Step(0, reading(160, 0, trend=RAMP), 6)])


def test_bursty_traffic_is_not_projected() -> None:
    # The bursty rule sizes for the busiest rate already; a rising mean does not add a projection on top.
    rising = [30, 40, 50, 60, 70, 80, 90, 100]
    run = Run(spec(), desired=10)
    run.play([Step(0, reading(100, 0, bursty=(100, 400), trend=rising), 11)])
    assert "projectedQps" not in run.decisions[0].observed
    # At 2 x the mean the traffic is not bursty and the rise counts: 115 req/s in 180 s is 4.67 replicas' worth.
    steady = Run(spec(), desired=4)
    steady.play([Step(0, reading(100, 0, bursty=(100, 200), trend=rising), 5, reason="rising 10 req/s per minute")])
    assert steady.decisions[0].observed["projectedQps"] == pytest.approx(115)


FALL = [160, 154, 148, 142, 136, 130, 124, 118, 112, 106, 100]  # -6 req/s a minute for ten minutes


@pytest.mark.parametrize(
    ("rates", "slope"),
    [
        (FALL, -0.1),
        ([400, *FALL], -0.1),  # readings older than ten minutes do not count
        (FALL[1:], -0.1),  # nine minutes of the ten: enough
        (FALL[2:], None),  # eight: less history than the span (a young Prometheus)
        ([100, 95, 97, 90, 92, 85, 88, 80, 83, 75, 78], pytest.approx(-0.0388, abs=1e-4)),  # noisy, but on a line
        ([100, 100, 100, 90, 80, 70, 60, 50, 50, 50, 50], pytest.approx(-0.106, abs=1e-3)),  # a ramp to a plateau
        ([100, 100, 100, 100, 100, 50, 50, 50, 50, 50, 50], None),  # a drop (a burst leaving the window): no line
        ([100, 101, 99, 100, 102, 98, 100, 101, 99, 100, 100], None),  # level traffic
        ([100, 90, 80, 70, 60, 50, 60, 70, 80, 90, 100], None),  # a wave's trough
        ([100, 80, 100, 80, 100, 80, 100, 80, 100, 80, 100], None),  # on/off
        (FALL[::-1], None),  # a rise
    ],
)
def test_a_steady_decline_is_a_falling_line_over_ten_minutes(rates: list[float], slope: Any) -> None:
    assert declining_slope(series(1000.0, rates)) == slope


def test_a_steady_decline_holds_no_older_rate() -> None:
    # 100 req/s, falling 6 req/s a minute. The busiest 30 s of the last two minutes (200 req/s), the bursty rule's
    # busiest minute (300 req/s, 3 x the mean) and two blocks of the envelope (300 req/s) are the traffic's past
    # level. On level traffic each of them sizes the fleet; on the decline the fleet is sized for the rate now:
    # 100 x 1.3 / 32 = 4.06 replicas, and 5 (below 6's band) is recommended.
    level = [100.0] * 11
    for trend, recommended, why in (
        (FALL, 5, "100 req/s falling 6 req/s per minute"),
        (level, 8, "bursty traffic"),  # 300 / 32 = 9.4 with the bursty band (20 %): 8 holds it
        (None, 8, "bursty traffic"),  # no series: no verdict
    ):
        fleet = FleetState(6, 6, concurrency_per_replica=C)
        d = decide(fleet, reading(100, 600, peak=200, bursty=(100, 300), trend=trend), spec(), (), 600.0)
        assert d.recommendation == recommended and why in d.reason, d.reason
    # Without the bursty reading: the peak term (200 x 1.15 / 32 = 7.2: 7) binds on level traffic, and with the
    # envelope's blocks the envelope (300 x 1.15 x 1.05 / 32 = 11.3: 11); on the decline neither does.
    held = (Block(0.0, 300.0, 2000.0, 20), Block(300.0, 300.0, 2000.0, 20))
    for trend, envelope, recommended in ((FALL, (), 5), (level, (), 7), (FALL, held, 5), (level, held, 11)):
        fleet = FleetState(6, 6, concurrency_per_replica=C)
        d = decide(fleet, reading(100, 600, peak=200, trend=trend), spec(), (), 600.0, envelope)
        assert d.recommendation == recommended, d.reason
        assert ("envelopeQps" in d.observed) == (trend is level and envelope == held)
        assert d.observed.get("fallingQpsPerMinute") == (pytest.approx(6) if trend is FALL else None)


def test_burst_enters_panic_and_skips_the_step_limit() -> None:
    run = Run(spec(), desired=4)
    run.play(
        [
            Step(0, reading(80, 0), 4),
            # The last 30 s ran at 600 req/s: 19 replicas' worth against 4 ready (>= 2x): panic. The peak counts
            # with the 15 % burst headroom: 600 x 1.15 / 32 = 21.6, so 20 (its 10 % band holds 21.6), at once.
            Step(15, reading(150, 15, burst=600, peak=600), 20, mode="panic", reason="panic: scaling up 4 -> 20"),
            # Replicas still starting are capacity on the way: the same burst adds nothing.
            Step(30, reading(150, 30, burst=600, peak=600), 20, ready=4, starting=16),
        ]
    )


def test_slow_decline_waits_for_the_scale_down_window() -> None:
    run = Run(
        spec(scaleDownTolerance=0.1, windows={"scaleDownStabilizationSeconds": 180}), desired=10, burst_envelope=False
    )
    # One reading a minute, falling 20 req/s each time: the recommendations are 10, 9, 9, 8, 6, 5, 5, 5.
    run.play(
        [
            Step(0, reading(240, 0), 10),
            Step(60, reading(220, 60), 10),
            Step(120, reading(200, 120), 10),
            Step(181, reading(180, 181), 9, reason="scaling down 10 -> 9"),  # 10 (t=0) left the window
            Step(240, reading(160, 240), 9),
            Step(300, reading(140, 300), 8),
            Step(361, reading(120, 361), 7),
            Step(421, reading(120, 421), 6),
            Step(481, reading(120, 481), 5),
        ]
    )
    assert [d.recommendation for d in run.decisions] == [10, 9, 9, 8, 7, 6, 5, 5, 5]


def test_a_fleet_that_never_queued_scales_down_after_the_quiet_window() -> None:
    # Defaults: a 300 s window, 90 s when no more than queuePerReplica (2) x ready requests queued during the
    # quiet lookback (600 s; `queued_peak` is Prometheus' max over it).
    run = Run(spec(), desired=10, burst_envelope=False)
    run.play(
        [
            Step(0, reading(240, 0, queued_peak=0), 10),
            Step(15, reading(120, 15, queued_peak=0), 10, reason="holding 10 (recommending 5, 90s"),
            Step(89, reading(120, 89, queued_peak=0), 10),
            Step(105, reading(120, 105, queued_peak=12), 5, reason="scaling down 10 -> 5 (no queue in 600s"),
        ]
    )


def test_a_fleet_with_no_memory_waits_for_the_window_before_scaling_down() -> None:
    # The first decision (or one after the memory was lost or expired) remembers nothing to hold, so without a seed
    # it would drop at once; the count the fleet has counts as recommended then (HPA's seed), so the window runs.
    run = Run(spec(), desired=10, burst_envelope=False)
    run.play(
        [
            Step(0, reading(120, 0, queued_peak=0), 10, reason="holding 10 (recommending 5, 90s"),
            Step(89, reading(120, 89, queued_peak=0), 10),
            Step(90, reading(120, 90, queued_peak=0), 5, reason="scaling down 10 -> 5 (no queue in 600s"),
        ]
    )
    held = decide(FleetState(10, 10, 0, 0, 1, C), reading(120, 0, queued_peak=0), spec(), (), 0.0)
    assert [(r.time, r.replicas) for r in held.history] == [(0.0, 10), (0.0, 5)]


def test_a_fleet_that_queued_keeps_the_full_window() -> None:
    run = Run(spec(), desired=10, burst_envelope=False)
    run.play(
        [
            Step(0, reading(240, 0, queued_peak=25), 10),  # 25 > 2 x 10 ready: capacity was short in the lookback
            Step(105, reading(120, 105, queued_peak=25), 10, reason="300s scale-down window"),
            Step(290, reading(120, 290, queued_peak=25), 10),
            Step(300, reading(120, 300, queued_peak=25), 5, reason="scaling down 10 -> 5: "),
        ]
    )


@pytest.mark.parametrize("queued_peak", [0.0, 25.0, None])
def test_a_fleet_that_met_its_slo_scales_down_after_the_quiet_window(queued_peak: float | None) -> None:
    # 4 % of the lookback's requests waited over 1 s (quietMissRatio 5 %): whatever the queue gauge saw (a queue
    # that drained within the SLO, or none), capacity was not short.
    run = Run(spec(), desired=10, burst_envelope=False)
    run.play(
        [
            Step(0, reading(240, 0, queued_peak=queued_peak, slo_miss=0.04), 10),
            Step(89, reading(120, 89, queued_peak=queued_peak, slo_miss=0.04), 10, reason="90s scale-down window"),
            Step(
                105,
                reading(120, 105, queued_peak=queued_peak, slo_miss=0.04),
                5,
                reason="scaling down 10 -> 5 (4% of requests waited over 1s in 600s: 90s window)",
            ),
        ]
    )
    assert run.decisions[-1].observed["sloMissRatio"] == 0.04


@pytest.mark.parametrize("queued_peak", [0.0, None])
def test_a_fleet_that_missed_its_slo_keeps_the_full_window(queued_peak: float | None) -> None:
    # 6 % over the SLO: the full window, even when no 15 s sample of the queue gauge caught the queue (it formed
    # and drained between scrapes).
    run = Run(spec(), desired=10, burst_envelope=False)
    run.play(
        [
            Step(0, reading(240, 0, queued_peak=queued_peak, slo_miss=0.06), 10),
            Step(105, reading(120, 105, queued_peak=queued_peak, slo_miss=0.06), 10, reason="300s scale-down window"),
            Step(300, reading(120, 300, queued_peak=queued_peak, slo_miss=0.06), 5, reason="scaling down 10 -> 5: "),
        ]
    )


@pytest.mark.parametrize(
    ("overrides", "slo_miss", "queued_peak", "window"),
    [
        ({"slo": {"quietMissRatio": 0.1}}, 0.06, 25.0, 90),  # a looser objective
        ({"slo": {"quietMissRatio": 0.0}}, 0.0, 25.0, 90),  # nobody waited: quiet even at 0
        ({"slo": {"enabled": False}}, 0.0, 25.0, 300),  # disabled: the queue gauge decides
        ({"slo": {"enabled": False}}, 0.5, 0.0, 90),
        ({}, None, 0.0, 90),  # no reading (no requests, or no bucket at the bound): the queue gauge decides
        ({}, None, 25.0, 300),
        ({}, float("nan"), 25.0, 300),
    ],
)
def test_the_slo_reading_decides_the_window_when_there_is_one(
    overrides: dict[str, Any], slo_miss: float | None, queued_peak: float, window: int
) -> None:
    run = Run(spec(**overrides), desired=10, burst_envelope=False)
    samples = reading(120, 105, queued_peak=queued_peak, slo_miss=slo_miss)
    run.play([Step(0, reading(240, 0), 10), Step(105, samples, 5 if window == 90 else 10, reason=f"{window}s")])


@pytest.mark.parametrize(
    ("rates", "lookback", "rise"),
    [
        ([7, 6, 5, 4, 3], 600, 0.0),  # a decline never rises
        ([4, 2, 3, 1], 600, 0.5),  # 2 -> 3: a rise is measured from the lowest reading before it
        ([1, 7, 4, 2], 600, 6.0),  # periodic traffic: from the trough to the crest
        ([1, 7, 4, 2], 150, 0.0),  # that rise is older than the lookback
        ([0, 0, 2], 600, math.inf),  # from nothing
        ([3], 600, 0.0),
        ([], 600, 0.0),
    ],
)
def test_the_largest_rise_within_the_lookback(rates: list[float], lookback: int, rise: float) -> None:
    assert largest_rise(series(1000.0, rates), lookback) == pytest.approx(rise)


@pytest.mark.parametrize(
    ("overrides", "trend", "window"),
    [
        ({}, [240, 200, 160, 120], 90),  # a decline: the quiet window
        ({}, [100, 160, 120, 120], 300),  # rose 60 % within the lookback: periodic, keep its capacity
        ({}, [160, 100, 210, 120], 300),
        ({"windows": {"quietMaxRise": 1.0}}, [100, 160, 120, 120], 90),  # a rise of 60 % allowed
        ({}, None, 90),  # no series yet (a young Prometheus): the SLO alone decides
    ],
)
def test_traffic_that_rose_again_in_the_lookback_keeps_the_full_window(
    overrides: dict[str, Any], trend: list[float] | None, window: int
) -> None:
    # Nobody waited over the SLO in either case: the rise alone decides.
    run = Run(spec(**overrides), desired=10, burst_envelope=False)
    samples = reading(120, 105, slo_miss=0.0, trend=trend)
    run.play([Step(0, reading(240, 0), 10), Step(105, samples, 5 if window == 90 else 10, reason=f"{window}s")])


def test_an_unknown_queue_keeps_the_full_window() -> None:
    run = Run(spec(), desired=10, burst_envelope=False)
    run.play([Step(0, reading(240, 0), 10), Step(105, reading(120, 105), 10), Step(300, reading(120, 300), 5)])


def test_scale_down_has_a_wider_band_than_scale_up() -> None:
    run = Run(spec(scaleDownTolerance=0.25, windows={"scaleDownStabilizationSeconds": 0}), desired=10)
    run.play(
        [
            Step(0, reading(200, 0), 10),  # 8.1 replicas' worth: within 25 % below 10, keep them
            Step(15, reading(180, 15), 8, reason="scaling down 10 -> 8"),  # 7.3: beyond the band
            Step(30, reading(180, 30), 8),
            Step(45, reading(220, 45), 9, reason="scaling up 8 -> 9"),  # 8.9: more than 10 % above 8
        ]
    )


def test_flapping_input_gives_steady_output() -> None:
    run = Run(spec(), desired=6)
    # Demand alternates between 3 and 6 replicas' worth every interval for ten minutes.
    steps = [Step(15 * i, reading(70 if i % 2 else 140, 15 * i), 6) for i in range(40)]
    run.play(steps)
    assert {d.replicas for d in run.decisions} == {6}


def test_a_wide_band_keeps_a_steady_fleet() -> None:
    run = Run(spec(tolerance=0.25), desired=8)
    run.play(
        [
            Step(0, reading(240, 0), 8),  # 9.75 replicas' worth: within 25 % above 8
            Step(15, reading(150, 15), 8),  # 6.1: within 25 % below
            Step(30, reading(250, 30), 9, reason="scaling up 8 -> 9"),  # 10.2: beyond 8's band, within 9's
        ]
    )


def test_noise_within_tolerance_changes_nothing() -> None:
    run = Run(spec(), desired=5)
    # 5 replicas carry 123 req/s at 30 % headroom; +-10 % around that is noise.
    run.play([Step(15 * i, reading(q, 15 * i), 5) for i, q in enumerate([123, 133, 113, 130, 118])])


@pytest.mark.parametrize(
    ("samples", "why"),
    [
        (None, "metrics unavailable"),
        (reading(500, 0, age=90), "metrics are 90s old"),
        (reading(None, 0), "no request rate"),
        (reading(500, 0, age=None), "no scrape"),
        (reading(500, 0, slot=None), "no slot time"),
    ],
)
def test_missing_or_stale_metrics_hold(samples: Samples | None, why: str) -> None:
    run = Run(spec(), desired=7)
    run.play([Step(0, samples, 7, mode="hold", reason=why)])
    assert run.decisions[0].metrics_available is False


def test_reading_goes_stale_while_waiting() -> None:
    # A reading taken 50 s ago that was 20 s old then is 70 s old now (max 60 s).
    run = Run(spec(), desired=3)
    run.play([Step(100, reading(0, 50, age=20), 3, mode="hold", reason="70s old")])


def test_hold_never_scales_down_but_respects_new_bounds() -> None:
    run = Run(spec(minReplicas=2, maxReplicas=4), desired=6)
    run.play([Step(0, None, 4, mode="hold")])  # maxReplicas lowered in the spec: the bound still applies
    run = Run(spec(minReplicas=3), desired=1)
    run.play([Step(0, None, 3, mode="hold")])


def test_bounds() -> None:
    run = Run(spec(minReplicas=3, maxReplicas=8), desired=3)
    run.play(
        [
            Step(0, reading(10, 0), 3),  # needs 1: min 3
            Step(15, reading(1000, 15, burst=1000), 8, mode="panic", reason="bounded to 8"),
        ]
    )


def test_gpu_budget_caps_replicas_and_warm_replicas_give_way_first() -> None:
    run = Run(spec(maxGPUs=24, warmReplicas=2), desired=2, gpus_per_replica=4)
    run.play([Step(0, reading(80, 0), 3)])  # needs 3.25, within 3's band (12 GPUs): 2 warm fit in the other 12
    assert run.decisions[-1].warm_replicas == 2
    run.play([Step(15, reading(1000, 15, burst=1000), 6, mode="panic", reason="bounded to 6")])
    assert run.decisions[-1].warm_replicas == 0  # 6 x 4 = 24 GPUs: no room left for warm ones


def test_starting_replicas_count_as_capacity_on_the_way() -> None:
    run = Run(spec(), desired=4)
    run.play(
        [
            Step(0, reading(230, 0), 8, reason="scaling up 4 -> 8"),  # needs 9.3 (9); max(2 x 4, 4 + 4) = 8
            # Four are still starting: only the one not yet asked for is added, not another five.
            Step(15, reading(230, 15), 9, ready=4, starting=4),
            Step(30, reading(230, 30), 9, ready=4, starting=5),
        ]
    )


def test_warm_replicas_are_promoted_on_scale_up_and_replenished() -> None:
    run = Run(spec(warmReplicas=2), desired=3)
    run.play(
        [
            Step(0, reading(60, 0), 3, warm=2, promote=0),
            Step(15, reading(110, 15, burst=110), 5, warm=2, promote=2, reason="promoting 2 warm"),
            Step(30, reading(150, 30, burst=150), 6, warm=0, promote=0),  # none left to promote: start one
        ]
    )
    assert all(d.warm_replicas == 2 for d in run.decisions)  # the operator keeps (re)starting two warm ones


def test_scale_to_zero_and_back() -> None:
    run = Run(spec(minReplicas=0, windows={"scaleDownStabilizationSeconds": 60}), desired=1)
    run.play(
        [
            Step(0, reading(5, 0), 1),
            Step(15, reading(0, 15, running=0), 1),  # idle, but 5 req/s was recommended 1 replica 15 s ago
            Step(61, reading(0, 61, running=0), 0, reason="scaling down 1 -> 0"),
            # At zero no worker reports anything; the router's rate is the only signal.
            Step(120, reading(0, 120, slot=None, running=None), 0, ready=0),
            Step(135, reading(3, 135, slot=None, running=None), 1, mode="panic", ready=0),
            # The replica is starting and no slot time is known: nothing justifies more, hold.
            Step(150, reading(3, 150, slot=None, running=None), 1, mode="hold", ready=0, starting=1),
            Step(270, reading(3, 270), 1),
        ]
    )


def test_waking_uses_the_slot_time_prometheus_remembers() -> None:
    run = Run(spec(minReplicas=0, windows={"scaleDownStabilizationSeconds": 0}), desired=0, burst_envelope=False)
    run.play(
        [
            # 100 req/s at the router and a 1 s slot time from the long fallback window: 5 replicas at once.
            Step(0, reading(100, 0, running=None), 5, mode="panic", ready=0, reason="panic: scaling up 0 -> 5"),
            Step(15, reading(200, 15, running=None), 8, mode="panic", ready=0, starting=5),
            # Demand falls before anything is ready: keep what is starting rather than cancel and restart it.
            Step(30, reading(10, 30, running=None), 8, ready=0, starting=8, reason="until the first replica"),
        ]
    )


def test_any_traffic_keeps_one_replica() -> None:
    run = Run(spec(minReplicas=0, windows={"scaleDownStabilizationSeconds": 0}), desired=2)
    run.play([Step(0, reading(0.01, 0), 1)])


def test_backlog_adds_replicas_only_while_it_lasts() -> None:
    run = Run(spec(windows={"scaleDownStabilizationSeconds": 300}), desired=4)
    # 90 req/s needs 3.66 replicas, but 4000 requests queue: draining them within the 120 s start-up delay takes
    # about one more replica (a queue that deep is also a panic: it lifts the step limit).
    run.play(
        [
            Step(0, reading(90, 0, queued=4000), 5, mode="panic", reason="4000 queued"),
            Step(15, reading(90, 15, queued=3000), 5, ready=4, starting=1),
            Step(30, reading(90, 30, queued=0), 4),  # drained: the backlog replica goes despite the 300 s window
        ]
    )


def test_gpu_target_can_only_raise() -> None:
    run = Run(spec(targets={"gpuUtilization": 50}), desired=4)
    run.play([Step(0, reading(60, 0, gpu=90), 7)])  # 4 x 90 / 50 = 7.2, within 7's band (the rate alone needs 3)
    run = Run(spec(targets={"gpuUtilization": 50}), desired=4)
    run.play([Step(0, reading(90, 0, gpu=10), 4)])  # low GPU never lowers what the rate asks for


def test_memory_round_trips_and_stays_small() -> None:
    rs = spec(windows={"scaleDownStabilizationSeconds": 3000})
    history = tuple(Recommendation(float(t), 100 - t) for t in range(0, 60))
    kept = prune_history(history, 60.0, rs)
    assert len(kept) <= MAX_MEMORY
    assert max(r.replicas for r in kept) == 100  # merging keeps the maximum
    assert history_from_state(history_to_state(kept)) == kept
    assert history_from_state({"recommendations": [[1, 2], [2, "x"], "junk", [3.5, 4], [4, -1]]}) == (
        Recommendation(1.0, 2),
        Recommendation(3.5, 4),
    )
    assert history_from_state(None) == ()


@pytest.mark.parametrize(("bursty_window", "enabled", "kept_since"), [(600, True, 600.0), (600, False, 900.0)])
def test_memory_covers_the_longer_of_both_rules_windows(bursty_window: int, enabled: bool, kept_since: float) -> None:
    # The steady window is 300 s; a bursty window of 600 s needs 600 s of memory, whichever rule decides next.
    rs = spec(burstyTraffic={"enabled": enabled, "scaleDownStabilizationSeconds": bursty_window})
    history = tuple(Recommendation(float(t), 20 - t // 100) for t in range(500, 1100, 100))  # falling: all kept
    kept = prune_history(history, 1100.0, rs)
    assert kept[0].time == kept_since


def replay(rates: Callable[[float], tuple[float, float]], until: float, desired: int = 5) -> dict[float, Decision]:
    """Every 15 s from 0 to `until`, a reading of (stable rate, peak short-window rate) = rates(t), every replica
    ready; the decisions by time, each with the memory (history and envelope) the previous one returned."""
    rs, history, envelope, out = spec(), (), (), {}
    for t in range(0, int(until) + 1, 15):
        qps, peak = rates(float(t))
        fleet = FleetState(desired, desired, concurrency_per_replica=C)
        d = decide(fleet, reading(qps, float(t), peak=peak), rs, history, float(t), envelope)
        history, envelope, desired = d.history, d.envelope, d.replicas
        out[float(t)] = d
    return out


def bursts(*at: float, height: float = 300.0) -> Callable[[float], tuple[float, float]]:
    """100 req/s throughout, with a 30 s peak of `height` req/s at each of the times `at`."""
    return lambda t: (100.0, height if t in at else 100.0)


def test_bursts_seen_are_held_while_the_traffic_does_not_decline() -> None:
    # 100 req/s (5 replicas with 30 % headroom) with 30 s bursts at 300 req/s at 600 and 900 s: 300 x 1.15 x 1.05
    # / 32 = 11.3 replicas. Without the envelope the fleet would be back at 5 once the 300 s window has passed.
    last = 600 + ENVELOPE_HOLD_S  # until the first of the two leaves the memory: then one burst is left
    run = replay(bursts(600, 900), last + 600)
    assert run[0].replicas == 5 and run[600].replicas == 10  # the peak term (10.8), in 10's band
    assert run[900].replicas == 11  # the second burst: now a pattern
    held = [run[t].replicas for t in run if 930 <= t < last]
    assert min(held) == 11, "the bursts' capacity is kept for the next one"
    assert "burst envelope" in run[1800].reason and run[1800].observed["envelopeQps"] == 300 * 1.15 * 1.05
    # After the hold the envelope lets go, and the fleet follows the rate again (after the scale-down window).
    assert run[last + 600].replicas == 5


def test_one_burst_is_not_a_pattern() -> None:
    # The same burst once in 90 minutes: the envelope is the second highest five-minute peak, the ordinary rate.
    run = replay(bursts(600), 2400)
    assert run[600].replicas == 10 and run[2400].replicas == 5
    assert "burst envelope" not in run[2400].reason


def test_a_sustained_decline_releases_the_envelope() -> None:
    # The same bursts, then the day declines: 100 req/s falls to 40 over half an hour and stays. The held peaks are
    # scaled by the half-hour mean's fall, so the fleet follows the decline instead of holding 300 req/s.
    def rates(t: float) -> tuple[float, float]:
        qps = 100.0 if t < 900 else max(40.0, 100.0 - 60.0 * (t - 900) / 1800)
        return qps, 300.0 if t in (600, 900) else qps

    run = replay(rates, 4500)
    assert run[930].replicas >= 10
    assert run[4500].replicas <= 5  # 40 req/s: 2 replicas' worth; the envelope about 300 x 0.4 x 1.2 / 32 = 4.5
    assert envelope_qps(run[4500].envelope, 4500) < 0.45 * 300


def test_a_fast_decline_is_followed_without_the_half_hour_mean_s_lag() -> None:
    # The same bursts, then the rate falls from 100 to 25 req/s in 20 minutes (a ramp down). The half-hour mean lags
    # such a decline by a quarter of an hour; the blocks' means fall along a line, so the level is read off it.
    def rates(t: float) -> tuple[float, float]:
        qps = 100.0 if t < 900 else max(25.0, 100.0 - 75.0 * (t - 900) / 1200)
        return qps, 300.0 if t in (600, 900) else qps

    run = replay(rates, 2100)
    blocks = run[2100].envelope
    mean = sum(b.qps_sum for b in blocks[-6:]) / sum(b.readings for b in blocks[-6:])  # the half hour's: 67 req/s
    assert declining_level(blocks, 2100) < 0.6 * mean  # the line is near the 25 req/s the traffic is at
    assert envelope_qps(blocks, 2100) < 0.6 * 300 * mean / 100
    assert run[2100].recommendation <= 4  # without the line: 8 (210 req/s held x 1.2 / 32 = 7.9)


def test_traffic_that_swings_or_keeps_its_level_fits_no_declining_line() -> None:
    def blocks(means: Sequence[float]) -> tuple[Block, ...]:
        return tuple(Block(300.0 * i, 2 * m, 20 * m, 20) for i, m in enumerate(means))

    assert declining_level(blocks([100, 90, 80, 70, 60, 50]), 1800) == pytest.approx(45)  # on the line, now
    for means in ([100, 50, 100, 50, 100, 50], [100, 100, 100, 100, 100, 100], [50, 60, 70, 80, 90, 100], [100, 50]):
        assert declining_level(blocks(means), 1800) == math.inf
    assert declining_level(blocks([200, 150, 100, 100, 100, 100, 100, 100, 100]), 2700) == math.inf  # fell long ago
    assert rising_level(blocks([50, 60, 70, 80]), 3, 1200) == pytest.approx(75)  # the line at the block's start
    for means in ([100, 50, 100, 50], [100, 100, 100, 100], [80, 70, 60, 50]):
        assert rising_level(blocks(means), 3, 1200) == 0


def test_a_day_s_peak_is_not_held_as_a_burst_through_the_evening() -> None:
    # A compressed day: 20 -> 100 req/s in 30 minutes and back, every 30 s peak 1.2 x the rate. The half-hour mean
    # at the top lags the rise (about 60 req/s), so the top's peaks would look like bursts 2 x that level and be held
    # on the way down; read off the rise's line they are 1.2 x it, and the decline's line releases them.
    def rates(t: float) -> tuple[float, float]:
        qps = 20.0 + 80.0 * (t / 1800 if t < 1800 else max(0.0, 1.0 - (t - 1800) / 1800))
        return qps, 1.2 * qps

    run = replay(rates, 3300)
    assert envelope_qps(run[3300].envelope, 3300) < 60  # the rate is 33 req/s; the top's peaks were 120


def test_idle_traffic_holds_nothing() -> None:
    rs = spec(minReplicas=0, windows={"scaleDownStabilizationSeconds": 0, "quietScaleDownSeconds": 0})
    busy = decide(FleetState(4, 4, concurrency_per_replica=C), reading(100, 0, peak=300), rs, (), 0.0)
    again = decide(FleetState(11, 11, concurrency_per_replica=C), reading(100, 300, peak=300), rs, busy.history,
                   300.0, busy.envelope)  # fmt: skip
    idle = decide(FleetState(11, 11, concurrency_per_replica=C), reading(0, 315), rs, again.history, 315.0,
                  again.envelope)  # fmt: skip
    assert idle.replicas == 0
    assert envelope_qps(idle.envelope, 315.0) > 100  # remembered, not used while nothing arrives


def test_bad_data_keeps_the_envelope_as_it_was() -> None:
    first = decide(FleetState(4, 4, concurrency_per_replica=C), reading(100, 0, peak=300), spec(), (), 0.0)
    held = decide(FleetState(11, 11, concurrency_per_replica=C), None, spec(), first.history, 15.0, first.envelope)
    assert held.mode == "hold" and held.envelope == first.envelope


def test_the_envelope_round_trips_and_stays_small() -> None:
    envelope: tuple[Block, ...] = ()
    for t in range(0, 4 * int(ENVELOPE_HOLD_S), 15):  # four hold periods of readings, 15 s apart
        d = decide(FleetState(5, 5, concurrency_per_replica=C), reading(100, t, peak=120), spec(), (), float(t),
                   envelope)  # fmt: skip
        envelope = d.envelope
    assert 1 < len(envelope) <= 25  # five-minute blocks of the hold plus the mean's half hour
    state = history_to_state((), envelope)
    assert envelope_from_state(state) == envelope
    assert history_from_state(state) == ()
    junk = {"envelope": [[1, 2, 3, 4], [1, "x", 3, 4], "junk", [2, 1.0, 1.0], [3, 1.0, 1.0, 0], [4, -1, 1, 1]]}
    assert envelope_from_state(junk) == (Block(1.0, 2.0, 3.0, 4),)
    assert envelope_from_state(None) == () and envelope_from_state({"envelope": "x"}) == ()
    assert "envelope" not in history_to_state(())  # no memory, no key: the state of a fleet without traffic


@pytest.mark.parametrize(
    ("changes", "fragment"),
    [
        ({"qps": 1e308}, "qps reads 1e+308, past 1e+15: unknown"),
        ({"slot_seconds": 1e308}, "slotSeconds reads 1e+308"),
        ({"running": math.inf}, "running reads inf"),
        ({"qps_trend": ((0.0, 10.0), (60.0, math.inf))}, "qpsTrend has a point"),
        ({"queued": 1e14}, "demand unknown: the queue asks for 2.6e+10 replicas"),
        ({"age_seconds": math.nan}, "the metrics' age reads nan: unknown"),
    ],
    ids=["qps", "slot", "running", "trend", "queue", "age"],
)
def test_a_reading_or_a_demand_no_fleet_gives_holds_and_says_which(changes: dict[str, Any], fragment: str) -> None:
    """Issue 37: a rate of 1e308 times a slot time is infinite and math.ceil raised OverflowError out of every pass
    (the autoscaler held forever and never wrote status). Such a reading, or a demand past MAX_DEMAND_REPLICAS, is
    unknown: the fleet holds its count, as on a missing metric, and the reason names it."""
    samples = reading(100, 0.0).with_fields(**changes)
    d = decide(FleetState(4, 4, concurrency_per_replica=C), samples, spec(), (), 0.0)
    assert (d.replicas, d.mode, d.metrics_available) == (4, "hold", False)
    assert fragment in d.reason, d.reason


def test_a_tolerance_of_minus_one_does_not_divide_by_zero() -> None:
    """The spec's rules refuse it; a decision handed one anyway scales on ceil(demand), as below the band."""
    minus_one = spec().model_copy(update={"tolerance": -1.0})
    d = decide(FleetState(4, 4, concurrency_per_replica=C), reading(400, 0.0), minus_one, (), 0.0)
    assert d.replicas == 17  # ceil(400 x 1.3 / 32)
