"""The router client and the worker-load reader against scripted servers: every odd answer is a RouterError or an
unknown load (never another exception, never a zero that could let a busy replica be deleted), every call ends by
its deadline, and no message quotes what the server said."""

import time
from collections.abc import Callable

import pytest

from sglang_operator.controller.loads import fetch_in_flight, read_load
from sglang_operator.controller.routers import RouterState, observe_routers, sync_routers
from sglang_operator.observed import PodView, ReplicaView
from sglang_operator.router.client import RouterClient, RouterError, RouterWorker
from tests.support.router.fakehttp import FakeHTTP, Reply

SLACK = 1.0
GOOD_WORKER = {"id": "a1", "url": "http://10.0.0.1:30000", "status": "ready", "is_healthy": True}

GARBAGE_LISTS = {
    "html": Reply(body=b"<html>SECRET login page</html>", content_type="text/html"),
    "list": Reply(body=b"[]"),
    "workers-not-a-list": Reply.json({"workers": "x"}),
    "entry-without-id": Reply.json({"workers": [{"url": "http://10.0.0.1:30000"}]}),
    "entry-without-url": Reply.json({"workers": [{"id": "a1"}]}),
    "entry-not-an-object": Reply.json({"workers": [1]}),
    "id-a-number": Reply.json({"workers": [{"id": 1e400, "url": "http://10.0.0.1:30000"}]}),
    "huge-number": Reply(body=b'{"workers": 1e400}'),
    "deep-nesting": Reply(body=b"[" * 100_000 + b"]" * 100_000),
    "not-utf8": Reply(body=b'{"workers": "\xff\xfe"}'),
    "error-status": Reply(status=500, body=b"SECRET stack trace"),
    "unauthorized": Reply(status=401, body=b"SECRET"),
}


@pytest.mark.parametrize("answer", GARBAGE_LISTS.values(), ids=GARBAGE_LISTS.keys())
def test_an_unexpected_worker_list_is_a_router_error_without_the_body(
    fake_http: Callable[..., FakeHTTP], answer: Reply
) -> None:
    fake = fake_http({("GET", "/workers"): answer})
    with pytest.raises(RouterError) as caught:
        RouterClient(fake.url).list_workers()
    assert "SECRET" not in str(caught.value) and f"GET {fake.url}/workers" in str(caught.value)


def test_a_good_worker_list_parses(fake_http: Callable[..., FakeHTTP]) -> None:
    fake = fake_http({("GET", "/workers"): Reply.json({"workers": [GOOD_WORKER], "total": 1})})
    [worker] = RouterClient(fake.url).list_workers()
    assert (worker.id, worker.url, worker.status, worker.healthy) == ("a1", "http://10.0.0.1:30000", "ready", True)


@pytest.mark.parametrize(
    "answer",
    [
        Reply(hang=True),
        Reply(body=b'{"workers": []}' * 40, drip_seconds=0.1),
        Reply(body=b"{}", drip_seconds=0.5, drip_headers=True),
    ],
    ids=["hanging", "dripping", "dripping-headers"],
)
def test_a_slow_router_costs_one_deadline_at_most(fake_http: Callable[..., FakeHTTP], answer: Reply) -> None:
    fake = fake_http({("GET", "/workers"): answer})
    start = time.monotonic()
    with pytest.raises(RouterError):
        RouterClient(fake.url, timeout=1.0).list_workers()
    assert time.monotonic() - start < 1.0 + SLACK


def test_a_garbage_router_is_an_error_in_status_and_the_others_are_synced(fake_http: Callable[..., FakeHTTP]) -> None:
    good = fake_http({("GET", "/workers"): Reply.json({"workers": []}), ("POST", "/workers"): Reply(status=202)})
    bad = fake_http({("GET", "/workers"): GARBAGE_LISTS["html"]})
    pods = [router_pod(good.url), router_pod(bad.url)]
    state = observe_routers(pods, None)
    assert list(state.lists) == [good.url]
    result = sync_routers(state, ["http://10.0.0.1:30000"])
    assert result.observation.synced is False and result.changed  # the good router was sent the worker
    assert result.observation.error is not None and f"GET {bad.url}/workers" in result.observation.error
    assert "SECRET" not in result.observation.error
    assert [(r.method, r.body) for r in good.requests if r.method == "POST"] == [
        ("POST", b'{"url": "http://10.0.0.1:30000", "runtime": "sglang", "health": {"drain_settle_secs": 0}}')
    ]


