"""The autoscaler of a prefill/decode fleet: one decision per role from that role's own signals, split across the
role's groups, within each role's bounds and the prefill GPU share; a role without metrics holds while the other
moves; recommend-only decides and reports without owning the count; and the status it writes.

The fleet: prefill group `p` (tp=2, 8 running requests per replica, 1..6 replicas, 1 running) and decode group `d`
(tp=1, 32 per replica, 1..8 replicas, 2 running)."""

import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kubernetes import client

from sglang_operator.api.limits import MAX_REPLICAS
from sglang_operator.api.spec import AutoscalingSpec, PrefillGPUShare, Role, SGLangDeploymentSpec
from sglang_operator.api.status import AutoscalerStatus
from sglang_operator.api.validation import parse_spec
from sglang_operator.autoscaling import autoscale_pass as loop
from sglang_operator.autoscaling.autoscale_pass import autoscale_once
from sglang_operator.autoscaling.fleet_split import GroupShape, unit_bounds
from sglang_operator.autoscaling.pd_pass import (
    pd_autoscaler_status,
    pd_fleets,
    pd_scale_event,
    role_memory,
    summarise,
)
from sglang_operator.autoscaling.roles import (
    PdDecision,
    RoleFleet,
    _into_share,
    decide_pd,
    decide_role,
    prefill_rate,
    prefill_share,
    split_roles,
)
from sglang_operator.autoscaling.signals import FleetState, Recommendation
from sglang_operator.desired import group_targets
from sglang_operator.prometheus.client import Queries, Target, connect
from sglang_operator.prometheus.roles import RoleQueries, RoleSamples, read_role_samples
from sglang_operator.settings import DefaultPrometheus, OperatorSettings
from tests.integration.autoscaling.test_tenant_headers import RecordingWriter
from tests.integration.prometheus.test_client import FakePrometheus, matrix, vector

NOW = 10_000.0
STATUS: dict[str, Any] = {
    "groups": [{"name": "p", "readyReplicas": 1, "replicas": 1}, {"name": "d", "readyReplicas": 2, "replicas": 2}]
}


def raw(**autoscaling: Any) -> dict[str, Any]:
    return {
        "model": {"path": "m"},
        "disaggregation": {},
        "autoscaling": {"enabled": True, **autoscaling},
        "workerGroups": [
            {"name": "p", "role": "prefill", "replicas": 1, "parallelism": {"tp": 2},
             "engine": {"maxRunningRequests": 8}, "autoscaling": {"minReplicas": 1, "maxReplicas": 6}},
            {"name": "d", "role": "decode", "replicas": 2, "parallelism": {},
             "engine": {"maxRunningRequests": 32}, "autoscaling": {"minReplicas": 1, "maxReplicas": 8}},
        ],
    }  # fmt: skip


def pd_spec(**autoscaling: Any) -> SGLangDeploymentSpec:
    spec, errors = parse_spec(raw(**autoscaling))
    assert spec is not None, errors
    return spec


def prefill(**changes: Any) -> RoleSamples:
    """A prefill reading at its usual load: 8,000 uncached tokens/s of 2,000-token prompts, 0.5 s in a slot (so a
    replica of 8 slots prefills 32,000 tokens/s), nothing queued."""
    values = dict(uncached_tokens=8000.0, uncached_tokens_peak=9000.0, requests=4.0, slot_seconds=0.5, running=2.0,
                  queued=0.0, bootstrap_queued=0.0, collected_at=NOW, age_seconds=3.0)  # fmt: skip
    return RoleSamples(**{**values, **changes})


def decode(**changes: Any) -> RoleSamples:
    """A decode reading at its usual load: 20 running requests (of 64 slots), a third of the KV cache used, nothing
    queued."""
    values = dict(running_mean=20.0, running_peak=22.0, running=20.0, requests=4.0, queued=0.0, prealloc_queued=0.0,
                  token_usage=0.3, inter_token_latency=0.02, collected_at=NOW, age_seconds=3.0)  # fmt: skip
    return RoleSamples(**{**values, **changes})


