"""Reading one SGLangDeployment's autoscaling signals from Prometheus (PromQL's `GET /api/v1/query`).

The only I/O of the autoscaler. Every failure (connection, timeout, HTTP error, malformed answer) comes back as an
error string, never as an exception into the kopf handler; the policy then holds the replica count.

Queries are templates over label names, because clusters label scraped pods differently. The defaults match the
chart's PodMonitor and the local cluster's Prometheus relabelling: pods carry `namespace`, `pod`,
`sglang_deployment`, `sglang_replica`, `sglang_node_rank` and `sglang_component` (`worker` or `router`); SGLang
metrics come from worker pods, the request counter of the smg router from router pods, GPU utilisation from DCGM's
exporter (`DCGM_FI_DEV_GPU_UTIL{namespace, pod}`).

Demand (QPS) is read from the router's arrival counter when the router is scraped, else from the workers' finished
requests: PromQL's `or` picks the first that has series. Finished requests undercount a saturated fleet, and while
the fleet is at zero only the router can tell that requests are waiting.
"""

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from typing import Any

from ..api.spec import AutoscalingSpec, AutoscalingWindows, BurstyTraffic, ServiceLevel, SustainedRise
from ..runtime.httpcall import CallFailed, request
from .samples import Samples

DEFAULT_TIMEOUT_SECONDS = 5.0


@dataclass(frozen=True)
class Target:
    """Which deployment to read."""

    namespace: str
    deployment: str


