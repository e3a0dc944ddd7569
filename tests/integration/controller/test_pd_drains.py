"""Prefill/decode fleets in the reconcile pass's pure steps and its worker reads: a drain waits for the KV-handoff
queues of `/v1/loads?include=disagg` (each one that is not zero keeps the replica), a prefill is routed only once
its bootstrap server answered, and a router counts as synced only when it lists both roles."""

import copy
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

import pytest

from sglang_operator.api.groups import worker_groups
from sglang_operator.api.spec import SGLangDeploymentSpec, UpdateStrategy
from sglang_operator.controller.bootstrap import bootstrap_port, prefill_ports, probe_bootstrap, to_probe
from sglang_operator.controller.fleet import GroupPass
from sglang_operator.controller.loads import Loads, counts_from_loads, fetch_in_flight, nonzero, read_counts
from sglang_operator.controller.planner import Targets, plan_replicas
from sglang_operator.controller.routers import RouterState, sync_routers
from sglang_operator.controller.status import GroupObservation, compute_status
from sglang_operator.controller.steps import Seen, decide
from sglang_operator.observed import PodView, ReplicaView
from sglang_operator.router.client import RouterWorker
from sglang_operator.router.membership import DesiredWorker
from tests.support.router.fakehttp import FakeHTTP, Reply, serving


@pytest.fixture
def fake_http() -> Iterator[Callable[[dict[tuple[str, str], Reply]], FakeHTTP]]:
    """Scripted workers (their `/v1/loads`, their bootstrap server's `/health`), stopped when the test ends."""
    with ExitStack() as stack:
        yield lambda routes: stack.enter_context(serving(routes))


# One DP rank of SGLang 0.5.23's `GET /v1/loads?include=disagg` (`LoadSnapshot.to_dict({"disagg"})`: the core keys,
# then the `disaggregation` section, every field of `DisaggregationMetrics`), for an idle prefill server.
RANK: dict[str, Any] = {
    "timestamp": 1764864000.0, "dp_rank": 0, "num_running_reqs": 0, "num_waiting_reqs": 0,
    "num_waiting_uncached_tokens": 0, "num_used_tokens": 0, "num_total_tokens": 0, "num_active_tokens": 0,
    "num_prealloc_ready_tokens": 0, "max_total_num_tokens": 500000, "max_running_requests": 2048,
    "token_usage": 0.0, "gen_throughput": 0.0, "cache_hit_rate": 0.0, "utilization": 0.0,
    "total_prefill_uncached_tokens": 1234, "total_prefill_busy_us": 5678, "decode_moments": None,
    "disaggregation": {
        "mode": "prefill", "prefill_bootstrap_queue_reqs": 0, "prefill_inflight_queue_reqs": 0,
        "decode_prealloc_queue_reqs": 0, "decode_transfer_queue_reqs": 0, "decode_retracted_queue_reqs": 0,
        "kv_transfer_speed_gb_s": 0.0, "kv_transfer_latency_ms": 0.0,
    },
}  # fmt: skip
COUNTED = ["num_running_reqs", "num_waiting_reqs", "prefill_bootstrap_queue_reqs", "prefill_inflight_queue_reqs",
           "decode_prealloc_queue_reqs", "decode_transfer_queue_reqs", "decode_retracted_queue_reqs"]  # fmt: skip


def answer(*ranks: dict[str, Any]) -> dict[str, Any]:
    return {"timestamp": "2026-12-04T16:00:00+00:00", "version": "0.5.23", "accelerator": "NVIDIA H200",
            "num_accelerators": 1, "loads": list(ranks)}  # fmt: skip


def rank(dp_rank: int = 0, **counts: int) -> dict[str, Any]:
    """A rank of the answer with the given counts (core ones at the top, the others in the section)."""
    result = copy.deepcopy(RANK)
    result["dp_rank"] = dp_rank
    for name, value in counts.items():
        (result if name.startswith("num_") else result["disaggregation"])[name] = value
    return result


