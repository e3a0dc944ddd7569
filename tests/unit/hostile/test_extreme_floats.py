"""No pass of any loop can raise on a value a tenant controls (issue 37).

Every autoscaler and doctor decision function is fed extreme floats (0, 5e-324, 1e308, inf, -inf, nan, negative) in
every float field of the spec it reads and in every metric reading: one field at a time over the whole grid, then
many at once (hypothesis, derandomized: the same examples every run). Each must answer with a decision or "unknown"
(a hold whose reason names what could not be read), never an exception, and what the pass writes to status must be
JSON the API server takes (no NaN or Infinity). A float field added later is covered by the grid without a change
here: the fields are found from the models.
"""

from __future__ import annotations

import json
import math
import types
import typing
from collections.abc import Callable, Iterator
from dataclasses import fields, replace
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from sglang_operator.api.diagnostics import DiagnosticsSpec
from sglang_operator.api.spec import AutoscalingSpec, SGLangDeploymentSpec
from sglang_operator.api.validation import parse_spec
from sglang_operator.autoscaling.autoscale_pass import autoscaler_status
from sglang_operator.autoscaling.fleet_split import unit_bounds
from sglang_operator.autoscaling.pd_pass import pd_autoscaler_status, pd_fleets, summarise
from sglang_operator.autoscaling.policy import decide
from sglang_operator.autoscaling.roles import decide_pd
from sglang_operator.autoscaling.signals import Block, FleetState, Recommendation, Samples
from sglang_operator.doctor.diagnose import diagnose
from sglang_operator.doctor.hysteresis import evolve
from sglang_operator.doctor.model import (
    BootstrapProbe,
    FleetFacts,
    LaunchFacts,
    PodFacts,
    ReplicaMetrics,
    RouterView,
    ScaleUp,
)
from sglang_operator.prometheus.roles import RoleSamples

EXTREMES = (0.0, 5e-324, 1e308, math.inf, -math.inf, math.nan, -1.0, -1e308)
NOW = 1_800_000_000.0
STAMP = datetime.fromtimestamp(NOW, UTC)
FUZZ = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def _is_float(annotation: Any) -> bool:
    if isinstance(annotation, str):  # a dataclass of a module with postponed annotations
        return annotation.split(" | ")[0] == "float"
    if annotation is float:
        return True
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        return float in typing.get_args(annotation)
    return False