@dataclass(frozen=True)
class Queries:
    """Label names and PromQL templates. Templates are `str.format` strings (literal braces doubled) over:
    `{workers}`, `{routers}`, `{deployment}` (label matchers, without braces), `{namespace}` (the namespace value),
    `{ns_label}`, `{pod_label}`, and the windows `{rate}`, `{burst}`, `{lookback}`, `{step}`, `{slot}`, `{quiet}`
    (the quiet lookback) in seconds; `slo_miss_ratio` also takes `{le}`, the SLO's bucket bound."""

    namespace_label: str = "namespace"
    pod_label: str = "pod"
    deployment_label: str = "sglang_deployment"
    component_label: str = "sglang_component"
    worker_component: str = "worker"
    router_component: str = "router"
    step_seconds: int = 15
    """Resolution of the peak subqueries (request rate, queue); the scrape interval is a good value."""
    slot_fallback_seconds: int = 6 * 3600
    """Longer window for the slot time when the short one has no data (a fleet waking from zero)."""

    demand: str = (
        "sum(rate(smg_router_requests_total{{{routers}}}[{window}s]))"
        " or sum(rate(sglang:num_requests_total{{{workers}}}[{window}s]))"
    )
    """Request rate; `{window}` is filled with the rate, burst or peak window."""
    slot: str = (
        "(sum(rate(sglang:e2e_request_latency_seconds_sum{{{workers}}}[{slot}s]))"
        " - sum(rate(sglang:queue_time_seconds_sum{{{workers}}}[{slot}s])))"
        " / sum(rate(sglang:e2e_request_latency_seconds_count{{{workers}}}[{slot}s]))"
    )
    running: str = "sum(sglang:num_running_reqs{{{workers}}})"
    queued: str = "sum(sglang:num_queue_reqs{{{workers}}})"
    gpu_utilization: str = (
        'avg(avg by ({ns_label}, {pod_label}) (DCGM_FI_DEV_GPU_UTIL{{{ns_label}="{namespace}"}})'
        " * on ({ns_label}, {pod_label}) group_left ()"
        " max by ({ns_label}, {pod_label}) (up{{{workers}}} == 1))"
    )
    slo_miss_ratio: str = (
        'clamp_min(1 - sum(rate(sglang:queue_time_seconds_bucket{{{workers},le="{le}"}}[{quiet}s]))'
        " / sum(rate(sglang:queue_time_seconds_count{{{workers}}}[{quiet}s])), 0)"
    )
    """Share of admitted requests that waited longer than the SLO (`{le}`: the bucket bound, formatted as the
    Prometheus Python client writes it, e.g. "1.0"); 0/0 without requests is NaN, read as no value."""
    age: str = "time() - max(timestamp(up{{{deployment}}}))"
    """Seconds since the newest scrape of any of the deployment's pods (a failing target loses its series, so its
    signals go missing rather than stale)."""

    def render(
        self,
        target: Target,
        windows: AutoscalingWindows,
        bursty: BurstyTraffic | None = None,
        rise: SustainedRise | None = None,
        slo: ServiceLevel | None = None,
    ) -> dict[str, str]:
        """The PromQL for each field of `Samples`, in the order they are read (essential ones first); the
        `bursty_*` rates and the SLO miss ratio only when their rule is given and enabled. The `qps_trend` series
        covers the quiet lookback (`windows.quietMaxRise`), or the sustained-rise span when that is longer."""
        base = {
            self.namespace_label: target.namespace,
            self.deployment_label: target.deployment,
        }
        quiet = max(windows.quiet_lookback_seconds, self.step_seconds)  # a subquery needs one step at least
        values = {
            "workers": label_matchers({**base, self.component_label: self.worker_component}),
            "routers": label_matchers({**base, self.component_label: self.router_component}),
            "deployment": label_matchers(base),
            "namespace": _escape(target.namespace),
            "ns_label": self.namespace_label,
            "pod_label": self.pod_label,
            "rate": windows.rate_seconds,
            "burst": windows.burst_seconds,
            "lookback": windows.peak_lookback_seconds,
            "step": self.step_seconds,
            "slot": windows.slot_time_seconds,
            "quiet": quiet,
        }

        fallback = {**values, "slot": self.slot_fallback_seconds}

        def demand(window: int) -> str:
            return self.demand.format(**values, window=window)

        def peak(window: int, lookback: int) -> str:
            return f"max_over_time(({demand(window)})[{lookback}s:{self.step_seconds}s])"

        optional = {}
        if bursty is not None and bursty.enabled:
            optional = {
                "bursty_qps": demand(bursty.rate_seconds),
                "bursty_qps_burst": demand(bursty.burst_seconds),
                "bursty_qps_peak": peak(bursty.burst_seconds, bursty.peak_lookback_seconds),
            }
        span = quiet
        if rise is not None and rise.enabled:
            # Two resolution steps over the span: subquery points are aligned to the step (the newest may be a step
            # old) and the range is open at its start, so the reading `steps` steps before the newest stays inside.
            span = max(span, rise.steps * rise.step_seconds + 2 * self.step_seconds)
        if slo is not None and slo.enabled:
            optional["slo_miss_ratio"] = self.slo_miss_ratio.format(**values, le=repr(float(slo.queue_seconds)))
        return {
            "age_seconds": self.age.format(**values),
            "qps": demand(windows.rate_seconds),
            "qps_burst": demand(windows.burst_seconds),
            "qps_peak": peak(windows.burst_seconds, windows.peak_lookback_seconds),
            "slot_seconds": f"({self.slot.format(**values)}) or ({self.slot.format(**fallback)})",
            "running": self.running.format(**values),
            "queued": self.queued.format(**values),
            "queued_peak": f"max_over_time(({self.queued.format(**values)})[{quiet}s:{self.step_seconds}s])",
            "gpu_utilization": self.gpu_utilization.format(**values),
            "qps_trend": f"({demand(windows.rate_seconds)})[{span}s:{self.step_seconds}s]",
            **optional,
        }

    def with_changes(self, **changes: Any) -> "Queries":
        """A copy with other label names or templates (e.g. `namespace_label="exported_namespace"`)."""
        unknown = set(changes) - {f.name for f in fields(self)}
        if unknown:
            raise ValueError(f"unknown query settings: {sorted(unknown)}")
        return replace(self, **changes)