# -- the loads of a prefill or decode replica -------------------------------------------------------------------
def test_an_idle_prefill_or_decode_answer_reads_as_empty() -> None:
    counts = counts_from_loads(answer(rank(0), rank(1)), disagg=True)
    assert counts == dict.fromkeys(COUNTED, 0) and nonzero(counts) == ""


@pytest.mark.parametrize("name", COUNTED)
def test_each_number_that_is_not_zero_keeps_the_replica(name: str) -> None:
    """On any DP rank: a prefill with a prompt whose KV is still being sent (its inflight queue) runs nothing and
    waits for nothing, and is still not empty."""
    counts = counts_from_loads(answer(rank(0), rank(1, **{name: 2})), disagg=True)
    assert sum(counts.values()) == 2 and nonzero(counts) == f"{name}=2"


def test_sglang_0_5_9_to_0_5_11_call_the_bootstrap_queue_prealloc() -> None:
    old = rank(0)
    old["disaggregation"]["prefill_prealloc_queue_reqs"] = old["disaggregation"].pop("prefill_bootstrap_queue_reqs")
    old["disaggregation"]["prefill_prealloc_queue_reqs"] = 3
    assert nonzero(counts_from_loads(answer(old), disagg=True)) == "prefill_prealloc_queue_reqs=3"


def _without(path: tuple[str, ...]) -> dict[str, Any]:
    broken = rank(0)
    target = broken
    for key in path[:-1]:
        target = target[key]
    del target[path[-1]]
    return answer(broken)


def _with(path: tuple[str, ...], value: Any) -> dict[str, Any]:
    broken = rank(0)
    target = broken
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return answer(broken)


UNKNOWN_SHAPES = {
    "no-section": _without(("disaggregation",)),
    "section-not-an-object": _with(("disaggregation",), [0, 0]),
    "section-null": _with(("disaggregation",), None),
    "no-inflight-queue": _without(("disaggregation", "prefill_inflight_queue_reqs")),
    "no-bootstrap-queue": _without(("disaggregation", "prefill_bootstrap_queue_reqs")),
    "no-transfer-queue": _without(("disaggregation", "decode_transfer_queue_reqs")),
    "no-running-count": _without(("num_running_reqs",)),
    "queue-a-string": _with(("disaggregation", "decode_prealloc_queue_reqs"), "1"),
    "queue-a-float": _with(("disaggregation", "decode_prealloc_queue_reqs"), 0.5),
    "queue-negative": _with(("disaggregation", "prefill_inflight_queue_reqs"), -1),
    "queue-a-bool": _with(("disaggregation", "decode_transfer_queue_reqs"), False),
    "queue-huge": _with(("disaggregation", "decode_retracted_queue_reqs"), 10**12),
}