PROMPT_HEAVY = prefill(uncached_tokens=80_000.0, uncached_tokens_peak=90_000.0, requests=10.0, slot_seconds=2.0)
LONG_OUTPUT = decode(running_mean=120.0, running_peak=130.0, running=125.0)


def decide(samples: dict[str, RoleSamples | None], spec: SGLangDeploymentSpec | None = None,
           status: dict[str, Any] | None = None) -> PdDecision:  # fmt: skip
    spec = spec or pd_spec()
    fleets = pd_fleets(spec, STATUS if status is None else status)
    return decide_pd(fleets, samples, spec.autoscaling, {}, NOW)  # type: ignore[arg-type]


def test_usual_load_keeps_both_roles() -> None:
    decision = decide({"prefill": prefill(), "decode": decode()})
    assert decision.groups == {"p": 1, "d": 2}
    assert decision.roles["prefill"].signal == "uncachedTokens"
    assert decision.roles["decode"].signal == "concurrency"
    assert all(d.metrics_available for d in decision.roles.values())


def test_a_prompt_heavy_load_raises_prefill_only() -> None:
    decision = decide({"prefill": PROMPT_HEAVY, "decode": decode()})
    # 80,000 x 1.3 (or 90,000 peak x 1.15) / (8 slots x 8,000 tokens / 2 s = 32,000 per replica) = 3.25 replicas
    assert decision.groups == {"p": 3, "d": 2}
    assert decision.replicas == {"prefill": 3, "decode": 2}
    prefill_decision = decision.roles["prefill"]
    assert prefill_decision.signal == "uncachedTokens" and prefill_decision.mode == "panic"
    assert (
        "uncached tokens/s" in prefill_decision.reason
        and "80000 uncached tokens/s / 32000 tokens/s per replica = 3.25" in prefill_decision.reason
    )
    assert decision.roles["decode"].units == 2


def test_a_long_output_load_raises_decode_only() -> None:
    decision = decide({"prefill": prefill(), "decode": LONG_OUTPUT})
    # max(120 x 1.3, 130 x 1.15) / 32 = 4.875 replicas
    assert decision.groups == {"p": 1, "d": 5}
    assert decision.roles["decode"].signal == "concurrency"
    assert decision.roles["prefill"].units == 1


def test_the_spec_rate_replaces_the_measured_one_and_counts_gpus() -> None:
    spec = pd_spec(targets={"prefillTokensPerSecondPerGPU": 5000})
    fleets = pd_fleets(spec, STATUS)
    assert fleets["prefill"].prefill_rate == 10_000.0  # a tp=2 replica
    assert prefill_rate(fleets["prefill"], PROMPT_HEAVY) == (10_000.0, 8000.0)
    decision = decide({"prefill": prefill(), "decode": decode()}, spec)
    # 8,000 x 1.3 / 10,000 = 1.04, within the tolerance of 1; 9,000 x 1.15 = 10,350 is the larger load: 1.035
    assert decision.groups["p"] == 1
    decision = decide({"prefill": prefill(uncached_tokens=30_000.0, uncached_tokens_peak=30_000.0)}, spec)
    assert decision.groups["p"] == 4  # 39,000 / 10,000 = 3.9


def test_the_bootstrap_queue_raises_prefill() -> None:
    # 5,000 there at every scrape of the last burstSeconds (the persisted reading;
    # tests/unit/autoscaling/test_role_rules.py has a queue one scrape caught)
    decision = decide(
        {"prefill": prefill(bootstrap_queued=5000.0, bootstrap_queued_persisted=5000.0), "decode": decode()}
    )
    # (5,000 - 2 per ready replica) x 2,000 tokens / (32,000 tokens/s x 120 s start-up) = 2.6 on top of 1
    assert decision.groups["p"] == 4
    assert decision.roles["prefill"].signal == "bootstrapQueue"
    assert "in bootstrap" in decision.roles["prefill"].reason