def float_paths(model: type[BaseModel], prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Every float field of `model` and its nested models, as attribute paths."""
    for name, info in model.model_fields.items():
        annotation = info.annotation
        nested = [a for a in (annotation, *typing.get_args(annotation)) if isinstance(a, type)]
        if _is_float(annotation):
            yield (*prefix, name)
        for kind in nested:
            if issubclass(kind, BaseModel):
                yield from float_paths(kind, (*prefix, name))


def with_value(model: BaseModel, path: tuple[str, ...], value: float) -> Any:
    """`model` with the field at `path` set to `value`, past every validator (what a rule would refuse included)."""
    head, *rest = path
    if not rest:
        return model.model_copy(update={head: value})
    inner = getattr(model, head)
    if inner is None:
        inner = typing.get_args(type(model).model_fields[head].annotation)[0]()
    return model.model_copy(update={head: with_value(inner, tuple(rest), value)})


def json_safe(value: Any) -> None:
    json.dumps(value, allow_nan=False)


# -- the colocated autoscaler ----------------------------------------------------------------------------------------
COLOCATED = AutoscalingSpec.model_validate(
    {"enabled": True, "maxReplicas": 50, "maxGPUs": 64, "warmReplicas": 1, "targets": {"gpuUtilization": 80},
     "scaleDownTolerance": 0.2}
)  # fmt: skip
SPEC_PATHS = sorted(float_paths(AutoscalingSpec))
RISING = tuple((NOW - 60.0 * (10 - k), 100.0 * 1.1**k) for k in range(11))


def samples(**changes: Any) -> Samples:
    """A reading every part of the policy looks at: a rising trend, bursts, a queue, GPU use and an SLO reading."""
    values: dict[str, Any] = dict(
        collected_at=NOW, age_seconds=5.0, qps=250.0, qps_burst=300.0, qps_peak=320.0, slot_seconds=1.0,
        running=200.0, queued=40.0, queued_peak=40.0, gpu_utilization=70.0, bursty_qps=100.0, bursty_qps_burst=100.0,
        bursty_qps_peak=260.0, qps_trend=RISING, slo_miss_ratio=0.01,
    )  # fmt: skip
    values.update(changes)
    return Samples(**values)


SAMPLE_FIELDS = [f.name for f in fields(Samples) if f.name != "qps_trend"]
ENVELOPE = (Block(NOW - 1200.0, 400.0, 2000.0, 10), Block(NOW - 600.0, 380.0, 2200.0, 10))
HISTORY = (Recommendation(NOW - 100.0, 8), Recommendation(NOW - 30.0, 9))


def decide_colocated(spec: AutoscalingSpec, reading: Samples | None, ready: int = 8) -> None:
    fleet = FleetState(
        desired=8, ready=ready, starting=8 - ready, warm=1, gpus_per_replica=1, concurrency_per_replica=32
    )
    low, high = min(spec.min_replicas, spec.max_replicas), spec.max_replicas
    decision = decide(fleet, reading, spec, HISTORY, NOW, ENVELOPE)
    assert isinstance(decision.replicas, int) and low <= decision.replicas <= max(high, low), decision.reason
    assert decision.reason
    assert decision.mode != "hold" or not decision.metrics_available
    json_safe(autoscaler_status({}, decision, STAMP))


@pytest.mark.parametrize("value", EXTREMES, ids=repr)
@pytest.mark.parametrize("path", SPEC_PATHS, ids=".".join)
def test_the_colocated_policy_never_raises_on_a_spec_float(path: tuple[str, ...], value: float) -> None:
    spec = with_value(COLOCATED, path, value)
    for ready in (8, 0):
        decide_colocated(spec, samples(), ready)


@pytest.mark.parametrize("value", EXTREMES, ids=repr)
@pytest.mark.parametrize("name", SAMPLE_FIELDS)
def test_the_colocated_policy_never_raises_on_a_reading(name: str, value: float) -> None:
    for ready in (8, 0):
        decide_colocated(COLOCATED, samples(**{name: value}), ready)


@pytest.mark.parametrize("value", EXTREMES, ids=repr)
def test_the_colocated_policy_never_raises_on_a_trend_point(value: float) -> None:
    for point in ((RISING[-1][0], value), (value, 100.0)):
        decide_colocated(COLOCATED, samples(qps_trend=(*RISING[:-1], point)))


@FUZZ
@given(
    st.dictionaries(st.sampled_from(SPEC_PATHS), st.sampled_from(EXTREMES), max_size=6),
    st.dictionaries(st.sampled_from(SAMPLE_FIELDS), st.sampled_from(EXTREMES), max_size=6),
    st.sampled_from([8, 0]),
)
def test_the_colocated_policy_never_raises_on_many_at_once(
    spec_values: dict[tuple[str, ...], float], readings: dict[str, float], ready: int
) -> None:
    spec = COLOCATED
    for path, value in spec_values.items():
        spec = with_value(spec, path, value)
    decide_colocated(spec, samples(**readings), ready)


# -- the prefill/decode autoscaler -----------------------------------------------------------------------------------
def _pd_spec() -> SGLangDeploymentSpec:
    raw = {
        "model": {"path": "m"},
        "disaggregation": {},
        "autoscaling": {"enabled": True, "prefillGPUShare": {"min": 0.2, "max": 0.6},
                        "targets": {"timeToFirstTokenSeconds": 0.5, "interTokenLatencySeconds": 0.05}},
        "workerGroups": [
            {"name": "p", "role": "prefill", "replicas": 1, "parallelism": {"tp": 2},
             "engine": {"maxRunningRequests": 8}, "autoscaling": {"minReplicas": 1, "maxReplicas": 6}},
            {"name": "d", "role": "decode", "replicas": 2, "parallelism": {},
             "engine": {"maxRunningRequests": 32}, "autoscaling": {"minReplicas": 1, "maxReplicas": 8}},
            {"name": "e", "role": "decode", "replicas": 0, "parallelism": {"tp": 2},
             "engine": {"maxRunningRequests": 48}, "autoscaling": {"minReplicas": 0, "maxReplicas": 4}},
        ],
    }  # fmt: skip
    spec, errors = parse_spec(raw)
    assert spec is not None, errors
    return spec


PD = _pd_spec()
PD_STATUS: dict[str, Any] = {
    "groups": [{"name": "p", "readyReplicas": 1, "replicas": 1}, {"name": "d", "readyReplicas": 2, "replicas": 2},
               {"name": "e", "readyReplicas": 0, "replicas": 0}]
}  # fmt: skip
ROLE_TREND = tuple((NOW - 60.0 * (10 - k), 8000.0 * 1.1**k) for k in range(11))
ROLE_FIELDS = [f.name for f in fields(RoleSamples) if f.name != "trend"]


def prefill(**changes: Any) -> RoleSamples:
    values: dict[str, Any] = dict(
        collected_at=NOW, age_seconds=3.0, uncached_tokens=80_000.0, uncached_tokens_burst=85_000.0,
        uncached_tokens_peak=90_000.0, requests=10.0, slot_seconds=2.0, running=6.0, queued=20.0,
        bootstrap_queued=4.0, bootstrap_queued_persisted=3.0, time_to_first_token=0.9, trend=ROLE_TREND,
        bursty_mean=8000.0, bursty_burst=8000.0, bursty_peak=30_000.0, slo_miss_ratio=0.01, queued_peak=20.0,
    )  # fmt: skip
    values.update(changes)
    return RoleSamples(**values)


def decode(**changes: Any) -> RoleSamples:
    values: dict[str, Any] = dict(
        collected_at=NOW, age_seconds=3.0, running_mean=120.0, running_peak=130.0, running=125.0, requests=4.0,
        queued=10.0, prealloc_queued=5.0, prealloc_queued_persisted=5.0, token_usage=0.9, inter_token_latency=0.08,
        trend=tuple((t, v / 100) for t, v in ROLE_TREND), slo_miss_ratio=0.2, queued_peak=15.0,
    )  # fmt: skip
    values.update(changes)
    return RoleSamples(**values)


def decide_both(spec: SGLangDeploymentSpec, readings: dict[str, RoleSamples | None]) -> None:
    fleets = pd_fleets(spec, PD_STATUS)
    memory = {"prefill": HISTORY, "decode": HISTORY}
    decision = decide_pd(fleets, readings, spec.autoscaling, memory, NOW)
    for role, fleet in fleets.items():
        bounds = unit_bounds(spec.autoscaling, fleet.shapes)
        units = decision.roles[role].units
        assert isinstance(units, int) and bounds.min_replicas <= units <= bounds.max_replicas
        assert decision.roles[role].reason
    for shape in (s for fleet in fleets.values() for s in fleet.shapes):
        assert shape.min_replicas <= decision.groups[shape.name] <= shape.max_replicas
    summary = summarise(decision)
    json_safe(pd_autoscaler_status({}, decision, summary, 1.0, STAMP, False))


def pd_with(path: tuple[str, ...], value: float) -> SGLangDeploymentSpec:
    return PD.model_copy(update={"autoscaling": with_value(PD.autoscaling, path, value)})


@pytest.mark.parametrize("value", EXTREMES, ids=repr)
@pytest.mark.parametrize("path", SPEC_PATHS, ids=".".join)
def test_the_pd_policy_never_raises_on_a_spec_float(path: tuple[str, ...], value: float) -> None:
    decide_both(pd_with(path, value), {"prefill": prefill(), "decode": decode()})


@pytest.mark.parametrize("value", EXTREMES, ids=repr)
@pytest.mark.parametrize("name", ROLE_FIELDS)
@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_the_pd_policy_never_raises_on_a_reading(role: str, name: str, value: float) -> None:
    readings: dict[str, RoleSamples | None] = {"prefill": prefill(), "decode": decode()}
    readings[role] = replace(readings[role], **{name: value})  # type: ignore[type-var]
    decide_both(PD, readings)


@pytest.mark.parametrize("value", EXTREMES, ids=repr)
def test_the_pd_policy_never_raises_on_a_trend_point(value: float) -> None:
    for point in ((ROLE_TREND[-1][0], value), (value, 100.0)):
        trend = (*ROLE_TREND[:-1], point)
        decide_both(PD, {"prefill": prefill(trend=trend), "decode": decode(trend=trend)})


@FUZZ
@given(
    st.dictionaries(st.sampled_from(SPEC_PATHS), st.sampled_from(EXTREMES), max_size=6),
    st.dictionaries(st.sampled_from(ROLE_FIELDS), st.sampled_from(EXTREMES), max_size=6),
    st.dictionaries(st.sampled_from(ROLE_FIELDS), st.sampled_from(EXTREMES), max_size=6),
)
def test_the_pd_policy_never_raises_on_many_at_once(
    spec_values: dict[tuple[str, ...], float], prefill_values: dict[str, float], decode_values: dict[str, float]
) -> None:
    autoscaling = PD.autoscaling
    for path, value in spec_values.items():
        autoscaling = with_value(autoscaling, path, value)
    spec = PD.model_copy(update={"autoscaling": autoscaling})
    decide_both(spec, {"prefill": prefill(**prefill_values), "decode": decode(**decode_values)})


# -- the doctor ------------------------------------------------------------------------------------------------------
PODS = ("w-a-0-0", "w-b-0-0", "w-c-0-0", "w-p-0-0", "w-d-0-0")
ROUTER = "w-router-0"
URLS = {name: f"http://10.0.0.{i}:30000" for i, name in enumerate(PODS)}
LAUNCH = LaunchFacts(page_size="64", transfer_backend="mooncake", version="0.5.23")


def facts(disaggregated: bool, **changes: Any) -> FleetFacts:
    roles = ("", "", "", "prefill", "decode") if disaggregated else ("",) * 5
    pods = tuple(
        PodFacts(name, name.split("-")[1], 0, f"node-{i}", NOW - 3600.0 if i else NOW - 100.0, NOW - 3599.0,
                 NOW - 3598.0, ready=i != 2, ready_since=NOW - 60.0, role=role, launch=LAUNCH)
        for i, (name, role) in enumerate(zip(PODS, roles, strict=True))
    )  # fmt: skip
    values: dict[str, Any] = dict(
        now=NOW, pods=pods, policy="cache_aware", routers=(RouterView(ROUTER, {URLS[n]: True for n in PODS[:3]}),),
        pod_urls=URLS, scale_ups=(ScaleUp(NOW - 900.0, 2, 5),), ready_replicas=4, disaggregated=disaggregated,
        bootstrap=(BootstrapProbe(PODS[3], "http://10.0.0.3:8998/health", "refused"),),
        role_replicas={"prefill": 1, "decode": 1}, launch=LAUNCH,
    )  # fmt: skip
    values.update(changes)
    return FleetFacts(**values)


def per_pod(*values: float) -> dict[str, float]:
    return dict(zip(PODS, values, strict=False))


def metrics(**changes: Any) -> ReplicaMetrics:
    values: dict[str, Any] = dict(
        window_seconds=600, load=per_pod(9.0, 1.0, 1.2, 0.05, 3.0), requests=per_pod(100, 100, 100, 50, 50),
        ttft=per_pod(0.9, 0.2, 0.25, 0.3, 0.3), itl=per_pod(0.09, 0.02, 0.021, 0.02, 0.02),
        cache_hit_rate=per_pod(0.1, 0.7, 0.72, 0.5, 0.5), gpu_model=dict.fromkeys(PODS, "H100"),
        rendezvous_failures={(ROUTER, "decode", "transfer"): 2.0, (ROUTER, "prefill", "probe"): 1.0},
        prealloc_queue=per_pod(0, 0, 0, 0, 4.0), prealloc_growth=per_pod(0, 0, 0, 0, 3.0),
        prealloc_lowest=per_pod(0, 0, 0, 0, 1.0), running_mean=per_pod(1, 1, 1, 0.0, 4.0),
        bootstrap_queue_mean=per_pod(0, 0, 0, 0.0, 0),
    )  # fmt: skip
    values.update(changes)
    return ReplicaMetrics(**values)


PER_POD = [f.name for f in fields(ReplicaMetrics) if f.name not in ("window_seconds", "gpu_model", "errors")]
THRESHOLD_PATHS = sorted(float_paths(DiagnosticsSpec))
FACT_FLOATS = [f.name for f in fields(FleetFacts) if _is_float(f.type)]
POD_FLOATS = [f.name for f in fields(PodFacts) if _is_float(f.type)]


def every_value(mapping: dict[Any, float], value: float) -> dict[Any, float]:
    """`mapping` with its first two readings at `value` (sums and medians meet it twice), the rest kept."""
    return {k: (value if i < 2 else v) for i, (k, v) in enumerate(mapping.items())}


def run_doctor(observed: ReplicaMetrics | None, fleet: FleetFacts, spec: DiagnosticsSpec | None = None) -> None:
    diagnosis = diagnose(observed, fleet, spec or DiagnosticsSpec())
    assert all(c.evidence and c.action for c in diagnosis.candidates)
    evolution = evolve({}, diagnosis, 1, 1, "2027-01-15T08:00:00Z")
    json_safe(evolution.status)
    evolve(evolution.status, diagnosis, 1, 1, "2027-01-15T08:00:30Z")


@pytest.mark.parametrize("value", EXTREMES, ids=repr)
@pytest.mark.parametrize("name", PER_POD)
@pytest.mark.parametrize("disaggregated", [False, True], ids=["colocated", "pd"])
def test_the_doctor_never_raises_on_a_reading(disaggregated: bool, name: str, value: float) -> None:
    base = metrics()
    changed = every_value(dict(getattr(base, name)), value)
    run_doctor(replace(base, **{name: changed}), facts(disaggregated))


@pytest.mark.parametrize("value", EXTREMES, ids=repr)
@pytest.mark.parametrize("path", THRESHOLD_PATHS, ids=".".join)
def test_the_doctor_never_raises_on_a_threshold(path: tuple[str, ...], value: float) -> None:
    spec = with_value(DiagnosticsSpec(), path, value)
    for disaggregated in (False, True):
        run_doctor(metrics(), facts(disaggregated), spec)


@pytest.mark.parametrize("value", EXTREMES, ids=repr)
def test_the_doctor_never_raises_on_a_fact(value: float) -> None:
    """The router's balance thresholds (from the tenant's router.args) and the pods' timestamps."""
    for disaggregated in (False, True):
        for name in FACT_FLOATS:
            run_doctor(metrics(), facts(disaggregated, **{name: value}))
        base = facts(disaggregated)
        for name in POD_FLOATS:
            pods = tuple(replace(p, **{name: value}) for p in base.pods)
            run_doctor(metrics(), replace(base, pods=pods))