ESSENTIAL = ("age_seconds", "qps")
SERIES = ("qps_trend",)
"""Queries whose answer is a range (a subquery): read as (time, value) points, not as one number."""
# How several series for one query combine (a custom query may forget its outer aggregation).
_COMBINE: dict[str, Callable[[list[float]], float]] = {
    "age_seconds": min,
    "gpu_utilization": lambda xs: sum(xs) / len(xs),
}


@dataclass(frozen=True, repr=False)
class Credentials:
    """What the client presents to Prometheus: extra headers (a bearer token among them), HTTP basic auth, and how
    to verify an https endpoint (True, False, or the path of a CA bundle). `credentials.py` resolves them from
    `spec.autoscaling.prometheusAuth`; the default is none, with certificates verified."""

    headers: tuple[tuple[str, str], ...] = ()
    basic: tuple[str, str] | None = None
    verify: bool | str = True

    def __repr__(self) -> str:  # never print a token or a password
        names = [name for name, _ in self.headers]
        return f"Credentials(headers={names}, basic={self.basic is not None}, verify={self.verify!r})"


class PrometheusClient:
    """PromQL's instant query, `GET <url>/api/v1/query?query=...`, through `httpcall.request`: one attempt per query
    (the next interval is the retry), each ended by a total deadline, an answer of at most `httpcall.MAX_BODY_BYTES`,
    and no redirect followed (a tenant's Prometheus could otherwise send the operator's request, its credentials
    included, anywhere)."""

    def __init__(self, url: str, timeout_seconds: float, credentials: Credentials) -> None:
        self.url = url.rstrip("/")
        self.timeout_seconds = timeout_seconds
        self.credentials = credentials

    def custom_query(self, query: str, timeout: float | None = None) -> list[Any]:
        """The `data.result` of an instant query (a list: the series of a vector or a matrix). `QueryFailed` for an
        error status, `_Malformed` for an answer of another shape, `CallFailed` when no answer came."""
        deadline = self.timeout_seconds if timeout is None else min(timeout, self.timeout_seconds)
        response = request(
            "GET", f"{self.url}/api/v1/query", deadline_seconds=deadline, params={"query": query},
            headers=dict(self.credentials.headers), basic_auth=self.credentials.basic, verify=self.credentials.verify,
        )  # fmt: skip
        if response.status != 200:
            raise QueryFailed(response.status)
        return promql_result(response.json())


def promql_result(answer: Any) -> list[Any]:
    """`data.result` of a successful PromQL answer (`{"status": "success", "data": {"resultType": "vector" or
    "matrix", "result": [...]}}`); `_Malformed`, naming the shape and never quoting it, for anything else. Pure."""
    if not isinstance(answer, dict) or answer.get("status") != "success":
        raise _Malformed("not a successful PromQL answer")
    data = answer.get("data")
    if not isinstance(data, dict) or not isinstance(data.get("result"), list):
        raise _Malformed("no data.result list")
    if data.get("resultType", "vector") not in ("vector", "matrix"):
        raise _Malformed("not a vector or a matrix")
    result: list[Any] = data["result"]
    return result


def connect(
    url: str, timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS, credentials: Credentials | None = None
) -> PrometheusClient:
    """A client for `url` with `credentials` (none by default); nothing is sent until a query."""
    return PrometheusClient(url, timeout_seconds, credentials or Credentials())