def test_kv_usage_latency_and_the_prealloc_queue_raise_decode() -> None:
    by_usage = decide({"prefill": prefill(), "decode": decode(token_usage=0.95)})
    assert (by_usage.groups["d"], by_usage.roles["decode"].signal) == (3, "tokenUsage")  # 2 x 0.95 / 0.85 = 2.24
    spec = pd_spec(targets={"interTokenLatencySeconds": 0.05})
    by_latency = decide({"prefill": prefill(), "decode": decode(inter_token_latency=0.1)}, spec)
    assert (by_latency.groups["d"], by_latency.roles["decode"].signal) == (4, "interTokenLatency")
    fast = decide({"prefill": prefill(), "decode": decode(inter_token_latency=0.04)}, spec)
    assert fast.roles["decode"].signal == "concurrency"  # under its target, latency asks for nothing
    # 100 awaiting KV memory, each staying 200 s (20 running / 0.1 finished per second): (100 - 4) / 32 = 3 more
    queued = decide(
        {"prefill": prefill(), "decode": decode(prealloc_queued=100.0, prealloc_queued_persisted=100.0, requests=0.1)}
    )
    assert (queued.groups["d"], queued.roles["decode"].signal) == (4, "preallocQueue")
    assert queued.groups["p"] == 1


def test_the_routers_time_to_first_token_raises_prefill_above_its_target() -> None:
    spec = pd_spec(targets={"timeToFirstTokenSeconds": 0.5})
    slow = decide({"prefill": prefill(time_to_first_token=1.4), "decode": decode()}, spec)
    # 1 ready x 1.4 s / 0.5 s = 2.8 replicas, more than the 0.33 the uncached tokens ask for
    assert (slow.groups["p"], slow.roles["prefill"].signal) == (3, "timeToFirstToken")
    assert "router TTFT 1.4s vs target 0.5s on 1 ready = 2.80" in slow.roles["prefill"].reason
    assert slow.roles["prefill"].observed["timeToFirstTokenSeconds"] == 1.4
    assert slow.groups["d"] == 2  # decode sizes on its own signals
    fast = decide({"prefill": prefill(time_to_first_token=0.4), "decode": decode()}, spec)
    assert (fast.groups["p"], fast.roles["prefill"].signal) == (1, "uncachedTokens")
    untargeted = decide({"prefill": prefill(time_to_first_token=1.4), "decode": decode()})
    assert untargeted.roles["prefill"].signal == "uncachedTokens"  # no target: TTFT is only shown


def test_the_time_to_first_token_is_read_from_the_fleets_routers() -> None:
    promql = RoleQueries().render(Target("ns", "chat"), "prefill", pd_spec().autoscaling.windows, Queries())
    query = promql["time_to_first_token"]
    assert "smg_pd_ttft_seconds_sum" in query and 'sglang_component="router"' in query
    assert "engine_type" not in query and 'sglang_deployment="chat"' in query
    assert "time_to_first_token" not in RoleQueries().render(
        Target("ns", "chat"), "decode", pd_spec().autoscaling.windows, Queries()
    )


def test_missing_metrics_hold_that_role_only() -> None:
    decision = decide({"prefill": None, "decode": LONG_OUTPUT})
    assert decision.groups == {"p": 1, "d": 5}
    assert (decision.roles["prefill"].signal, decision.roles["prefill"].mode) == ("hold", "hold")
    assert not decision.roles["prefill"].metrics_available and decision.roles["decode"].metrics_available
    decision = decide({"prefill": PROMPT_HEAVY, "decode": decode(age_seconds=500.0)})
    assert decision.groups == {"p": 3, "d": 2}
    assert "decode metrics are 500s old" in decision.roles["decode"].reason
    assert not summarise(decision).metrics_available


def test_a_prefill_rate_that_cannot_be_measured_holds_prefill() -> None:
    decision = decide({"prefill": prefill(slot_seconds=None), "decode": LONG_OUTPUT})
    assert decision.roles["prefill"].signal == "hold" and "no prefill rate" in decision.roles["prefill"].reason
    assert decision.groups == {"p": 1, "d": 5}