@pytest.mark.parametrize("payload", UNKNOWN_SHAPES.values(), ids=UNKNOWN_SHAPES.keys())
def test_an_unexpected_disagg_answer_is_unknown_not_zero(payload: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        counts_from_loads(payload, disagg=True)


def test_a_colocated_answer_is_read_as_before() -> None:
    """No `disaggregation` section needed, and a rank without a waiting count waits for nothing (as before)."""
    assert sum(counts_from_loads({"loads": [{"num_running_reqs": 2}]}).values()) == 2
    with pytest.raises(ValueError):
        counts_from_loads({"loads": [{"num_running_reqs": 2}]}, disagg=True)


def replica(index: int, url: str | None, draining: float | None = 1.0, ready: bool = True,
            name: str = "") -> ReplicaView:  # fmt: skip
    ip, port = url.removeprefix("http://").split(":") if url else (None, "30000")
    pod = PodView(name=name or f"p{index}", rank=0, phase="Running", ready=ready, ip=ip, port=int(port),
                  deleting=False, restarts=0, replica_nodes=1, draining_since=draining, warm=False)  # fmt: skip
    return ReplicaView(index=index, revision="r", pods={0: pod})


def test_a_prefill_or_decode_replica_is_read_with_its_handoff_queues(fake_http: Callable[..., FakeHTTP]) -> None:
    idle = fake_http({("GET", "/v1/loads"): Reply.json(answer(rank(0)))})
    sending = fake_http({("GET", "/v1/loads"): Reply.json(answer(rank(0, prefill_inflight_queue_reqs=1)))})
    plain = fake_http({("GET", "/v1/loads"): Reply.json({"loads": [{"num_running_reqs": 0}]})})  # no section
    loads = fetch_in_flight([replica(0, idle.url), replica(1, sending.url), replica(2, plain.url)], disagg=True)
    assert loads.known == {0: 0, 1: 1} and loads.busy == {1: "prefill_inflight_queue_reqs=1"}
    assert loads.unknown == {2: f"GET {plain.url}/v1/loads?include=disagg: HTTP 200 with an unexpected answer"}
    assert [r.query for r in idle.requests + sending.requests] == ["include=disagg", "include=disagg"]


def test_a_colocated_replica_is_read_from_plain_loads(fake_http: Callable[..., FakeHTTP]) -> None:
    worker = fake_http({("GET", "/v1/loads"): Reply.json(answer(rank(0, num_running_reqs=1)))})
    loads = fetch_in_flight([replica(0, worker.url)])
    assert loads.known == {0: 1} and loads.busy == {}
    assert [(r.path, r.query) for r in worker.requests] == [("/v1/loads", "")]


def test_a_refused_connection_is_empty_and_an_error_status_unknown(fake_http: Callable[..., FakeHTTP]) -> None:
    assert read_counts("http://127.0.0.1:9", disagg=True) == ({}, None)
    broken = fake_http({("GET", "/v1/loads"): Reply(status=500, body=b"SECRET")})
    counts, why = read_counts(broken.url, disagg=True)
    assert counts is None and why == f"GET {broken.url}/v1/loads?include=disagg: HTTP 500"


# -- drains -------------------------------------------------------------------------------------------------------
def _targets(drain: int = 60) -> Targets:
    return Targets(active=0, warm=0, revision="r", strategy=UpdateStrategy(drain_timeout_seconds=drain))


def test_a_drain_waits_while_a_handoff_queue_holds_a_request_and_the_timeout_names_it() -> None:
    draining = [replica(0, "http://10.0.0.1:30000", draining=0.0)]
    busy = {0: "prefill_inflight_queue_reqs=1, decode_transfer_queue_reqs=2"}
    waiting = plan_replicas(draining, _targets(), {0: 3}, {0}, now=30.0, busy_loads=busy)
    assert waiting.delete == [] and waiting.events == []
    timed_out = plan_replicas(draining, _targets(), {0: 3}, {0}, now=61.0, busy_loads=busy)
    assert timed_out.delete == [0] and timed_out.finished_drains == {0: True}
    assert [e.message for e in timed_out.events] == [
        "replica 0 drain timed out after 60s (not empty: prefill_inflight_queue_reqs=1, decode_transfer_queue_reqs=2);"
        " deleting it"
    ]


def test_an_empty_replica_off_every_router_is_deleted() -> None:
    draining = [replica(0, "http://10.0.0.1:30000", draining=0.0)]
    plan = plan_replicas(draining, _targets(), {0: 0}, {0}, now=10.0, busy_loads={})
    assert plan.delete == [0] and [e.message for e in plan.events] == ["replica 0 drained; deleting it"]


# -- routing: roles, bootstrap gating, synced -------------------------------------------------------------------
PD_SPEC = SGLangDeploymentSpec.model_validate({
    "model": {"path": "org/model"}, "disaggregation": {"bootstrapPort": 9100},
    "workerGroups": [{"name": "pre", "role": "prefill", "replicas": 2, "parallelism": {"tp": 2}},
                     {"name": "dec", "role": "decode", "replicas": 1, "parallelism": {"tp": 1}}],
})  # fmt: skip
P0, P1, D0 = "http://10.0.0.1:30000", "http://10.0.0.2:30000", "http://10.0.0.3:30000"


def pd_seen(listed: list[RouterWorker], bootstrapped: frozenset[str], ports: dict[str, int] | None = None) -> Seen:
    pre, dec = worker_groups(PD_SPEC)
    groups = [
        GroupPass(pre, "r", 2, 0, [replica(0, P0, draining=None), replica(1, P1, draining=None)]),
        GroupPass(dec, "r", 1, 0, [replica(0, D0, draining=None)]),
    ]
    ports = ports if ports is not None else {P0: 9100, P1: 9100}
    return Seen(groups=groups, loads={"pre": Loads(), "dec": Loads()},
                routers=RouterState(lists={"http://10.9.0.1:30000": listed}), verdicts=[],
                bootstrap_ports=ports, bootstrapped=bootstrapped)  # fmt: skip


def test_a_prefill_is_routed_only_once_its_bootstrap_server_answered() -> None:
    decided = decide(PD_SPEC, pd_seen([], frozenset({P1})), now=0.0)
    assert decided.routed == [DesiredWorker(P1, "prefill", 9100), DesiredWorker(D0, "decode")]


def test_a_prefill_a_router_lists_stays_routed_without_a_new_read() -> None:
    """Only the prefills no router lists are read: one failed read does not take a serving prefill off."""
    listed = [RouterWorker("a", P0, "ready", True, "prefill", 9100)]
    decided = decide(PD_SPEC, pd_seen(listed, frozenset()), now=0.0)
    assert decided.routed == [DesiredWorker(P0, "prefill", 9100), DesiredWorker(D0, "decode")]


def test_a_prefill_is_routed_with_the_port_its_pod_declares() -> None:
    decided = decide(PD_SPEC, pd_seen([], frozenset({P0, P1}), {P0: 9100, P1: 9200}), now=0.0)
    assert [(w.url, w.bootstrap_port) for w in decided.routed if w.worker_type == "prefill"] == [
        (P0, 9100), (P1, 9200)]  # fmt: skip


def test_a_colocated_fleet_routes_regular_workers() -> None:
    spec = SGLangDeploymentSpec.model_validate({"model": {"path": "org/model"}, "replicas": 1})
    [group] = worker_groups(spec)
    seen = Seen(groups=[GroupPass(group, "r", 1, 0, [replica(0, P0, draining=None)])], loads={"": Loads()},
                routers=RouterState(lists={}), verdicts=[])  # fmt: skip
    assert decide(spec, seen, now=0.0).routed == [DesiredWorker(P0)]


def pod(name: str, ports: list[dict[str, Any]]) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"containers": [{"name": "sglang", "ports": ports}]}}


