"""Reading a prefill/decode fleet's per-role signals from Prometheus: each role's pods are the worker series SGLang
labels with its `engine_type` (`prefill`, `decode`; `unified` in a colocated server), a label every SGLang scheduler
and tokenizer series carries, so no pod label needs relabelling for it.

Like `client.read_samples`, nothing raises: a failed query leaves its value missing and names itself in the error.
A role whose own essential reading (its freshness, and its main signal) failed reads as None, so that role holds
while the other may still move.

Each role's measure (prefill: uncached tokens/s; decode: running requests) is also read over the bursty-traffic
rule's windows and as a series (`trend`), with the role's SLO reading and queue peak, so the colocated policy's
bursty-traffic, sustained-rise, steady-decline and quiet-window rules apply to it (`autoscaling/roles.py`).

Two timing details the decision depends on:
- A subquery's points are aligned to multiples of its step by the epoch, not to the evaluation time: the newest
  point of `max_over_time((...)[120s:15s])` is up to a step old, so a peak read that way misses the newest scrapes
  (at a burst's start, the burst itself). The newest reading is read on its own (`uncached_tokens_burst`, `running`)
  and the decision counts it in the peak.
- A handshake queue (prefill's bootstrap, decode's prealloc) also holds the first requests of a burst for a few
  milliseconds while the first KV handshakes complete. The queue that raises a role is the one that persisted: each
  server's least reading over the last `burstSeconds` (at least two scrapes; a server with fewer has no reading),
  summed (`*_persisted`). The raw gauge is read for status only.
"""

import time
from dataclasses import dataclass, fields, replace
from typing import Any