def with_decode_groups(*decode_groups: dict[str, Any], **autoscaling: Any) -> SGLangDeploymentSpec:
    """The fleet with these decode groups instead of `d`."""
    spec, errors = parse_spec({**raw(**autoscaling), "workerGroups": [raw()["workerGroups"][0], *decode_groups]})
    assert spec is not None, errors
    return spec


D = raw()["workerGroups"][1]


def test_bounds_per_role_are_the_groups_bounds_summed() -> None:
    e = {**D, "name": "e", "replicas": 0, "autoscaling": {"minReplicas": 0, "maxReplicas": 1}}
    spec = with_decode_groups({**D, "autoscaling": {"minReplicas": 1, "maxReplicas": 2}}, e)
    status = {"groups": [*STATUS["groups"], {"name": "e", "readyReplicas": 0, "replicas": 0}]}
    decision = decide({"prefill": prefill(), "decode": LONG_OUTPUT}, spec, status)
    assert decision.groups == {"p": 1, "d": 2, "e": 1}  # decode at 2 + 1, its groups' maximums together
    assert decision.roles["decode"].signal == "bounds"
    assert "bounded to 3 (min 1, max 3)" in decision.roles["decode"].reason


def test_the_prefill_gpu_share_grows_the_other_role_first() -> None:
    # Prompt-heavy: prefill 3 x 2 GPUs, decode 2 x 1: a share of 0.75; at most 0.6 grows decode to 4 (6 / 10)
    spec = pd_spec(prefillGPUShare={"max": 0.6})
    decision = decide({"prefill": PROMPT_HEAVY, "decode": decode()}, spec)
    assert decision.groups == {"p": 3, "d": 4}
    assert decision.prefill_share == pytest.approx(0.6)
    assert decision.roles["decode"].signal == "prefillGPUShare"
    assert decision.roles["decode"].reason.startswith("prefill GPU share 0.75 above max 0.6: decode 2 -> 4 units")
    assert decision.roles["prefill"].signal == "uncachedTokens"


def test_the_prefill_gpu_share_shrinks_a_role_only_where_bounds_stop_the_other() -> None:
    spec = with_decode_groups({**D, "autoscaling": {"minReplicas": 1, "maxReplicas": 3}}, prefillGPUShare={"max": 0.6})
    decision = decide({"prefill": PROMPT_HEAVY, "decode": decode()}, spec)
    assert decision.groups == {"p": 2, "d": 3}  # decode at its maximum (6 / 9 = 0.67), then prefill 2 (4 / 7)
    assert decision.roles["prefill"].signal == decision.roles["decode"].signal == "prefillGPUShare"
    # Long outputs: prefill 1 x 2 GPUs of 7 (0.29); at least 0.4 grows prefill to 2 (4 / 9)
    decision = decide({"prefill": prefill(), "decode": LONG_OUTPUT}, pd_spec(prefillGPUShare={"min": 0.4}))
    assert decision.groups == {"p": 2, "d": 5}
    assert "below min 0.4: prefill 1 -> 2 units" in decision.roles["prefill"].reason


def test_the_gpu_budget_goes_to_decode_first() -> None:
    decision = decide({"prefill": PROMPT_HEAVY, "decode": LONG_OUTPUT}, pd_spec(maxGPUs=8))
    # decode gets 8 - 2 (prefill's minimum) = 6 at most, and takes 5; prefill gets the 3 left: 1 replica of 2
    assert decision.groups == {"p": 1, "d": 5}


