"""The simulator's queue-time histogram (`bench/fleetsim/sim.py`): its counters continue the seeded history's across
the trace's start, as a real Prometheus counter does, so the SLO reading (a rate over them) is there from the first
decisions."""

from dataclasses import dataclass, field
from itertools import pairwise

import numpy as np

from bench.fleetsim.ours import samples_from_scrapes
from bench.fleetsim.sim import Command, FleetView, SimConfig, simulate
from sglang_operator.api.spec import AutoscalingSpec

SPEC = AutoscalingSpec(enabled=True)
QPS, SLOT_S, CONCURRENCY = 4.0, 2.0, 4


@dataclass
class Recorder:
    """A static fleet that keeps, at each decision, the SLO reading ours would get and the histogram's scrapes."""

    replicas: int
    name: str = "recorder"
    period: float = 15.0
    readings: list[tuple[float, float | None]] = field(default_factory=list)
    queue_le: list[tuple[float, ...]] = field(default_factory=list)

    def initial(self) -> int:
        return self.replicas

    def step(self, view: FleetView) -> Command:
        samples = samples_from_scrapes(view.scrapes, SPEC, view.t, view.concurrency)
        self.readings.append((view.t, None if samples is None else samples.slo_miss_ratio))
        self.queue_le = list(view.scrapes.queue_le)
        return Command(self.replicas)


def run(replicas: int) -> Recorder:
    arrivals = np.arange(0.0, 900.0, 1.0 / QPS)
    cfg = SimConfig(
        concurrency=CONCURRENCY,
        startup_s=120.0,
        scrape_s=15.0,
        slo_wait_s=SPEC.slo.queue_seconds,
        horizon_s=900.0,
        history_s=1800.0,
        history_qps=QPS,
        history_slot_s=SLOT_S,
    )
    recorder = Recorder(replicas)
    simulate(arrivals, np.full(len(arrivals), SLOT_S), recorder, cfg)
    return recorder


def test_the_histograms_counters_continue_the_seeded_history() -> None:
    recorder = run(replicas=4)
    for bucket in zip(*recorder.queue_le, strict=True):
        assert all(b >= a for a, b in pairwise(bucket))  # no reset at the trace's start


def test_the_slo_reading_is_there_from_the_first_decisions() -> None:
    served = run(replicas=4)  # 2 replicas' worth of load: nobody waits
    assert all(ratio == 0.0 for _, ratio in served.readings)
    starved = run(replicas=1)  # half the load it needs: the queue grows from the start
    early = [ratio for t, ratio in starved.readings if t < SPEC.windows.quiet_lookback_seconds]
    assert early and all(ratio is not None for ratio in early)
    assert early[-1] is not None and early[-1] > 0.0
