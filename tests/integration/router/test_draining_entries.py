"""smg 1.13.0 keeps a removed worker listed as `draining` for a few seconds (`--drain-settle-secs`) while it routes
nothing new there. The membership reconcile must read such an entry as already gone on that router: it counts
toward no "registered" set (so the replica's drain may start), it is not deleted again, and a worker that is wanted
back is registered anew."""

from collections.abc import Callable

from sglang_operator.controller.routers import observe_routers, sync_routers
from tests.integration.router.test_client import router_pod
from tests.support.router.fakehttp import FakeHTTP, Reply

LEAVING = "http://10.0.0.1:30000"
STAYING = "http://10.0.0.2:30000"


def _router(fake_http: Callable[..., FakeHTTP], workers: list[dict[str, object]]) -> FakeHTTP:
    return fake_http({
        ("GET", "/workers"): Reply.json({"workers": workers, "total": len(workers)}),
        ("POST", "/workers"): Reply(status=202),
        ("DELETE", "/workers/w1"): Reply(status=202),
    })  # fmt: skip


def test_a_draining_entry_is_leaving_on_that_router(fake_http: Callable[..., FakeHTTP]) -> None:
    router = _router(fake_http, [
        {"id": "w1", "url": LEAVING, "status": "draining", "is_healthy": True},
        {"id": "w2", "url": STAYING, "status": "ready", "is_healthy": True},
    ])  # fmt: skip
    state = observe_routers([router_pod(router.url)], None)
    assert state.registered_urls() == {STAYING} and state.listed_everywhere() == {STAYING}
    result = sync_routers(state, [STAYING])
    assert result.observation.synced and result.unconfirmed_removals == set()
    assert [r.method for r in router.requests] == ["GET"]  # no second DELETE of what is already leaving


def test_a_draining_entry_wanted_back_is_registered_again(fake_http: Callable[..., FakeHTTP]) -> None:
    router = _router(fake_http, [{"id": "w1", "url": LEAVING, "status": "draining", "is_healthy": True}])
    state = observe_routers([router_pod(router.url)], None)
    sync_routers(state, [LEAVING])
    assert [(r.method, r.body) for r in router.requests if r.method != "GET"] == [
        ("POST", f'{{"url": "{LEAVING}", "runtime": "sglang", "health": {{"drain_settle_secs": 0}}}}'.encode())
    ]