def test_a_sync_with_nothing_to_send_reports_no_change(fake_http: Callable[..., FakeHTTP]) -> None:
    listed = {"workers": [{"id": "a1", "url": "http://10.0.0.1:30000", "status": "ready", "is_healthy": True}]}
    fake = fake_http({("GET", "/workers"): Reply.json(listed)})
    result = sync_routers(observe_routers([router_pod(fake.url)], None), ["http://10.0.0.1:30000"])
    assert result.observation.synced and result.observation.registered == 1 and not result.changed
    assert [r.method for r in fake.requests] == ["GET"]


def test_removal_confirmation_waits_at_most_its_deadline_even_if_each_read_hangs(
    fake_http: Callable[..., FakeHTTP], monkeypatch: pytest.MonkeyPatch
) -> None:
    from sglang_operator.controller import routers

    monkeypatch.setattr(routers, "REMOVAL_CONFIRM_SECONDS", 1.5)
    stale = RouterWorker(id="a1", url="http://10.0.0.9:30000", status="ready", healthy=True)
    fake = fake_http({("GET", "/workers"): Reply(hang=True), ("DELETE", "*"): Reply(status=202)})
    state = RouterState(lists={fake.url: [stale]})
    start = time.monotonic()
    sync_routers(state, [])
    assert time.monotonic() - start < 1.5 + SLACK
    assert [r.path for r in fake.requests if r.method == "DELETE"] == ["/workers/a1"]


def router_pod(url: str) -> dict[str, object]:
    ip, port = url.removeprefix("http://").split(":")
    return {
        "metadata": {"name": f"router-{port}"},
        "spec": {"containers": [{"ports": [{"name": "http", "containerPort": int(port)}]}]},
        "status": {"podIP": ip, "conditions": [{"type": "Ready", "status": "True"}]},
    }


LOADS = {
    "unauthorized": Reply(status=401, body=b"SECRET"),
    "server-error": Reply(status=500, body=b"SECRET"),
    "html": Reply(body=b"<html>SECRET</html>", content_type="text/html"),
    "list": Reply(body=b"[]"),
    "loads-not-a-list": Reply.json({"loads": "x"}),
    "no-loads": Reply.json({"version": "0.5.23"}),
    "non-int": Reply.json({"loads": [{"num_running_reqs": "3", "num_waiting_reqs": 0}]}),
    "float": Reply.json({"loads": [{"num_running_reqs": 1.5, "num_waiting_reqs": 0}]}),
    "negative": Reply.json({"loads": [{"num_running_reqs": -5, "num_waiting_reqs": 0}]}),
    "huge": Reply(body=b'{"loads": [{"num_running_reqs": 1e400, "num_waiting_reqs": 0}]}'),
    "huge-int": Reply(body=b'{"loads": [{"num_running_reqs": ' + b"9" * 40 + b', "num_waiting_reqs": 0}]}'),
    "bool": Reply.json({"loads": [{"num_running_reqs": True, "num_waiting_reqs": 0}]}),
    "hanging": Reply(hang=True),
}


@pytest.mark.parametrize("answer", LOADS.values(), ids=LOADS.keys())
def test_an_unexpected_load_answer_is_unknown_not_zero(fake_http: Callable[..., FakeHTTP], answer: Reply) -> None:
    fake = fake_http({("GET", "/v1/loads"): answer})
    count, why = read_load(fake.url)
    assert count is None and why is not None
    assert why.startswith(f"GET {fake.url}/v1/loads") and "SECRET" not in why


def test_a_good_load_answer_sums_running_and_waiting_over_ranks(fake_http: Callable[..., FakeHTTP]) -> None:
    ranks = [{"dp_rank": 0, "num_running_reqs": 3, "num_waiting_reqs": 2}, {"dp_rank": 1, "num_running_reqs": 1}]
    fake = fake_http({("GET", "/v1/loads"): Reply.json({"loads": ranks})})
    assert read_load(fake.url) == (6, None)


