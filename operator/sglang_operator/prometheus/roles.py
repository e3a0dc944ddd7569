"""Reading a prefill/decode fleet's per-role signals from Prometheus: each role's pods are the worker series SGLang
labels with its `engine_type` (`prefill`, `decode`; `unified` in a colocated server), a label every SGLang scheduler
and tokenizer series carries, so no pod label needs relabelling for it.

Like `client.read_samples`, nothing raises: a failed query leaves its value missing and names itself in the error.
A role whose own essential reading (its freshness, and its main signal) failed reads as None, so that role holds
while the other may still move.
"""

import time
from dataclasses import dataclass, fields, replace
from typing import Any

from ..api.spec import AutoscalingSpec, AutoscalingWindows, Role
from ..runtime.httpcall import CallFailed
from .client import (
    DEFAULT_TIMEOUT_SECONDS,
    Credentials,
    PrometheusClient,
    Queries,
    Target,
    _value,
    connect,
    failure_reason,
    label_matchers,
)


@dataclass(frozen=True)
class RoleSamples:
    """One reading of one role's pods. A field is None when Prometheus had no series for it (or the role does not
    read it: the prefill fields are read for prefill, the decode ones for decode)."""

    collected_at: float
    age_seconds: float | None
    """Seconds since the newest sample of the role's `sglang:num_running_reqs`, by Prometheus' clock."""
    requests: float | None = None
    """Requests the role's servers finished per second, over `windows.rateSeconds`."""
    running: float | None = None
    queued: float | None = None
    """`sglang:num_queue_reqs`: requests waiting for a running slot."""
    # prefill
    uncached_tokens: float | None = None
    """Prompt tokens minus cached tokens prefilled per second, over `windows.rateSeconds`."""
    uncached_tokens_peak: float | None = None
    """The busiest `windows.burstSeconds` rate of that over the last `windows.peakLookbackSeconds`."""
    slot_seconds: float | None = None
    """Mean time a request holds a prefill slot: e2e latency minus queue time on the prefill servers."""
    bootstrap_queued: float | None = None
    """Requests waiting for their KV handoff to be set up with a decode server (0.5.9-0.5.11 name it prealloc)."""
    # decode
    running_mean: float | None = None
    """Mean running requests over `windows.rateSeconds`."""
    running_peak: float | None = None
    """Most running requests at once over `windows.peakLookbackSeconds`."""
    prealloc_queued: float | None = None
    """Requests waiting for decode KV memory to be allocated for their handoff."""
    token_usage: float | None = None
    """Mean KV-cache usage of the decode ranks, 0..1."""
    inter_token_latency: float | None = None
    """Mean seconds between output tokens over `windows.rateSeconds`."""


@dataclass(frozen=True)
class RoleQueries:
    """PromQL templates over `{role}` (the role's worker matchers, without braces) and the windows `{rate}`,
    `{burst}`, `{lookback}`, `{step}`, `{slot}` in seconds. `role_label`: the label that names a series' role."""

    role_label: str = "engine_type"
    age: str = "time() - max(timestamp(sglang:num_running_reqs{{{role}}}))"
    requests: str = "sum(rate(sglang:num_requests_total{{{role}}}[{rate}s]))"
    running: str = "sum(sglang:num_running_reqs{{{role}}})"
    queued: str = "sum(sglang:num_queue_reqs{{{role}}})"
    uncached_tokens: str = (
        "sum(rate(sglang:prompt_tokens_total{{{role}}}[{window}s]))"
        " - (sum(rate(sglang:cached_tokens_total{{{role}}}[{window}s])) or vector(0))"
    )
    """`{window}` is filled with the rate or the burst window. No cached-tokens series (no hit yet) counts 0."""
    slot: str = (
        "(sum(rate(sglang:e2e_request_latency_seconds_sum{{{role}}}[{slot}s]))"
        " - sum(rate(sglang:queue_time_seconds_sum{{{role}}}[{slot}s])))"
        " / sum(rate(sglang:e2e_request_latency_seconds_count{{{role}}}[{slot}s]))"
    )
    bootstrap_queued: str = (
        "sum(sglang:num_prefill_bootstrap_queue_reqs{{{role}}})"
        " or sum(sglang:num_prefill_prealloc_queue_reqs{{{role}}})"
    )
    prealloc_queued: str = "sum(sglang:num_decode_prealloc_queue_reqs{{{role}}})"
    token_usage: str = "avg(sglang:token_usage{{{role}}})"
    inter_token_latency: str = (
        "sum(rate(sglang:inter_token_latency_seconds_sum{{{role}}}[{rate}s]))"
        " / sum(rate(sglang:inter_token_latency_seconds_count{{{role}}}[{rate}s]))"
    )

    def render(self, target: Target, role: Role, windows: AutoscalingWindows, base: Queries) -> dict[str, str]:
        """The PromQL for each field of `RoleSamples` the role reads, essential ones first (`ESSENTIAL`)."""
        matchers = {
            base.namespace_label: target.namespace,
            base.deployment_label: target.deployment,
            base.component_label: base.worker_component,
            self.role_label: role,
        }
        step = base.step_seconds
        values = {
            "role": label_matchers(matchers),
            "rate": windows.rate_seconds,
            "burst": windows.burst_seconds,
            "lookback": windows.peak_lookback_seconds,
            "step": step,
            "slot": windows.slot_time_seconds,
        }

        def fill(template: str, **extra: Any) -> str:
            return template.format(**values, **extra)

        running = fill(self.running)
        if role == "prefill":
            burst = fill(self.uncached_tokens, window=windows.burst_seconds)
            slot_fallback = self.slot.format(**{**values, "slot": base.slot_fallback_seconds})
            return {
                "age_seconds": fill(self.age),
                "uncached_tokens": fill(self.uncached_tokens, window=windows.rate_seconds),
                "uncached_tokens_peak": f"max_over_time(({burst})[{windows.peak_lookback_seconds}s:{step}s])",
                "requests": fill(self.requests),
                "slot_seconds": f"({fill(self.slot)}) or ({slot_fallback})",
                "running": running,
                "queued": fill(self.queued),
                "bootstrap_queued": fill(self.bootstrap_queued),
            }
        return {
            "age_seconds": fill(self.age),
            "running_mean": f"avg_over_time(({running})[{windows.rate_seconds}s:{step}s])",
            "running_peak": f"max_over_time(({running})[{windows.peak_lookback_seconds}s:{step}s])",
            "running": running,
            "requests": fill(self.requests),
            "queued": fill(self.queued),
            "prealloc_queued": fill(self.prealloc_queued),
            "token_usage": fill(self.token_usage),
            "inter_token_latency": fill(self.inter_token_latency),
        }