def read_samples(
    client: PrometheusClient,
    target: Target,
    windows: AutoscalingWindows,
    queries: Queries | None = None,
    now: float | None = None,
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
    bursty: BurstyTraffic | None = None,
    rise: SustainedRise | None = None,
    slo: ServiceLevel | None = None,
) -> tuple[Samples | None, str | None]:
    """Read the deployment's signals. Returns (samples, error): samples is None when an essential query (sample
    age, request rate) failed; error names whatever failed, also when the samples are usable without it."""
    collected_at = time.time() if now is None else now
    promql = (queries or Queries()).render(target, windows, bursty, rise, slo)
    values: dict[str, Any] = dict.fromkeys(promql)
    errors: list[str] = []
    for name, query in promql.items():
        try:
            result = client.custom_query(query, timeout=timeout_seconds)
            values[name] = _series(result) if name in SERIES else _value(result, _COMBINE.get(name, sum))
        except Exception as e:  # whatever the client or Prometheus does wrong is reported, never raised
            unreachable = isinstance(e, CallFailed) and (e.timed_out or e.not_connected)
            error = f"{name} query failed: {failure_reason(e, timeout_seconds)}"
            if name in ESSENTIAL:
                return None, error
            errors.append(error)
            if unreachable:
                break  # an unreachable or slow Prometheus: do not wait out every remaining query
    return Samples(collected_at=collected_at, **values), "; ".join(errors) or None


def fetch_samples(
    url: str,
    namespace: str,
    name: str,
    autoscaling: AutoscalingSpec,
    now: float | None = None,
    queries: Queries | None = None,
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
    credentials: Credentials | None = None,
) -> tuple[Samples | None, str | None]:
    """Connect and read in one call (what the autoscaling loop uses); never raises."""
    try:
        client = connect(url, timeout_seconds, credentials)
    except Exception as e:  # e.g. a malformed URL
        return None, f"cannot use Prometheus at {url[:200]!r}: {type(e).__name__}"
    return read_samples(
        client,
        Target(namespace, name),
        autoscaling.windows,
        queries,
        now,
        timeout_seconds,
        bursty=autoscaling.bursty_traffic,
        rise=autoscaling.sustained_rise,
        slo=autoscaling.slo,
    )


def _value(result: Any, combine: Callable[[list[float]], float]) -> float | None:
    """The number in an instant-vector answer; None for no series or NaN/Inf (e.g. 0/0 with no traffic)."""
    if not isinstance(result, list):
        raise _Malformed(f"expected a vector, got {type(result).__name__}")
    numbers = [x for x in (_sample(item) for item in result) if x is not None]
    return combine(numbers) if numbers else None


def _series(result: Any) -> tuple[tuple[float, float], ...] | None:
    """The (time, value) points of a range answer, oldest first; several series are summed point by point (a
    custom query may forget its outer aggregation). None for no series; NaN/Inf points are left out."""
    if not isinstance(result, list):
        raise _Malformed(f"expected a matrix, got {type(result).__name__}")
    summed: dict[float, float] = {}
    for item in result:
        try:
            points = [(float(t), float(v)) for t, v in item["values"]]
        except (KeyError, TypeError, ValueError, OverflowError) as e:
            raise _Malformed("malformed series") from e
        for t, v in points:
            if math.isfinite(v):
                summed[t] = summed.get(t, 0.0) + v
    return tuple(sorted(summed.items())) if summed else None


def _sample(item: Any) -> float | None:
    try:
        number = float(item["value"][1])
    except (KeyError, IndexError, TypeError, ValueError, OverflowError) as e:
        raise _Malformed("malformed sample") from e
    return number if math.isfinite(number) else None


def label_matchers(labels: dict[str, str]) -> str:
    return ",".join(f'{name}="{_escape(value)}"' for name, value in labels.items())


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


class _Malformed(ValueError):
    """An answer of another shape than PromQL's; the message names the shape, never the content."""


class QueryFailed(Exception):
    """Prometheus answered with an error status (the body, PromQL's error text, is not kept)."""

    def __init__(self, status: int) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status


def failure_reason(error: BaseException, timeout_seconds: float) -> str:
    """Why a query failed, for status: what failed, never what Prometheus (or whatever answered) said."""
    if isinstance(error, CallFailed):
        return f"timed out after {timeout_seconds:g}s" if error.timed_out else str(error)
    if isinstance(error, _Malformed):
        return f"unexpected answer ({error})"
    if isinstance(error, QueryFailed):
        return str(error)
    if isinstance(error, ValueError | KeyError | TypeError | IndexError | RecursionError):
        return "unexpected answer (not a PromQL result)"
    return type(error).__name__
