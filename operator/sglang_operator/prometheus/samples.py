"""What one reading of Prometheus says of a fleet: the values the autoscaler decides from and the doctor checks.

A plain frozen dataclass, so the autoscaler's policy stays a pure function that tests drive with literals.
"""

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Samples:
    """One reading of the fleet's metrics. A field is None when Prometheus had no series for it.

    Request rates come from the demand counter: the router's (arrivals, `smg_router_requests_total`) when it is
    scraped, else the workers' finished requests (`sglang:num_requests_total`), which undercount a saturated fleet.
    While the fleet is at zero only the router can report, so its rate is also the wake-up signal.
    """

    collected_at: float
    """Operator clock (seconds) when the reading was taken; staleness grows from here."""
    age_seconds: float | None
    """Age of the newest scrape at `collected_at`, by Prometheus' clock; None when unknown."""
    qps: float | None = None
    """Request rate over `windows.rateSeconds`."""
    qps_burst: float | None = None
    """Request rate over the latest `windows.burstSeconds`."""
    qps_peak: float | None = None
    """Highest `burstSeconds` rate over the last `windows.peakLookbackSeconds`."""
    slot_seconds: float | None = None
    """Mean time a request holds a slot: e2e latency minus queue time (prefill + decode)."""
    running: float | None = None
    queued: float | None = None
    queued_peak: float | None = None
    """Most requests queued at once over the last `windows.quietLookbackSeconds`."""
    gpu_utilization: float | None = None
    """Mean GPU utilisation of the workers' GPUs, percent."""
    bursty_qps: float | None = None
    """The same three rates over the `burstyTraffic` windows (None when that rule is disabled): the mean rate
    over its `rateSeconds`, ..."""
    bursty_qps_burst: float | None = None
    """... the rate over its latest `burstSeconds`, ..."""
    bursty_qps_peak: float | None = None
    """... and the busiest `burstSeconds` rate over its `peakLookbackSeconds`."""
    qps_trend: tuple[tuple[float, float], ...] | None = None
    """(time, rate over `windows.rateSeconds`) over the last `windows.quietLookbackSeconds`, or the
    `sustainedRise` span when that is longer, oldest first, by Prometheus' clock (None: no series yet)."""
    slo_miss_ratio: float | None = None
    """Share of the requests admitted during `windows.quietLookbackSeconds` that waited longer than
    `slo.queueSeconds` (None when disabled, with no requests, or with no histogram bucket at that bound)."""

    def with_fields(self, **changes: Any) -> "Samples":
        """A copy with some fields replaced (tests and simulators build readings step by step)."""
        values = {name: getattr(self, name) for name in self.__dataclass_fields__}
        values.update(changes)
        return Samples(**values)