ROLES: tuple[Role, ...] = ("prefill", "decode")
ESSENTIAL: dict[Role, tuple[str, ...]] = {
    "prefill": ("age_seconds", "uncached_tokens"),
    "decode": ("age_seconds", "running_mean"),
}
"""Without these a role cannot be sized: it holds (`RoleReading.samples` is None)."""
_FIELDS = frozenset(f.name for f in fields(RoleSamples))


@dataclass(frozen=True)
class RoleReading:
    samples: RoleSamples | None
    """None when an essential query of the role failed or had no series."""
    error: str | None
    """What failed (also when the samples are usable without it)."""


def read_role_samples(
    client: PrometheusClient,
    target: Target,
    role: Role,
    windows: AutoscalingWindows,
    queries: RoleQueries | None = None,
    base: Queries | None = None,
    now: float | None = None,
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
) -> RoleReading:
    """One role's signals; never raises. An unreachable or slow Prometheus ends the reading at once (the remaining
    queries would wait out their timeouts too)."""
    collected_at = time.time() if now is None else now
    promql = (queries or RoleQueries()).render(target, role, windows, base or Queries())
    values: dict[str, float | None] = {}
    errors: list[str] = []
    for name, query in promql.items():
        try:
            values[name] = _value(client.custom_query(query, timeout=timeout_seconds), sum)
        except Exception as e:  # whatever the client or Prometheus does wrong is reported, never raised
            errors.append(f"{role} {name} query failed: {failure_reason(e, timeout_seconds)}")
            if name in ESSENTIAL[role] or (isinstance(e, CallFailed) and (e.timed_out or e.not_connected)):
                break
    return _reading(values, role, collected_at, "; ".join(errors) or None)


def _reading(values: dict[str, float | None], role: Role, collected_at: float, error: str | None) -> RoleReading:
    missing = [name for name in ESSENTIAL[role] if values.get(name) is None]
    if missing:
        return RoleReading(None, error or f"no series of the {role} servers in Prometheus ({', '.join(missing)})")
    known: dict[str, Any] = {name: value for name, value in values.items() if name in _FIELDS}
    return RoleReading(replace(RoleSamples(collected_at, None), **known), error)


@dataclass(frozen=True)
class PdReading:
    roles: dict[Role, RoleReading]
    qps: float | None = None
    """The fleet's request rate (the router's arrivals first, as `Queries.demand`), for status only."""


def fetch_role_samples(
    url: str,
    namespace: str,
    name: str,
    autoscaling: AutoscalingSpec,
    now: float | None = None,
    credentials: Credentials | None = None,
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
) -> PdReading:
    """Both roles' readings and the fleet's request rate in one call (what the autoscaling pass uses); never
    raises."""
    try:
        client = connect(url, timeout_seconds, credentials)
    except Exception as e:  # e.g. a malformed URL
        why = f"cannot use Prometheus at {url[:200]!r}: {type(e).__name__}"
        return PdReading({role: RoleReading(None, why) for role in ROLES})
    target = Target(namespace, name)
    roles = {
        role: read_role_samples(client, target, role, autoscaling.windows, now=now, timeout_seconds=timeout_seconds)
        for role in ROLES
    }
    if all(reading.samples is None for reading in roles.values()):
        return PdReading(roles)
    try:
        qps = _value(client.custom_query(Queries().render(target, autoscaling.windows)["qps"], timeout_seconds), sum)
    except Exception:  # the rate is only shown (status.qps); the decision does not read it
        qps = None
    return PdReading(roles, qps)
