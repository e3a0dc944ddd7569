"""Issue 37, drains: a router that could not be read may still route to any replica, so it lists an unknown set, not
nothing. A replica is taken off (its drain started, then deleted once drained) only when every ready router pod was
read and none lists it; a router whose removal failed or could not be confirmed still routes it. And a worker's
`{"loads": []}` names no rank: its load is unknown, never an idle zero."""

import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack

import pytest

from sglang_operator.api.groups import worker_groups
from sglang_operator.api.spec import SGLangDeploymentSpec
from sglang_operator.controller import routers
from sglang_operator.controller.fleet import GroupPass
from sglang_operator.controller.loads import Loads, counts_from_loads, fetch_in_flight
from sglang_operator.controller.routers import RouterState, sync_routers
from sglang_operator.controller.steps import Seen, decide, drains_now
from sglang_operator.observed import PodView, ReplicaView
from sglang_operator.router.client import RouterWorker
from tests.support.router.fakehttp import FakeHTTP, Reply, serving

SPEC = SGLangDeploymentSpec.model_validate({"model": {"path": "org/model"}, "replicas": 1})
KEPT, LEAVING = "http://10.0.0.1:30000", "http://10.0.0.2:30000"
READ, UNREAD = "http://10.9.0.1:30000", "http://10.9.0.2:30000"
TIMED_OUT = f"GET {UNREAD}/workers: timed out"


@pytest.fixture
def fake_http() -> Iterator[Callable[[dict[tuple[str, str], Reply]], FakeHTTP]]:
    """Scripted routers and workers, stopped when the test ends."""
    with ExitStack() as stack:
        yield lambda routes: stack.enter_context(serving(routes))


def replica(index: int, url: str, draining: float | None = None) -> ReplicaView:
    ip, port = url.removeprefix("http://").split(":")
    pod = PodView(name=f"chat-{index}-0", rank=0, phase="Running", ready=True, ip=ip, port=int(port),
                  deleting=False, restarts=0, replica_nodes=1, draining_since=draining, warm=False)  # fmt: skip
    return ReplicaView(index=index, revision="r", pods={0: pod})


def seen(replicas: list[ReplicaView], state: RouterState, loads: Loads) -> Seen:
    [group] = worker_groups(SPEC)
    return Seen(groups=[GroupPass(group, "r", 1, 0, replicas)], loads={"": loads}, routers=state, verdicts=[])


def listing(*urls: str) -> list[RouterWorker]:
    return [RouterWorker(f"id-{i}", url, "ready", True) for i, url in enumerate(urls)]


# -- a drained replica is deleted only once every ready router was read ------------------------------------------
def test_a_drained_replica_is_not_deleted_while_a_router_could_not_be_read() -> None:
    replicas = [replica(0, KEPT), replica(1, LEAVING, draining=0.0)]
    unread = RouterState(lists={READ: listing(KEPT)}, errors=[TIMED_OUT])
    decided = decide(SPEC, seen(replicas, unread, Loads(known={0: 0, 1: 0})), now=100.0)
    assert decided.plans[""].delete == []  # the router that timed out may still send it requests

    every = RouterState(lists={READ: listing(KEPT), UNREAD: listing(KEPT)})
    decided = decide(SPEC, seen(replicas, every, Loads(known={0: 0, 1: 0})), now=100.0)
    assert decided.plans[""].delete == [1]  # every router read, none lists it: drained


def test_no_drain_starts_while_a_router_could_not_be_read() -> None:
    replicas = [replica(0, KEPT), replica(1, LEAVING)]  # one too many: one drains
    unread = seen(replicas, RouterState(lists={READ: listing(KEPT)}, errors=[TIMED_OUT]), Loads(known={0: 0, 1: 0}))
    decided = decide(SPEC, unread, now=100.0)
    assert decided.plans[""].drain == [1]  # planned, so no router is told to route it
    assert drains_now(unread, decided, set()) == {"": []}  # but not started: the unread router may route it

    every = seen(replicas, RouterState(lists={READ: listing(KEPT), UNREAD: listing(KEPT)}), Loads(known={0: 0, 1: 0}))
    assert drains_now(every, decide(SPEC, every, now=100.0), set()) == {"": [1]}


# -- a removal a router did not take, or that could not be confirmed, is unconfirmed ------------------------------
def router(fake_http: Callable[..., FakeHTTP], listed: Reply, delete: Reply) -> FakeHTTP:
    return fake_http({("GET", "/workers"): listed, ("DELETE", "*"): delete, ("POST", "/workers"): Reply(status=202)})


def test_a_router_whose_removal_failed_still_routes_the_worker(fake_http: Callable[..., FakeHTTP]) -> None:
    failing = router(fake_http, Reply.json({"workers": []}), Reply(status=500))
    result = sync_routers(RouterState(lists={failing.url: listing(LEAVING)}), [])
    assert result.unconfirmed_removals == {LEAVING}
    assert [r.method for r in failing.requests] == ["DELETE"]


def test_a_router_that_cannot_be_read_while_confirming_has_not_confirmed(
    fake_http: Callable[..., FakeHTTP], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(routers, "REMOVAL_CONFIRM_SECONDS", 0.5)
    unreadable = router(fake_http, Reply(status=503), Reply(status=202))
    start = time.monotonic()
    result = sync_routers(RouterState(lists={unreadable.url: listing(LEAVING)}), [])
    assert result.unconfirmed_removals == {LEAVING}  # a failed read is not an empty list
    assert time.monotonic() - start < 0.5 + 1.0


def test_a_router_that_confirms_the_removal_lets_the_drain_start(fake_http: Callable[..., FakeHTTP]) -> None:
    applied = router(fake_http, Reply.json({"workers": []}), Reply(status=202))
    result = sync_routers(RouterState(lists={applied.url: listing(LEAVING)}), [])
    assert result.unconfirmed_removals == set()


# -- {"loads": []} ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("disagg", [False, True])
def test_a_load_answer_without_a_rank_is_unknown_not_zero(fake_http: Callable[..., FakeHTTP], disagg: bool) -> None:
    with pytest.raises(ValueError):
        counts_from_loads({"loads": []}, disagg=disagg)
    worker = fake_http({("GET", "/v1/loads"): Reply.json({"loads": []})})
    loads = fetch_in_flight([replica(0, worker.url, draining=0.0)], disagg=disagg)
    assert loads.known == {} and list(loads.unknown) == [0]
    assert "HTTP 200 with an unexpected answer" in loads.unknown[0]
