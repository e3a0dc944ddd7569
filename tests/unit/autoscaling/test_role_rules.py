"""Each role of a prefill/decode fleet decided over time, as `test_policy.py` drives a colocated fleet: a table of
(time, reading, expectation) per role, the role's count following its own decisions.

- a handshake queue (decode's prealloc, prefill's bootstrap) raises its role only once it persisted over the burst
  window, not for the one scrape that caught a burst's first handshakes;
- the newest reading counts in a role's peak at a burst's start (the peak's subquery ends up to a step earlier);
- the colocated policy's rules over each role's own measure and history: bursty traffic, a sustained rise, a steady
  decline, and the quiet scale-down window.

The fleet of `test_roles.py`: prefill `p` (tp=2, 8 slots, 1..6), decode `d` (tp=1, C = 32, 1..8).
"""

from dataclasses import dataclass, replace
from typing import Any

import pytest

from sglang_operator.api.spec import Role, SGLangDeploymentSpec
from sglang_operator.autoscaling.pd_pass import pd_fleets
from sglang_operator.autoscaling.roles import RoleDecision, decide_pd, decide_role
from sglang_operator.autoscaling.signals import FleetState, Recommendation
from sglang_operator.prometheus.roles import RoleSamples
from tests.integration.autoscaling.test_roles import STATUS, decode, pd_spec, prefill
from tests.unit.autoscaling.test_policy import FALL, RAMP, series

# A prefill replica prefills 10,000 uncached tokens/s (5,000 per GPU, tp=2): a load of N x 10,000 is N units.
PER_GPU = {"targets": {"prefillTokensPerSecondPerGPU": 5000}}


@dataclass
class Step:
    t: float
    samples: RoleSamples | None
    expect: int
    reason: str | None = None
    mode: str = "normal"
    signal: str | None = None


@dataclass
class Run:
    """One role over time: each decision starts from the count the previous one set, every unit ready."""

    role: Role
    spec: SGLangDeploymentSpec
    desired: int
    history: tuple[Recommendation, ...] = ()

    def play(self, steps: list[Step]) -> list[RoleDecision]:
        fleet = pd_fleets(self.spec, STATUS)[self.role]
        decisions = []
        for step in steps:
            current = replace(fleet.current, desired=self.desired, ready=self.desired, starting=0)
            d = decide_role(replace(fleet, current=current), step.samples, self.spec.autoscaling, self.history, step.t)
            where = f"t={step.t}: {d.reason}"
            assert d.units == step.expect, where
            assert d.mode == step.mode, where
            if step.reason is not None:
                assert step.reason in d.reason, where
            if step.signal is not None:
                assert d.signal == step.signal, where
            self.history, self.desired = d.history, d.units
            decisions.append(d)
        return decisions


def at(t: float, reading: RoleSamples, **changes: Any) -> RoleSamples:
    return replace(reading, collected_at=t, **changes)


# -- 1. a handshake queue raises its role only once it persisted -----------------------------------------------------


def test_one_scrape_of_the_prealloc_queue_adds_no_decode() -> None:
    # 100 requests awaiting KV memory, each staying 200 s (20 running / 0.1 finished per second): (100 - 2 x 2
    # ready) / 32 = 3 units on top of decode's 1 (4, its band holding 4). The raw gauge caught the first handshakes of
    # a burst at one scrape: the least of the burst window's scrapes (`prealloc_queued_persisted`) is 0, or there is
    # none (fewer than two scrapes in the window); the queue raises decode once it was there at every scrape.
    usual = decode(requests=0.1)
    caught = {"prealloc_queued": 100.0}
    Run("decode", pd_spec(), desired=2).play(
        [
            Step(0, at(0, usual, **caught, prealloc_queued_persisted=0.0), 2, reason="holding 2"),
            Step(15, at(15, usual), 2),
            Step(30, at(30, usual, **caught, prealloc_queued_persisted=None), 2),
            Step(45, at(45, usual, **caught, prealloc_queued_persisted=100.0), 4, mode="panic", signal="preallocQueue",
                 reason="panic: scaling up 2 -> 4: 20 running x 1.3 (peak 22 x 1.15) / C 32 = 0.81, 1 while requests "
                 "run + 100 awaiting KV, 0 queued (3.00)"),
        ]
    )  # fmt: skip


def test_one_scrape_of_the_bootstrap_queue_adds_no_prefill() -> None:
    # 5,000 requests awaiting their handoff: (5,000 - 2) x 2,000 tokens / (32,000 tokens/s x 120 s) = 2.6 units.
    caught = {"bootstrap_queued": 5000.0}
    Run("prefill", pd_spec(), desired=1).play(
        [
            Step(0, at(0, prefill(), **caught, bootstrap_queued_persisted=0.0), 1),
            Step(15, at(15, prefill(), **caught, bootstrap_queued_persisted=5000.0), 4, mode="panic",
                 signal="bootstrapQueue"),
        ]
    )  # fmt: skip


# -- 2. the newest reading counts in a role's peak -------------------------------------------------------------------