def test_the_bootstrap_port_is_the_pods_own_else_the_specs() -> None:
    http = {"name": "http", "containerPort": 30000}
    assert bootstrap_port(pod("a", [http, {"name": "bootstrap", "containerPort": 9200}]), 9100) == 9200
    assert bootstrap_port(pod("a", [http]), 9100) == 9100
    assert bootstrap_port(pod("a", [{"name": "bootstrap", "containerPort": "9200"}]), 9100) == 9100
    assert bootstrap_port(None, 9100) == 9100
    seen = pd_seen([], frozenset())
    pods = {"p0": pod("p0", [{"name": "bootstrap", "containerPort": 9200}])}
    assert prefill_ports(seen.groups, pods, 9100) == {P0: 9200, P1: 9100}  # replica 1's pod p1 declares none
    assert prefill_ports(seen.groups, {}, 9100) == {P0: 9100, P1: 9100}  # decode replicas have none


def test_only_ready_serving_prefills_no_router_lists_are_read() -> None:
    pre, dec = worker_groups(PD_SPEC)
    groups = [
        GroupPass(pre, "r", 2, 0, [replica(0, P0, draining=None), replica(1, P1, draining=None),
                                   replica(2, "http://10.0.0.4:30000", draining=None, ready=False),
                                   replica(3, "http://10.0.0.5:30000", draining=5.0)]),
        GroupPass(dec, "r", 1, 0, [replica(0, D0, draining=None)]),
    ]  # fmt: skip
    ports = prefill_ports(groups, {}, 9100)
    assert [r.url for r in to_probe(groups, ports, listed={P0})] == [P1]


