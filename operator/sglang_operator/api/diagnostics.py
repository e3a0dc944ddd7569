"""`spec.diagnostics`: how often the fleet doctor looks at a fleet, over which window, and when a reading is a finding.

The doctor (`sglang_operator.doctor`) reads each replica's metrics from Prometheus over `windowSeconds`, the
routers' worker lists and the pods' timestamps, and reports what the DP troubleshooting table names: uneven load,
slow replicas, a spread of cache hit rates, slow starts and slow scale-ups; in a disaggregated fleet also what
breaks the KV handoff between prefill and decode (docs/doctor.md, "Prefill/decode fleets"). A finding appears after
it held for `appearAfter` evaluations in a row and clears after `clearAfter` evaluations without it, so one noisy
window neither raises nor clears one. Every number is bounded in the schema (`ge`/`le`), like every other number of
the spec.
"""

from pydantic import Field

from .base import SpecModel
from .limits import DAY_SECONDS


class DiagnosticThresholds(SpecModel):
    """When a reading becomes a finding. Defaults suit production fleets; tests shrink them."""

    load_imbalance_ratio: float = Field(
        default=2.0,
        ge=1.0,
        le=1000.0,
        description="A replica whose mean running + queued requests over the window exceed the fleet's median this "
        "many times is unevenly loaded (for cache_aware routing: also beyond the router's own balance thresholds).",
    )
    min_load: float = Field(
        default=1.0,
        ge=0.0,
        le=1_000_000.0,
        description="Uneven load must also exceed the median by at least this many requests (a fleet at 0.1 vs 0.3 "
        "requests in flight is idle, not unbalanced).",
    )
    slow_replica_ratio: float = Field(
        default=1.5,
        ge=1.0,
        le=1000.0,
        description="A replica whose mean inter-token latency (or time to first token) over the window exceeds the "
        "fleet's median this many times is slow.",
    )
    slow_replica_min_seconds: float = Field(
        default=0.01,
        ge=0.0,
        le=3600.0,
        description="A slow replica's latency must also exceed the median by at least this many seconds.",
    )
    min_requests: int = Field(
        default=20,
        ge=1,
        le=1_000_000,
        description="Requests a replica must have finished in the window before its latency and cache hit rate "
        "count as evidence.",
    )
    cache_hit_spread: float = Field(
        default=0.3,
        ge=0.0,
        le=1.0,
        description="A replica whose prefix-cache hit rate is this far (a fraction, 0.3 = 30 points) below the "
        "fleet's median gets a finding.",
    )
    slow_start_seconds: int = Field(
        default=300,
        ge=1,
        le=DAY_SECONDS,
        description="A replica that took longer than this from pod creation to Ready started slowly.",
    )
    slow_scale_up_seconds: int = Field(
        default=600,
        ge=1,
        le=DAY_SECONDS,
        description="A scale-up that took longer than this from the autoscaler's decision to the new replicas' "
        "Ready is slow.",
    )
    prealloc_queue_growth: float = Field(
        default=2.0,
        ge=1.0,
        le=1_000_000.0,
        description="A disaggregated fleet: a decode replica whose prealloc queue "
        "(sglang:num_decode_prealloc_queue_reqs) grew by this many requests over the window, or never emptied, "
        "while every prefill replica idled, has its KV handoff stuck.",
    )


class DiagnosticsSpec(SpecModel):
    """The fleet doctor: findings in `status.diagnostics`, a Warning event when one appears, and the operator metric
    `sglang_operator_diagnostic_findings`. It reads Prometheus where the autoscaler does
    (`autoscaling.prometheusURL` or the operator's `--prometheus-url`, with `autoscaling.prometheusAuth`)."""

    enabled: bool = Field(default=True, description="Diagnose this fleet (needs a Prometheus URL for metrics).")
    interval_seconds: int = Field(default=30, ge=5, le=3600, description="How often the fleet is evaluated.")
    window_seconds: int = Field(
        default=600,
        ge=10,
        le=DAY_SECONDS,
        description="Window of the metrics each evaluation reads, and how long a slow start or scale-up is reported "
        "after it ended.",
    )
    appear_after: int = Field(
        default=3, ge=1, le=100, description="Consecutive evaluations a finding must hold before it is reported."
    )
    clear_after: int = Field(
        default=3, ge=1, le=100, description="Consecutive evaluations without it before a reported finding clears."
    )
    thresholds: DiagnosticThresholds = Field(default_factory=DiagnosticThresholds)