from ..api.spec import AutoscalingSpec, AutoscalingWindows, BurstyTraffic, Role, ServiceLevel, SustainedRise
from ..runtime.httpcall import CallFailed
from .client import (
    DEFAULT_TIMEOUT_SECONDS,
    Credentials,
    PrometheusClient,
    Queries,
    Target,
    _series,
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
    # both roles: the role's measure (prefill: uncached tokens/s; decode: running requests) for the policy's rules
    trend: tuple[tuple[float, float], ...] | None = None
    """(time, the measure over `windows.rateSeconds`) over the quiet lookback, or the sustained-rise span when that
    is longer, oldest first, by Prometheus' clock (None: no series yet)."""
    bursty_mean: float | None = None
    """The measure over the bursty-traffic rule's `rateSeconds` (None when that rule is disabled), ..."""
    bursty_burst: float | None = None
    """... over its latest `burstSeconds`, ..."""
    bursty_peak: float | None = None
    """... and its busiest `burstSeconds` of its `peakLookbackSeconds`."""
    slo_miss_ratio: float | None = None
    """Share of the role's requests admitted during `windows.quietLookbackSeconds` that waited longer than
    `slo.queueSeconds` (None when disabled, with no requests, or with no histogram bucket at that bound)."""
    queued_peak: float | None = None
    """Most requests queued at once over `windows.quietLookbackSeconds`: the queue the role's backlog counts (its
    waiting queue and its persisted handshake queue)."""
    # prefill
    uncached_tokens: float | None = None
    """Prompt tokens minus cached tokens prefilled per second, over `windows.rateSeconds`."""
    uncached_tokens_burst: float | None = None
    """That rate over the latest `windows.burstSeconds`."""
    uncached_tokens_peak: float | None = None
    """The busiest `windows.burstSeconds` rate of that over the last `windows.peakLookbackSeconds`."""
    slot_seconds: float | None = None
    """Mean time a request holds a prefill slot: e2e latency minus queue time on the prefill servers."""
    bootstrap_queued: float | None = None
    """Requests waiting for their KV handoff to be set up with a decode server (0.5.9-0.5.11 name it prealloc)."""
    bootstrap_queued_persisted: float | None = None
    """Of those, the ones there at every scrape of the last `windows.burstSeconds`: each server's least reading,
    summed (None: no server scraped twice in that window)."""
    # decode
    running_mean: float | None = None
    """Mean running requests over `windows.rateSeconds`."""
    running_peak: float | None = None
    """Most running requests at once over `windows.peakLookbackSeconds` (up to a subquery step old: see above)."""
    prealloc_queued: float | None = None
    """Requests waiting for decode KV memory to be allocated for their handoff."""
    prealloc_queued_persisted: float | None = None
    """Of those, the ones there at every scrape of the last `windows.burstSeconds` (as `bootstrap_queued_persisted`)."""
    token_usage: float | None = None
    """Mean KV-cache usage of the decode ranks, 0..1."""
    inter_token_latency: float | None = None
    """Mean seconds between output tokens over `windows.rateSeconds`."""
    # prefill, from the fleet's routers
    time_to_first_token: float | None = None
    """Mean time to the first token of a PD request at the router (smg's `smg_pd_ttft_seconds`: the prefill leg,
    the handoff and decode's first step) over `windows.rateSeconds`."""


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
    bootstrap_queued_persisted: str = (
        "sum(min_over_time(sglang:num_prefill_bootstrap_queue_reqs{{{role}}}[{burst}s])"
        " unless count_over_time(sglang:num_prefill_bootstrap_queue_reqs{{{role}}}[{burst}s]) < 2)"
        " or sum(min_over_time(sglang:num_prefill_prealloc_queue_reqs{{{role}}}[{burst}s])"
        " unless count_over_time(sglang:num_prefill_prealloc_queue_reqs{{{role}}}[{burst}s]) < 2)"
    )
    """Each server's least reading over the window (raw samples, no subquery), from servers scraped at least twice
    in it, summed: a queue there at every scrape, not a handshake one scrape caught."""
    prealloc_queued: str = "sum(sglang:num_decode_prealloc_queue_reqs{{{role}}})"
    prealloc_queued_persisted: str = (
        "sum(min_over_time(sglang:num_decode_prealloc_queue_reqs{{{role}}}[{burst}s])"
        " unless count_over_time(sglang:num_decode_prealloc_queue_reqs{{{role}}}[{burst}s]) < 2)"
    )
    time_to_first_token: str = (
        "sum(rate(smg_pd_ttft_seconds_sum{{{routers}}}[{rate}s]))"
        " / sum(rate(smg_pd_ttft_seconds_count{{{routers}}}[{rate}s]))"
    )
    """smg 1.13.0's histogram, on the fleet's router pods (`{routers}`)."""
    token_usage: str = "avg(sglang:token_usage{{{role}}})"
    inter_token_latency: str = (
        "sum(rate(sglang:inter_token_latency_seconds_sum{{{role}}}[{rate}s]))"
        " / sum(rate(sglang:inter_token_latency_seconds_count{{{role}}}[{rate}s]))"
    )

    def render(
        self,
        target: Target,
        role: Role,
        windows: AutoscalingWindows,
        base: Queries,
        bursty: BurstyTraffic | None = None,
        rise: SustainedRise | None = None,
        slo: ServiceLevel | None = None,
    ) -> dict[str, str]:
        """The PromQL for each field of `RoleSamples` the role reads, essential ones first (`ESSENTIAL`); the
        `bursty_*` readings and the SLO miss ratio only when their rule is given and enabled. The `trend` series
        covers the quiet lookback, or the sustained-rise span when that is longer (as `Queries.render`)."""
        matchers = {
            base.namespace_label: target.namespace,
            base.deployment_label: target.deployment,
            base.component_label: base.worker_component,
            self.role_label: role,
        }
        step = base.step_seconds
        routers = {**matchers, base.component_label: base.router_component}
        del routers[self.role_label]
        values = {
            "role": label_matchers(matchers),
            "routers": label_matchers(routers),
            "rate": windows.rate_seconds,
            "burst": windows.burst_seconds,
            "lookback": windows.peak_lookback_seconds,
            "step": step,
            "slot": windows.slot_time_seconds,
        }

        def fill(template: str, **extra: Any) -> str:
            return template.format(**values, **extra)

        quiet = max(windows.quiet_lookback_seconds, step)  # a subquery needs one step at least
        span = quiet
        if rise is not None and rise.enabled:  # two steps over the span, as `Queries.render` says why
            span = max(span, rise.steps * rise.step_seconds + 2 * step)

        def over(query: str, fn: str, seconds: int) -> str:
            return f"{fn}_over_time(({query})[{seconds}s:{step}s])"

        running = fill(self.running)

        def measure(window: int) -> str:
            """The role's measure over `window` seconds: uncached tokens/s, or the mean running requests."""
            return fill(self.uncached_tokens, window=window) if role == "prefill" else over(running, "avg", window)

        persisted = fill(self.bootstrap_queued_persisted if role == "prefill" else self.prealloc_queued_persisted)
        optional = {}
        if bursty is not None and bursty.enabled:
            optional = {
                "bursty_mean": measure(bursty.rate_seconds),
                "bursty_burst": measure(bursty.burst_seconds),
                "bursty_peak": over(measure(bursty.burst_seconds), "max", bursty.peak_lookback_seconds),
            }
        if slo is not None and slo.enabled:
            le = repr(float(slo.queue_seconds))
            optional["slo_miss_ratio"] = base.slo_miss_ratio.format(workers=values["role"], quiet=quiet, le=le)
        rules = {
            "trend": f"({measure(windows.rate_seconds)})[{span}s:{step}s]",
            "queued_peak": over(f"{fill(self.queued)} + ({persisted} or vector(0))", "max", quiet),
            **optional,
        }
        if role == "prefill":
            slot_fallback = self.slot.format(**{**values, "slot": base.slot_fallback_seconds})
            return {
                "age_seconds": fill(self.age),
                "uncached_tokens": measure(windows.rate_seconds),
                "uncached_tokens_burst": measure(windows.burst_seconds),
                "uncached_tokens_peak": over(measure(windows.burst_seconds), "max", windows.peak_lookback_seconds),
                "requests": fill(self.requests),
                "slot_seconds": f"({fill(self.slot)}) or ({slot_fallback})",
                "running": running,
                "queued": fill(self.queued),
                "bootstrap_queued": fill(self.bootstrap_queued),
                "bootstrap_queued_persisted": persisted,
                "time_to_first_token": fill(self.time_to_first_token),
                **rules,
            }
        return {
            "age_seconds": fill(self.age),
            "running_mean": measure(windows.rate_seconds),
            "running_peak": over(running, "max", windows.peak_lookback_seconds),
            "running": running,
            "requests": fill(self.requests),
            "queued": fill(self.queued),
            "prealloc_queued": fill(self.prealloc_queued),
            "prealloc_queued_persisted": persisted,
            "token_usage": fill(self.token_usage),
            "inter_token_latency": fill(self.inter_token_latency),
            **rules,
        }


ROLES: tuple[Role, ...] = ("prefill", "decode")
ESSENTIAL: dict[Role, tuple[str, ...]] = {
    "prefill": ("age_seconds", "uncached_tokens"),
    "decode": ("age_seconds", "running_mean"),
}
"""Without these a role cannot be sized: it holds (`RoleReading.samples` is None)."""
SERIES = ("trend",)
"""Queries whose answer is a range (a subquery): read as (time, value) points, not as one number."""
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
    bursty: BurstyTraffic | None = None,
    rise: SustainedRise | None = None,
    slo: ServiceLevel | None = None,
) -> RoleReading:
    """One role's signals; never raises. An unreachable or slow Prometheus ends the reading at once (the remaining
    queries would wait out their timeouts too)."""
    collected_at = time.time() if now is None else now
    promql = (queries or RoleQueries()).render(target, role, windows, base or Queries(), bursty, rise, slo)
    values: dict[str, Any] = {}
    errors: list[str] = []
    for name, query in promql.items():
        try:
            result = client.custom_query(query, timeout=timeout_seconds)
            values[name] = _series(result) if name in SERIES else _value(result, sum)
        except Exception as e:  # whatever the client or Prometheus does wrong is reported, never raised
            errors.append(f"{role} {name} query failed: {failure_reason(e, timeout_seconds)}")
            if name in ESSENTIAL[role] or (isinstance(e, CallFailed) and (e.timed_out or e.not_connected)):
                break
    return _reading(values, role, collected_at, "; ".join(errors) or None)


def _reading(values: dict[str, Any], role: Role, collected_at: float, error: str | None) -> RoleReading:
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
        role: read_role_samples(
            client, target, role, autoscaling.windows, now=now, timeout_seconds=timeout_seconds,
            bursty=autoscaling.bursty_traffic, rise=autoscaling.sustained_rise, slo=autoscaling.slo,
        )
        for role in ROLES
    }  # fmt: skip
    if all(reading.samples is None for reading in roles.values()):
        return PdReading(roles)
    try:
        qps = _value(client.custom_query(Queries().render(target, autoscaling.windows)["qps"], timeout_seconds), sum)
    except Exception:  # the rate is only shown (status.qps); the decision does not read it
        qps = None
    return PdReading(roles, qps)
