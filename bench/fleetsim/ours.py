"""The operator's own policy in the simulator: the real `sglang_operator.autoscaling.policy.decide`, fed Samples
built from the simulated scrapes with the same windows its PromQL queries use."""

from dataclasses import dataclass, field
from typing import Any

from sglang_operator.api.spec import AutoscalingSpec
from sglang_operator.autoscaling.policy import decide
from sglang_operator.autoscaling.signals import Block, Decision, FleetState, Recommendation, Samples
from sglang_sim.metrics import QUEUE_BUCKETS

from .sim import Command, FleetView, Scrapes

SLOT_FALLBACK_S = 6 * 3600.0  # the reader's `slot_fallback_seconds`


def samples_from_scrapes(s: Scrapes, spec: AutoscalingSpec, now: float, concurrency: int) -> Samples | None:
    """What `prometheus/client.py` would read from a Prometheus holding these scrapes.

    Request rates come from the router's arrival counter (the reader's default demand query); slot time, running
    and queued from the workers, which have no series while none is ready.
    """
    if not s.t:
        return None
    w, b, rise = spec.windows, spec.bursty_traffic, spec.sustained_rise
    demand: dict[str, Any] = {
        "qps": s.rate(s.arrivals, w.rate_seconds),
        "qps_burst": s.rate(s.arrivals, w.burst_seconds),
        "qps_peak": s.peak_rate(s.arrivals, w.burst_seconds, w.peak_lookback_seconds),
    }
    if b.enabled:
        demand |= {
            "bursty_qps": s.rate(s.arrivals, b.rate_seconds),
            "bursty_qps_burst": s.rate(s.arrivals, b.burst_seconds),
            "bursty_qps_peak": s.peak_rate(s.arrivals, b.burst_seconds, b.peak_lookback_seconds),
        }
    span = max(w.quiet_lookback_seconds, rise.steps * rise.step_seconds if rise.enabled else 0)
    demand["qps_trend"] = _trend(s, w.rate_seconds, span)
    slot = _slot_time(s, w.slot_time_seconds) or _slot_time(s, SLOT_FALLBACK_S)
    if s.ready[-1] == 0:  # no worker series but the slot time Prometheus still holds from earlier
        return Samples(collected_at=now, age_seconds=now - s.t[-1], slot_seconds=slot, **demand)
    running, queued, ready = s.running[-1], s.queued[-1], s.ready[-1]
    return Samples(
        collected_at=now,
        age_seconds=now - s.t[-1],
        slot_seconds=slot,
        running=running,
        queued=queued,
        queued_peak=max(s.queued[len(s.queued) - max(1, s.points(w.quiet_lookback_seconds)) :]),
        gpu_utilization=100.0 * min(1.0, running / (ready * concurrency)),
        slo_miss_ratio=_slo_miss_ratio(s, spec) if spec.slo.enabled else None,
        **demand,
    )


def _trend(s: Scrapes, window: float, span: float) -> tuple[tuple[float, float], ...]:
    """The `window` rate at every scrape of the last `span` seconds (the reader's subquery), oldest first."""
    last = len(s.t) - 1
    points = ((s.t[k], s.rate(s.arrivals, window, k)) for k in range(max(0, last - s.points(span)), last + 1))
    return tuple((t, rate) for t, rate in points if rate is not None)


def _slo_miss_ratio(s: Scrapes, spec: AutoscalingSpec) -> float | None:
    """Share of the quiet lookback's admissions that waited longer than the SLO; None without requests or without
    a histogram bucket at the SLO's bound (Prometheus would have no series)."""
    if spec.slo.queue_seconds not in QUEUE_BUCKETS:
        return None
    window = spec.windows.quiet_lookback_seconds
    admitted = s.bucket_delta(-1, window)
    within = s.bucket_delta(QUEUE_BUCKETS.index(spec.slo.queue_seconds), window)
    if admitted is None or within is None or admitted <= 0:
        return None
    return max(0.0, 1.0 - within / admitted)


def _slot_time(s: Scrapes, window: float) -> float | None:
    """Mean slot time over the window; None when no request finished in it (a fleet at zero)."""
    count, e2e, queue = (s.delta(x, window) for x in (s.finished, s.e2e_sum, s.queue_sum))
    if not (count and e2e and queue) or count[0] <= 0:
        return None
    return (e2e[0] - queue[0]) / count[0]


@dataclass
class Ours:
    spec: AutoscalingSpec
    initial_replicas: int
    name: str = "sglang-operator"
    history: tuple[Recommendation, ...] = ()
    envelope: tuple[Block, ...] = ()
    decisions: list[tuple[float, Decision]] = field(default_factory=list)

    @property
    def period(self) -> float:
        return float(self.spec.interval_seconds)

    def initial(self) -> int:
        return self.initial_replicas

    def step(self, view: FleetView) -> Command:
        fleet = FleetState(
            desired=view.desired,
            ready=view.ready,
            starting=view.starting,
            warm=view.warm_ready,
            gpus_per_replica=1,
            concurrency_per_replica=view.concurrency,
        )
        samples = samples_from_scrapes(view.scrapes, self.spec, view.t, view.concurrency)
        decision = decide(fleet, samples, self.spec, self.history, view.t, self.envelope)
        self.history, self.envelope = decision.history, decision.envelope
        if decision.replicas != view.desired:
            self.decisions.append((view.t, decision))
        return Command(decision.replicas, decision.warm_replicas)