def test_each_role_remembers_its_own_recommendations() -> None:
    spec = pd_spec()
    fleets = pd_fleets(spec, {**STATUS, "autoscaler": {"groups": {"p": 1, "d": 5}}})
    # decode ran 5 and now needs 1: the scale-down window holds the 5 it recommended a minute ago
    memory = {"decode": (Recommendation(NOW - 60, 5),)}
    held = decide_role(fleets["decode"], decode(), spec.autoscaling, memory["decode"], NOW)
    assert held.units == 5 and "scale-down window" in held.reason
    history: tuple[Recommendation, ...] = ()
    for minute in range(7):  # nothing remembered at first: the count it runs counts as recommended then
        now = NOW + 600 + 60 * minute
        decided = decide_role(fleets["decode"], decode(collected_at=now), spec.autoscaling, history, now)
        history = decided.history
        assert decided.units == (5 if minute < 5 else 1), minute


def test_recommend_only_decides_per_role_and_writes_no_counts() -> None:
    spec = pd_spec(recommendOnly=True)
    # what the autoscaler wrote before does not count: the groups' own replicas run
    status = {**STATUS, "autoscaler": {"groups": {"p": 5, "d": 7}}}
    fleets = pd_fleets(spec, status)
    assert (fleets["prefill"].current.desired, fleets["decode"].current.desired) == (1, 2)
    decision = decide({"prefill": PROMPT_HEAVY, "decode": decode()}, spec, status)
    new = pd_autoscaler_status({}, decision, summarise(decision), 12.0, datetime.fromtimestamp(NOW, UTC), True)
    assert new["recommendOnly"] is True and new["groups"] == {"p": 3, "d": 2}
    after = {**STATUS, "autoscaler": new}
    assert {name: active for name, (active, _) in group_targets(spec, after).items()} == {"p": 1, "d": 2}
    reason, message = pd_scale_event({}, new, recommend_only=True) or ("", "")
    assert reason == "AutoscalerRecommendation"
    assert message.startswith("recommends prefill ? -> 3, decode ? -> 2 (the groups' replicas set the count)")
    owning = pd_spec()
    assert {name: active for name, (active, _) in group_targets(owning, after).items()} == {"p": 3, "d": 2}


def test_the_status_shape() -> None:
    decision = decide({"prefill": PROMPT_HEAVY, "decode": None})
    new = pd_autoscaler_status({}, decision, summarise(decision), 12.0, datetime.fromtimestamp(NOW, UTC), False)
    parsed = AutoscalerStatus.model_validate(new)
    assert parsed.groups == {"p": 3, "d": 2} and parsed.desired_replicas == 5
    assert set(parsed.roles) == {"prefill", "decode"}
    assert (parsed.roles["prefill"].desired_replicas, parsed.roles["prefill"].signal) == (3, "uncachedTokens")
    assert (parsed.roles["decode"].desired_replicas, parsed.roles["decode"].signal) == (2, "hold")
    assert parsed.roles["prefill"].observed["uncachedTokensPerSecond"] == "80000"
    assert parsed.reason is not None and parsed.reason.startswith("prefill: panic: scaling up 1 -> 3")
    assert new["observed"] == {"qps": "12", "prefillGPUShare": "0.75"}
    assert role_memory(new["state"])["prefill"] == (Recommendation(NOW, 3),)
    assert role_memory(new["state"])["decode"] == (Recommendation(NOW, 2),)
    assert role_memory({"roles": {"prefill": "x"}}) == {"prefill": (), "decode": ()}
    again = pd_autoscaler_status(new, decision, summarise(decision), 12.0, datetime.fromtimestamp(NOW + 15, UTC), False)
    assert len(again["history"]) == 1 and again["lastScaleTime"] == new["lastScaleTime"]
    assert pd_scale_event(new, again, recommend_only=False) is None


def test_the_role_queries_select_the_role_by_engine_type() -> None:
    promql = RoleQueries().render(Target("team-a", "chat"), "prefill", parse_windows(), Queries())
    role = 'namespace="team-a",sglang_deployment="chat",sglang_component="worker",engine_type="prefill"'
    assert promql["uncached_tokens"] == (
        f"sum(rate(sglang:prompt_tokens_total{{{role}}}[120s]))"
        f" - (sum(rate(sglang:cached_tokens_total{{{role}}}[120s])) or vector(0))"
    )
    assert "num_prefill_prealloc_queue_reqs" in promql["bootstrap_queued"]  # 0.5.9-0.5.11's name
    assert "[21600s]" in promql["slot_seconds"]
    decode_promql = RoleQueries().render(Target("team-a", "chat"), "decode", parse_windows(), Queries())
    assert set(decode_promql) >= {"running_mean", "token_usage", "inter_token_latency", "prealloc_queued"}
    assert all('engine_type="decode"' in query for query in decode_promql.values())