def test_decode_counts_the_newest_running_requests_at_a_burst_s_start() -> None:
    # A burst's first scrape: 100 running now, while the 120 s mean (25) and the lookback's most (22, a subquery whose
    # newest point is at the step boundary before that scrape) still read the quiet before it. 100 x 1.15 / 32 = 3.6
    # units: 4 now, not a scrape later.
    Run("decode", pd_spec(), desired=2).play(
        [
            Step(0, at(0, decode()), 2),
            Step(15, at(15, decode(running=100.0, running_mean=25.0, running_peak=22.0)), 4, signal="concurrency",
                 reason="scaling up 2 -> 4: 25 running x 1.3 (peak 100 x 1.15) / C 32 = 3.59"),
        ]
    )  # fmt: skip


def test_prefill_counts_the_latest_burst_window_rate_at_a_burst_s_start() -> None:
    # The latest 30 s ran at 40,000 uncached tokens/s; the 120 s rate (8,000) and the lookback's busiest (9,000) have
    # not caught up: 40,000 x 1.15 / 32,000 = 1.44 units, 2 (its band holds 1.44).
    Run("prefill", pd_spec(), desired=1).play(
        [
            Step(0, at(0, prefill()), 1),
            Step(15, at(15, prefill(uncached_tokens_burst=40_000.0)), 2,
                 reason="scaling up 1 -> 2: 40000 uncached tokens/s peak / 32000 tokens/s per replica = 1.44"),
        ]
    )  # fmt: skip


# -- 3. the colocated policy's rules over each role's own measure and history ----------------------------------------


def test_bursty_prefill_is_sized_for_its_busiest_rate_and_released_after_the_bursty_window() -> None:
    # The busiest 60 s of the last ten minutes (40,000 uncached tokens/s) is 4 x the 300 s mean: bursty. Sized for
    # 40,000 with no headroom: 4 units (the steady rule: 10,000 x 1.3 = 1.3 units, 2). When the busiest falls to
    # 25,000 (2.5 x, still bursty) the recommendation is 3, held for the bursty window (180 s), not the full 300 s.
    spec = pd_spec(**PER_GPU)
    usual = prefill(uncached_tokens=10_000.0, uncached_tokens_peak=10_000.0, bursty_mean=10_000.0)
    why = "bursty traffic (peak 40000 uncached tokens/s is 4.0 x the mean 10000); "
    Run("prefill", spec, desired=1).play(
        [
            Step(0, at(0, usual, bursty_peak=40_000.0), 4, mode="panic", reason=why),
            Step(15, at(15, usual, bursty_peak=25_000.0), 4, reason="holding 4 (recommending 3, 180s scale-down"),
            Step(179, at(179, usual, bursty_peak=25_000.0), 4),
            Step(181, at(181, usual, bursty_peak=25_000.0), 3, reason="scaling down 4 -> 3"),
        ]
    )
    # The same readings with the rule off: the steady rule (its 300 s window holds the 2 it asked for).
    steady = pd_spec(**PER_GPU, burstyTraffic={"enabled": False})
    Run("prefill", steady, desired=1).play([Step(0, at(0, usual, bursty_peak=40_000.0), 2)])


def test_bursty_decode_reads_its_running_requests() -> None:
    # 120 running at the busiest minute, 3 x the 300 s mean of 40: 120 / 32 = 3.75 units with no headroom, and the
    # bursty band (20 %) holds 3.75 at 4.
    usual = decode(running_mean=40.0, running=40.0, running_peak=44.0, bursty_mean=40.0, bursty_peak=120.0)
    (d,) = Run("decode", pd_spec(), desired=2).play([Step(0, at(0, usual), 4)])
    assert "bursty traffic (peak 120 running is 3.0 x the mean 40); 40 running x 1 (peak 120 x 1) / C 32" in d.reason
    assert d.observed["burstyPeak"] == 120.0


def test_a_sustained_rise_of_decode_is_projected_over_the_start_up_delay() -> None:
    # 160 running (160 x 1.3 / 32 = 6.5, within 6's band), its 120 s mean rising 10 a minute for seven minutes to a
    # new level: 160 + 0.5 x (10 / 60) x (120 s start-up + 60 s lag) = 175 running, 7.1 units.
    level = decode(running_mean=160.0, running=160.0, running_peak=160.0)
    (d,) = Run("decode", pd_spec(), desired=6).play(
        [Step(0, at(0, level, trend=series(0.0, RAMP)), 7, reason="160 running rising 10 running per minute, "
              "175 running in 180s x 1.3")]
    )  # fmt: skip
    assert d.observed["projectedRunning"] == pytest.approx(175)
    Run("decode", pd_spec(), desired=6).play([Step(0, at(0, level, trend=series(0.0, [160.0] * 8)), 6)])


