"""Issue 29, gap 1: a tenant's router, worker or Prometheus that answers a redirect gets nothing sent to the redirect's
target. The call is an error naming the endpoint that answered (what status shows), never the target.

Each test runs a real server on 127.0.0.1 playing the tenant's component, answering every request with a 3xx whose
Location is a second real server (the "target": an internal endpoint the tenant wants the operator to reach, with
the operator's credentials); the target must count zero requests."""

from collections.abc import Callable

import pytest

from sglang_operator.api.spec import AutoscalingSpec
from sglang_operator.controller.loads import fetch_in_flight, read_load
from sglang_operator.prometheus.client import Credentials, fetch_samples
from sglang_operator.router.client import RouterClient, RouterError
from tests.integration.router.test_client import replica
from tests.support.router.fakehttp import FakeHTTP, Reply

REDIRECTS = [301, 302, 303, 307, 308]
ROUTER_KEY = "ROUTER-KEY-0123"
WORKER_KEY = "WORKER-KEY-4567"


@pytest.fixture
def target(fake_http: Callable[..., FakeHTTP]) -> FakeHTTP:
    """Where every redirect points: it answers anything, so a followed redirect would succeed."""
    return fake_http({(m, "*"): Reply.json({"workers": [], "loads": []}) for m in ("GET", "POST", "DELETE")})


def redirecting(fake_http: Callable[..., FakeHTTP], target: FakeHTTP, status: int) -> FakeHTTP:
    location = Reply.redirect(status, f"{target.url}/internal/admin")
    return fake_http({(m, "*"): location for m in ("GET", "POST", "DELETE")})


def port_of(fake: FakeHTTP) -> str:
    return fake.url.rsplit(":", 1)[1]


@pytest.mark.parametrize("status", REDIRECTS)
def test_a_redirecting_router_gets_no_registration_sent_on(
    fake_http: Callable[..., FakeHTTP], target: FakeHTTP, status: int
) -> None:
    router = redirecting(fake_http, target, status)
    client = RouterClient(router.url, api_key=ROUTER_KEY, timeout=5)
    with pytest.raises(RouterError) as registering:
        client.add_worker("http://10.0.0.7:30000", worker_api_key=WORKER_KEY)
    with pytest.raises(RouterError) as listing:
        client.list_workers()
    with pytest.raises(RouterError) as removing:
        client.remove_worker("a1")
    assert str(registering.value) == f"POST {router.url}/workers: HTTP {status}, a redirect, not followed"
    assert str(listing.value) == f"GET {router.url}/workers: HTTP {status}, a redirect, not followed"
    assert str(removing.value) == f"DELETE {router.url}/workers/a1: HTTP {status}, a redirect, not followed"
    for error in (registering.value, listing.value, removing.value):
        assert port_of(target) not in str(error) and "internal" not in str(error)
    assert target.requests == []
    assert [r.method for r in router.requests] == ["POST", "GET", "DELETE"]  # each sent once, to the router only
    assert WORKER_KEY.encode() in router.requests[0].body  # the key went where the operator meant, nowhere else


@pytest.mark.parametrize("status", REDIRECTS)
def test_a_redirecting_worker_load_is_unknown_and_its_target_gets_nothing(
    fake_http: Callable[..., FakeHTTP], target: FakeHTTP, status: int
) -> None:
    worker = redirecting(fake_http, target, status)
    count, why = read_load(worker.url, {"Authorization": f"Bearer {WORKER_KEY}"})
    assert count is None
    assert why == f"GET {worker.url}/v1/loads: HTTP {status}, a redirect, not followed"
    loads = fetch_in_flight([replica(0, worker.url)], api_key=WORKER_KEY)  # the reconciler's way in
    assert loads.known == {} and loads.unknown == {0: why}
    assert target.requests == [] and len(worker.requests) == 2


@pytest.mark.parametrize("status", REDIRECTS)
def test_a_redirecting_prometheus_gets_no_query_sent_on(
    fake_http: Callable[..., FakeHTTP], target: FakeHTTP, status: int
) -> None:
    prometheus = redirecting(fake_http, target, status)
    credentials = Credentials(headers=(("Authorization", "Bearer prom-token"),), basic=None)
    samples, error = fetch_samples(prometheus.url, "team-a", "chat", AutoscalingSpec(), 5.0, credentials=credentials)
    assert samples is None
    assert error == (
        f"age_seconds query failed: GET {prometheus.url}/api/v1/query: HTTP {status}, a redirect, not followed"
    )
    assert target.requests == [] and len(prometheus.requests) == 1