def parse_windows() -> Any:
    return pd_spec().autoscaling.windows


# -- one pass against a Prometheus on 127.0.0.1 ----------------------------------------------------------------------


def _m(role: str) -> str:
    return f'namespace="team-a",sglang_deployment="chat",sglang_component="worker",engine_type="{role}"'


PREFILL_TREND = "[120s])) or vector(0)))[600s:15s]"  # the series queries (a matrix), matched before the others
DECODE_TREND = "[120s:15s]))[600s:15s]"
PD_PROMETHEUS = {
    PREFILL_TREND: matrix([(NOW - 60, 70_000.0), (NOW, 80_000.0)]),
    "max_over_time((sum(rate(sglang:prompt_tokens_total": vector(90_000.0),
    "sglang:prompt_tokens_total": vector(80_000.0),
    f"e2e_request_latency_seconds_sum{{{_m('prefill')}}}": vector(2.0),
    f"num_requests_total{{{_m('prefill')}}}": vector(10.0),
    f"timestamp(sglang:num_running_reqs{{{_m('prefill')}}}": vector(3.0),
    f"num_queue_reqs{{{_m('prefill')}}}": vector(0.0),
    "num_prefill_bootstrap_queue_reqs": vector(0.0),
    f"num_running_reqs{{{_m('prefill')}}}": vector(8.0),
    "smg_router_requests_total": vector(12.0),
}  # decode's series are missing: decode holds


@pytest.fixture
def fake() -> Iterator[FakePrometheus]:
    server = FakePrometheus(PD_PROMETHEUS)
    server.thread.start()
    yield server
    server.server.shutdown()
    server.server.server_close()