@FUZZ
@given(
    st.dictionaries(st.sampled_from(PER_POD), st.sampled_from(EXTREMES), max_size=6),
    st.dictionaries(st.sampled_from(THRESHOLD_PATHS), st.sampled_from(EXTREMES), max_size=4),
    st.booleans(),
)
def test_the_doctor_never_raises_on_many_at_once(
    readings: dict[str, float], thresholds: dict[tuple[str, ...], float], disaggregated: bool
) -> None:
    base = metrics()
    observed = replace(base, **{name: every_value(dict(getattr(base, name)), v) for name, v in readings.items()})
    spec = DiagnosticsSpec()
    for path, value in thresholds.items():
        spec = with_value(spec, path, value)
    run_doctor(observed, facts(disaggregated), spec)


def test_the_grid_covers_what_it_names() -> None:
    """The grids are not empty: a model change that hid the fields would leave these tests vacuous."""
    wanted: dict[str, Callable[[], int]] = {
        "spec floats": lambda: len(SPEC_PATHS),
        "readings": lambda: len(SAMPLE_FIELDS),
        "role readings": lambda: len(ROLE_FIELDS),
        "per-pod readings": lambda: len(PER_POD),
        "thresholds": lambda: len(THRESHOLD_PATHS),
        "pod timestamps": lambda: len(POD_FLOATS),
        "facts": lambda: len(FACT_FLOATS),
    }
    assert {name: count() > 0 for name, count in wanted.items()} == dict.fromkeys(wanted, True)
    assert ("targets", "time_to_first_token_seconds") in SPEC_PATHS and ("prefill_gpu_share", "min") in SPEC_PATHS