def test_fetch_in_flight_keeps_known_and_unknown_apart(fake_http: Callable[..., FakeHTTP]) -> None:
    idle = fake_http({("GET", "/v1/loads"): Reply.json({"loads": [{"num_running_reqs": 0, "num_waiting_reqs": 0}]})})
    broken = fake_http({("GET", "/v1/loads"): Reply(status=500)})
    replicas = [replica(0, idle.url), replica(1, broken.url), replica(2, None), replica(3, "http://127.0.0.1:9")]
    loads = fetch_in_flight(replicas)
    assert loads.known == {0: 0, 2: 0, 3: 0}  # no address, or nothing listening: nothing can still complete
    assert loads.unknown == {1: f"GET {broken.url}/v1/loads: HTTP 500"}


def replica(index: int, url: str | None) -> ReplicaView:
    ip, port = url.removeprefix("http://").split(":") if url else (None, "30000")
    pod = PodView(name=f"p{index}", rank=0, phase="Running", ready=True, ip=ip, port=int(port), deleting=False,
                  restarts=0, replica_nodes=1, draining_since=1.0, warm=False)  # fmt: skip
    return ReplicaView(index=index, revision="r", pods={0: pod})


def test_reading_loads_has_one_budget_for_the_whole_pass(fake_http: Callable[..., FakeHTTP]) -> None:
    hanging = fake_http({("GET", "/v1/loads"): Reply(hang=True)})
    replicas = [replica(i, hanging.url) for i in range(10)]  # 10 x 2 s if each call had only its own deadline
    start = time.monotonic()
    loads = fetch_in_flight(replicas, budget_seconds=3.0)
    assert time.monotonic() - start < 3.0 + 2.0 + SLACK  # the budget, plus the one call under way when it ran out
    assert loads.known == {} and sorted(loads.unknown) == list(range(10))
    assert sum("not read" in why for why in loads.unknown.values()) >= 7


def test_the_workers_api_key_reads_loads_and_is_handed_to_the_router(fake_http: Callable[..., FakeHTTP]) -> None:
    """engine.apiKeySecretRef: SGLang answers /v1/loads with 401 without the key; with it the load is known, and
    the router receives the key with the worker so it can call it too."""
    worker = fake_http({("GET", "/v1/loads"): Reply.json({"loads": [{"num_running_reqs": 2, "num_waiting_reqs": 0}]})})
    loads = fetch_in_flight([replica(0, worker.url)], api_key="k3y")
    assert loads.known == {0: 2}
    assert [r.authorization for r in worker.requests] == ["Bearer k3y"]
    router = fake_http({("GET", "/workers"): Reply.json({"workers": []}), ("POST", "/workers"): Reply(status=202)})
    state = observe_routers([router_pod(router.url)], None, worker_api_key="k3y")
    sync_routers(state, ["http://10.0.0.1:30000"])
    posted = [r.body for r in router.requests if r.method == "POST"]
    assert posted == [
        b'{"url": "http://10.0.0.1:30000", "runtime": "sglang", "health": {"drain_settle_secs": 0}, "api_key": "k3y"}'
    ]


def test_router_operations_are_counted_by_operation_and_result(fake_http: Callable[..., FakeHTTP]) -> None:
    from sglang_operator import metrics

    def count(operation: str, result: str) -> float:
        labels = {"operation": operation, "result": result}
        return metrics.REGISTRY.get_sample_value("sglang_operator_router_operations_total", labels) or 0.0

    before = {(o, r): count(o, r) for o in ("register", "deregister") for r in ("ok", "failed")}
    stale = RouterWorker(id="a1", url="http://10.0.0.9:30000", status="ready", healthy=True)
    good = fake_http({("GET", "/workers"): Reply.json({"workers": []}), ("POST", "/workers"): Reply(status=202),
                      ("DELETE", "*"): Reply(status=202)})  # fmt: skip
    refusing = fake_http({("POST", "/workers"): Reply(status=500)})
    state = RouterState(lists={good.url: [stale], refusing.url: []})
    sync_routers(state, ["http://10.0.0.1:30000"])
    after = {key: count(*key) - value for key, value in before.items()}
    assert after == {("register", "ok"): 1, ("register", "failed"): 1, ("deregister", "ok"): 1,
                     ("deregister", "failed"): 0}  # fmt: skip