def port_of(fake: FakeHTTP) -> int:
    return int(fake.url.rsplit(":", 1)[1])


def test_the_bootstrap_read_wants_200_from_health(fake_http: Callable[..., FakeHTTP]) -> None:
    up = fake_http({("GET", "/health"): Reply(body=b"OK", content_type="text/plain")})
    down = fake_http({("GET", "/health"): Reply(status=503)})
    hanging = fake_http({("GET", "/health"): Reply(hang=True)})
    urls = [f"http://127.0.0.1:{30000 + i}" for i in range(4)]  # the replicas' HTTP ports: nothing listens there
    ports = dict(zip(urls, [port_of(up), port_of(down), port_of(hanging), 9], strict=True))
    answered = probe_bootstrap([replica(i, url, draining=None) for i, url in enumerate(urls)], ports)
    assert answered == frozenset({urls[0]})
    assert [r.path for r in up.requests] == ["/health"]


def test_reading_bootstrap_servers_has_one_budget_for_the_whole_pass(fake_http: Callable[..., FakeHTTP]) -> None:
    hanging = fake_http({("GET", "/health"): Reply(hang=True)})
    urls = [f"http://127.0.0.1:{30000 + i}" for i in range(10)]
    start = time.monotonic()
    replicas = [replica(i, url, draining=None) for i, url in enumerate(urls)]
    assert probe_bootstrap(replicas, dict.fromkeys(urls, port_of(hanging)), budget_seconds=1.0) == frozenset()
    assert time.monotonic() - start < 1.0 + 2.0 + 1.0  # the budget, plus the one read under way when it ran out


def test_a_pd_router_is_synced_only_when_it_lists_both_roles() -> None:
    """The lists match what is routed (no call is sent), yet a router with one role only answers 503."""
    prefill = RouterWorker("a", P0, "ready", True, "prefill", 9100)
    decode = RouterWorker("b", D0, "ready", True, "decode", None)
    only_prefill = sync_routers(RouterState(lists={"http://127.0.0.1:9": [prefill]}),
                                [DesiredWorker(P0, "prefill", 9100)], disaggregated=True)  # fmt: skip
    assert not only_prefill.observation.synced and not only_prefill.changed
    assert only_prefill.observation.note == "not every router pod lists a decode worker yet"
    both = sync_routers(
        RouterState(lists={"http://127.0.0.1:9": [prefill, decode]}),
        [DesiredWorker(P0, "prefill", 9100), DesiredWorker(D0, "decode")],
        disaggregated=True,
    )
    assert both.observation.synced and both.observation.registered == 2 and both.observation.note is None
    colocated = sync_routers(RouterState(lists={"http://127.0.0.1:9": []}), [])
    assert colocated.observation.synced  # a colocated router with nothing to route is synced, as before


def test_status_says_which_role_a_router_misses() -> None:
    prefill = RouterWorker("a", P0, "ready", True, "prefill", 9100)
    result = sync_routers(RouterState(lists={"http://127.0.0.1:9": [prefill]}),
                          [DesiredWorker(P0, "prefill", 9100)], disaggregated=True)  # fmt: skip
    group = GroupObservation(name="pre", spec=PD_SPEC, desired=0, revision="r", replicas=[])
    status = compute_status(name="d", namespace="ns", generation=1, spec=PD_SPEC, groups=[group],
                            router=result.observation, failed_replicas=0, previous={}, now="t")  # fmt: skip
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["RouterSynced"]["status"] == "False" and conditions["Ready"]["status"] == "False"
    assert "not every router pod lists a decode worker yet" in conditions["RouterSynced"]["message"]