def test_a_sustained_rise_of_prefill_is_projected_too() -> None:
    # 16,000 uncached tokens/s rising 1,000 a minute: 17,500 x 1.3 / 10,000 = 2.3 units, 3 (2's band ends at 2.2).
    level = prefill(uncached_tokens=16_000.0, uncached_tokens_peak=16_000.0)
    ramp = [1000.0 * r / 10 for r in RAMP]
    (d,) = Run("prefill", pd_spec(**PER_GPU), desired=2).play(
        [Step(0, at(0, level, trend=series(0.0, ramp)), 3, reason="rising 1000 uncached tokens/s per minute")]
    )
    assert d.observed["projectedUncachedTokensPerSecond"] == pytest.approx(17_500)


def test_a_steady_decline_of_decode_holds_no_older_peak() -> None:
    # 100 running, the 120 s mean falling 6 a minute for ten minutes. The lookback's most (200) and the bursty
    # rule's busiest minute (300, 3 x the mean) are the level of minutes ago: on the decline decode is sized for
    # now, 100 x 1.3 / 32 = 4.06, 5 recommended (below 6's band), where level traffic is sized for 300 (8).
    now = decode(running_mean=100.0, running=100.0, running_peak=200.0, bursty_mean=100.0, bursty_peak=300.0)
    for trend, recommended, why in (
        (FALL, 5, "holding 6 (recommending 5, 300s scale-down window): 100 running falling 6 running per minute x 1.3"
         " (peak 100 x 1.15) / C 32 = 4.06"),
        ([100.0] * 11, 8, "scaling up 6 -> 8: bursty traffic (peak 300 running is 3.0 x the mean 100)"),
    ):  # fmt: skip
        (d,) = Run("decode", pd_spec(), desired=6).play(
            [Step(600, at(600, now, trend=series(600.0, trend)), max(6, recommended), reason=why)]
        )
        assert d.recommendation == recommended
        assert d.observed.get("fallingRunningPerMinute") == (pytest.approx(6) if trend is FALL else None)


def test_each_role_is_quiet_or_not_from_its_own_history() -> None:
    # Both roles' demand falls to a third. Decode met its SLO over the quiet lookback (1 % waited over 1 s): its
    # surplus goes after the 90 s quiet window. Prefill missed it (20 %), or its traffic rose again in the lookback
    # (60 % within ten minutes, periodic): each keeps the full 300 s window.
    busy = decode(running_mean=120.0, running=120.0, running_peak=120.0)  # 4.9 units
    calm = decode(running_mean=40.0, running=40.0, running_peak=40.0, slo_miss_ratio=0.01)  # 1.6 units
    Run("decode", pd_spec(), desired=5).play(
        [
            Step(0, at(0, busy), 5),
            Step(15, at(15, calm), 5, reason="holding 5 (recommending 2, 90s scale-down window)"),
            Step(89, at(89, calm), 5),
            Step(105, at(105, calm), 2,
                 reason="scaling down 5 -> 2 (1% of requests waited over 1s in 600s: 90s window)"),
        ]
    )  # fmt: skip
    spec = pd_spec(**PER_GPU)
    heavy = prefill(uncached_tokens=38_000.0, uncached_tokens_peak=38_000.0)  # 4.9 units
    for light in (
        prefill(uncached_tokens=12_000.0, uncached_tokens_peak=12_000.0, slo_miss_ratio=0.2),
        prefill(uncached_tokens=12_000.0, uncached_tokens_peak=12_000.0, slo_miss_ratio=0.0,
                trend=series(105.0, [10_000.0, 16_000.0, 12_000.0, 12_000.0])),
    ):  # fmt: skip
        Run("prefill", spec, desired=5).play(
            [
                Step(0, at(0, heavy), 5),
                Step(105, at(105, light), 5, reason="holding 5 (recommending 2, 300s scale-down window)"),
                Step(299, at(299, light), 5),
                Step(300, at(300, light), 2, reason="scaling down 5 -> 2: "),
            ]
        )
    # A prefill that never queued beyond its tolerance (no SLO reading) is quiet as well.
    no_queue = prefill(uncached_tokens=12_000.0, uncached_tokens_peak=12_000.0, queued_peak=2.0)
    Run("prefill", spec, desired=5).play(
        [Step(0, at(0, heavy), 5), Step(105, at(105, no_queue), 2, reason="(no queue in 600s: 90s window)")]
    )


def test_both_roles_apply_their_own_rules_in_one_decision() -> None:
    # Prefill bursty (4 units for its busiest minute), decode on a sustained rise (7 units for 175 running), at once.
    spec = pd_spec(**PER_GPU)
    fleets = pd_fleets(spec, STATUS)
    fleets["decode"] = replace(fleets["decode"], current=FleetState(6, 6, concurrency_per_replica=32))
    samples = {
        "prefill": prefill(uncached_tokens=10_000.0, uncached_tokens_peak=10_000.0, bursty_mean=10_000.0,
                           bursty_peak=40_000.0),
        "decode": decode(running_mean=160.0, running=160.0, running_peak=160.0, trend=series(10_000.0, RAMP)),
    }  # fmt: skip
    decision = decide_pd(fleets, samples, spec.autoscaling, {}, 10_000.0)
    assert decision.groups == {"p": 4, "d": 7}
    assert "bursty traffic" in decision.roles["prefill"].reason
    assert "rising 10 running per minute" in decision.roles["decode"].reason