def test_a_pass_writes_both_roles_and_holds_the_one_without_metrics(
    fake: FakePrometheus, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(loop, "Writer", RecordingWriter)
    RecordingWriter.written.clear()
    cr = {
        "metadata": {"namespace": "team-a", "name": "chat", "uid": "u1", "generation": 3, "resourceVersion": "7"},
        "spec": raw(),
        "status": STATUS,
    }
    settings = OperatorSettings(default_prometheus=DefaultPrometheus(url=fake.url))
    result = autoscale_once(client.ApiClient(), settings, "team-a", "chat", now=datetime.fromtimestamp(NOW, UTC),
                            body=cr, pods=[])  # fmt: skip
    assert result.wrote and result.decision is not None and not result.decision.metrics_available
    (status,) = RecordingWriter.written
    autoscaler = status["autoscaler"]
    assert autoscaler["groups"] == {"p": 3, "d": 2}
    assert autoscaler["roles"]["prefill"]["signal"] == "uncachedTokens"
    assert autoscaler["roles"]["decode"]["signal"] == "hold"
    assert status["qps"] == "12"
    (available,) = [c for c in status["conditions"] if c["type"] == "MetricsAvailable"]
    assert available["status"] == "False" and available["message"] == (
        "no series of the decode servers in Prometheus (age_seconds, running_mean)"
    )
    assert any('engine_type="decode"' in query for query in fake.queries)


def test_an_optional_query_that_fails_leaves_its_term_out_and_says_so(
    fake: FakePrometheus, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake.rules = {
        DECODE_TREND: matrix([(NOW - 60, 18.0), (NOW, 20.0)]),
        "token_usage": (500, {"status": "error", "error": "boom"}),
        f"timestamp(sglang:num_running_reqs{{{_m('decode')}}}": vector(2.0),
        "avg_over_time((sum(sglang:num_running_reqs": vector(20.0),
        **PD_PROMETHEUS,
    }
    reading = read_role_samples(connect(fake.url, 2), Target("team-a", "chat"), "decode", parse_windows(), now=NOW)
    assert reading.samples is not None and reading.samples.running_mean == 20.0
    assert reading.samples.trend == ((NOW - 60, 18.0), (NOW, 20.0))
    assert reading.samples.token_usage is None
    assert reading.error == "decode token_usage query failed: HTTP 500"
    decided = decide({"prefill": prefill(), "decode": reading.samples})
    assert decided.roles["decode"].signal == "concurrency" and decided.roles["decode"].metrics_available


# -- issue 37: values a tenant controls never raise out of a pass, and a decision costs milliseconds -----------------
def tiny(**targets: float) -> SGLangDeploymentSpec:
    """The fleet with targets its rules now refuse (5e-324 passed "> 0"), as a CR admitted before them holds."""
    spec = pd_spec()
    autoscaling = spec.autoscaling.model_copy(update={"targets": spec.autoscaling.targets.model_copy(update=targets)})
    return spec.model_copy(update={"autoscaling": autoscaling})


@pytest.mark.parametrize(
    ("spec", "samples", "role", "signal"),
    [
        (tiny(time_to_first_token_seconds=5e-324), {"prefill": prefill(time_to_first_token=0.9)}, "prefill",
         "timeToFirstToken"),
        (pd_spec(targets={"timeToFirstTokenSeconds": 0.5}), {"prefill": prefill(time_to_first_token=1e308)},
         "prefill", "timeToFirstToken reads 1e+308"),
        (pd_spec(targets={"timeToFirstTokenSeconds": 0.5}), {"prefill": prefill(time_to_first_token=1e12)},
         "prefill", "demand unknown: timeToFirstToken asks for 2e+12 replicas"),
        (tiny(inter_token_latency_seconds=5e-324), {"decode": decode(inter_token_latency=0.03)}, "decode",
         "interTokenLatency"),
        (tiny(decode_token_usage=5e-324), {}, "decode", "tokenUsage"),
        (pd_spec(), {"decode": decode(queued=1e14)}, "decode", "the queues asks for"),
    ],
    ids=["ttft-target", "ttft-reading", "ttft-demand", "itl-target", "kv-usage-target", "decode-queue"],
)  # fmt: skip
def test_a_demand_that_cannot_be_computed_on_holds_that_role_and_says_why(
    spec: SGLangDeploymentSpec, samples: dict[str, RoleSamples], role: str, signal: str
) -> None:
    """A reading divided by a target of 5e-324 is infinite, and math.ceil raised OverflowError out of every pass
    (the fleet's autoscaler held forever, status never written); so did a router's TTFT of 1e308. Now that demand
    is unknown: the role holds, its reason names the signal, and the other role still decides."""
    decision = decide({"prefill": prefill(), "decode": decode(), **samples}, spec)
    held, other = decision.roles[role], decision.roles["decode" if role == "prefill" else "prefill"]
    assert held.signal == "hold" and not held.metrics_available
    assert "unknown" in held.reason and signal in held.reason, held.reason
    assert other.metrics_available and other.signal != "hold"


def fleet_of(role: str, groups: int, concurrency: int, gpus: int) -> RoleFleet:
    shapes = tuple(GroupShape(f"{role[0]}{i}", concurrency + i, gpus, 1, MAX_REPLICAS) for i in range(groups))
    current = FleetState(desired=groups, ready=groups, concurrency_per_replica=concurrency, gpus_per_replica=gpus)
    return RoleFleet(role, shapes, current, concurrency)


@pytest.mark.parametrize("share", [{"min": 0.95}, {"max": 0.05}, {"min": 0.5, "max": 0.5}], ids=str)
def test_one_decision_at_eight_groups_of_512_takes_milliseconds_within_the_fleets_bound(
    share: dict[str, float],
) -> None:
    """Issue 37: 8 groups of maxReplicas 512 decided up to 2,263 replicas, and the share correction re-split the
    fleet one unit at a time: 27 s of CPU for one decision, every intervalSeconds, in the pool every fleet shares.
    The split now holds the fleet's bound and the correction bisects: milliseconds."""
    spec = AutoscalingSpec.model_validate({"enabled": True, "maxScaleUpStep": 512, "prefillGPUShare": share})
    fleets = {"prefill": fleet_of("prefill", 4, 8, 2), "decode": fleet_of("decode", 4, 32, 1)}
    samples = {
        "prefill": RoleSamples(collected_at=NOW, age_seconds=1.0, uncached_tokens=1e9, requests=1e3, slot_seconds=1.0,
                               running=10.0),
        "decode": RoleSamples(collected_at=NOW, age_seconds=1.0, running_mean=1e5, running=1e5, requests=1.0),
    }  # fmt: skip
    took = []
    for _ in range(3):
        started = time.perf_counter()
        decision = decide_pd(fleets, samples, spec, {}, NOW)
        took.append(time.perf_counter() - started)
    assert min(took) < 0.05, f"one decision took {min(took) * 1000:.0f} ms"
    assert sum(decision.groups.values()) <= MAX_REPLICAS


def unit_at_a_time(
    fleets: dict[Role, RoleFleet], units: dict[Role, int], spec: AutoscalingSpec, limits: Any, too_much: bool
) -> dict[Role, int]:
    """The share correction as it was: one unit per step, a split per step; the bisection must land where it did."""

    def outside(trial: dict[Role, int]) -> bool:
        share = prefill_share(fleets, split_roles(fleets, trial, spec.max_gpus))
        return share is not None and (share > limits.max if too_much else share < limits.min)

    for role, step in (("decode", 1), ("prefill", -1)) if too_much else (("prefill", 1), ("decode", -1)):
        bounds = unit_bounds(spec, fleets[role].shapes)
        trial = dict(units)
        while outside(units):
            trial = {**trial, role: trial[role] + step}
            if not bounds.min_replicas <= trial[role] <= bounds.max_replicas:
                break
            before, after = (split_roles(fleets, u, spec.max_gpus)[role].replicas for u in (units, trial))
            if before != after:
                units = trial
    return units


GROUP = st.tuples(st.integers(1, 48), st.integers(1, 4), st.integers(0, 2), st.integers(0, 6))


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(
    st.lists(GROUP, min_size=1, max_size=3),
    st.lists(GROUP, min_size=1, max_size=3),
    st.integers(0, 20),
    st.integers(0, 20),
    st.floats(0.0, 1.0),
    st.floats(0.0, 1.0),
    st.one_of(st.none(), st.integers(0, 40)),
)
def test_the_bisected_share_correction_lands_where_the_unit_at_a_time_one_did(
    prefill_groups: list[tuple[int, int, int, int]],
    decode_groups: list[tuple[int, int, int, int]],
    prefill_units: int,
    decode_units: int,
    low: float,
    high: float,
    budget: int | None,
) -> None:
    def role_fleet(role: str, groups: list[tuple[int, int, int, int]]) -> RoleFleet:
        shapes = tuple(GroupShape(f"{role}{i}", c, g, lo, lo + extra) for i, (c, g, lo, extra) in enumerate(groups))
        return RoleFleet(role, shapes, FleetState(1, 1), shapes[0].concurrency)

    fleets: dict[Role, RoleFleet] = {
        "prefill": role_fleet("p", prefill_groups),
        "decode": role_fleet("d", decode_groups),
    }
    spec = AutoscalingSpec.model_validate({"enabled": True, "maxGPUs": budget})
    limits = PrefillGPUShare(min=min(low, high), max=max(low, high))
    units: dict[Role, int] = {"prefill": prefill_units, "decode": decode_units}
    for too_much in (True, False):
        assert _into_share(fleets, dict(units), spec, limits, too_much) == unit_at_a_time(
            fleets, dict(units), spec, limits, too_much
        )
