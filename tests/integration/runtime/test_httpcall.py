"""Bounded calls: a total deadline whatever the server does, a body size limit, no redirect followed, and messages
without the body."""

import asyncio
import gzip
import threading
import time
from collections.abc import Callable

import pytest

from sglang_operator.runtime import httpcall
from sglang_operator.runtime.httpcall import CallFailed, request
from tests.support.router.fakehttp import FakeHTTP, Reply

SLACK = 1.0
"""What a deadline may be overrun by on a busy 2-core machine (thread wake-up, connection teardown)."""


def timed(call: Callable[[], object]) -> tuple[float, BaseException | None]:
    start = time.monotonic()
    try:
        call()
    except Exception as exc:
        return time.monotonic() - start, exc
    return time.monotonic() - start, None


@pytest.mark.parametrize(
    "reply",
    [
        Reply(body=b'{"workers": []}' * 20, drip_seconds=0.2),
        Reply(body=b'{"workers": []}', drip_seconds=0.3, drip_headers=True),
        Reply(hang=True),
    ],
    ids=["dripping-body", "dripping-headers", "hanging"],
)
def test_a_slow_server_cannot_hold_a_call_past_its_deadline(fake_http: Callable[..., FakeHTTP], reply: Reply) -> None:
    fake = fake_http({("GET", "/workers"): reply})
    elapsed, error = timed(lambda: request("GET", f"{fake.url}/workers", deadline_seconds=1.5))
    assert isinstance(error, CallFailed) and error.timed_out
    assert elapsed < 1.5 + SLACK
    assert "GET http://127.0.0.1" in str(error) and "/workers" in str(error)


def test_a_body_over_the_limit_is_refused_and_not_quoted(fake_http: Callable[..., FakeHTTP]) -> None:
    fake = fake_http({("GET", "/big"): Reply(body=b"SECRET" * 1000)})
    with pytest.raises(CallFailed, match="larger than 4096 bytes") as caught:
        request("GET", f"{fake.url}/big", deadline_seconds=5, max_bytes=4096)
    assert "SECRET" not in str(caught.value)


def test_a_complete_answer_reads_as_a_normal_response(fake_http: Callable[..., FakeHTTP]) -> None:
    fake = fake_http({("POST", "/workers"): Reply.json({"ok": True}, status=202)})
    response = request("POST", f"{fake.url}/workers", deadline_seconds=5, json_body={"url": "u"})
    assert (response.status, response.json()) == (202, {"ok": True})
    assert fake.requests[0].body == b'{"url": "u"}'


def test_a_refused_connection_says_so_without_waiting() -> None:
    elapsed, error = timed(lambda: request("GET", "http://127.0.0.1:9/x", deadline_seconds=5))
    assert isinstance(error, CallFailed) and error.not_connected and "connection refused" in str(error)
    assert elapsed < 5


def test_a_compressed_answer_is_decoded_and_its_decoded_size_is_limited(fake_http: Callable[..., FakeHTTP]) -> None:
    """Prometheus gzips its answers: the body must read as `.json()` would; a small gzip that inflates to more than
    the limit (a zip bomb) is refused like a large body."""
    fake = fake_http({
        ("GET", "/small"): Reply(body=gzip.compress(b'{"ok": true}'), content_encoding="gzip"),
        ("GET", "/bomb"): Reply(body=gzip.compress(b"0" * (8 << 20)), content_encoding="gzip"),
    })  # fmt: skip
    assert request("GET", f"{fake.url}/small", deadline_seconds=5).json() == {"ok": True}
    with pytest.raises(CallFailed, match="larger than"):
        request("GET", f"{fake.url}/bomb", deadline_seconds=5)


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
@pytest.mark.parametrize("method", ["GET", "POST", "DELETE"])
def test_a_redirect_is_an_error_naming_the_endpoint_and_nothing_reaches_its_target(
    fake_http: Callable[..., FakeHTTP], status: int, method: str
) -> None:
    target = fake_http({(method, "*"): Reply.json({"reached": True})})
    port = target.url.rsplit(":", 1)[1]
    tenant = fake_http({(method, "/x"): Reply.redirect(status, f"{target.url}/stolen?k=v")})
    with pytest.raises(CallFailed) as caught:
        request(method, f"{tenant.url}/x", deadline_seconds=5, headers={"Authorization": "Bearer k"},
                json_body={"api_key": "k"} if method == "POST" else None)  # fmt: skip
    message = str(caught.value)
    assert message == f"{method} {tenant.url}/x: HTTP {status}, a redirect, not followed"
    assert port not in message and "stolen" not in message
    assert len(tenant.requests) == 1 and target.requests == []


def test_nothing_per_call_holds_a_thread(fake_http: Callable[..., FakeHTTP]) -> None:
    """Twenty calls, several at once from several threads, share the one loop thread: no thread is left behind."""
    fake = fake_http({("GET", "/ok"): Reply.json({"ok": True})})
    request("GET", f"{fake.url}/ok", deadline_seconds=5)  # the loop thread exists from here on
    before = set(threading.enumerate())
    callers = [threading.Thread(target=request, args=("GET", f"{fake.url}/ok"), kwargs={"deadline_seconds": 5})
               for _ in range(20)]  # fmt: skip
    for caller in callers:
        caller.start()
    for caller in callers:
        caller.join(10)
    # No new thread of the client's (others' may have ended meanwhile). The fake server's own per-connection handler
    # threads are left out: one serves a pooled keep-alive connection until the client closes it, and may still be
    # running when the calls have returned.
    new = {t for t in set(threading.enumerate()) - before if "process_request_thread" not in t.name}
    assert new == set()
    assert len(fake.requests) == 21
    assert [t.name for t in threading.enumerate()].count("http-calls") == 1


def test_cookies_a_server_sets_are_never_sent_back(fake_http: Callable[..., FakeHTTP]) -> None:
    """One session serves every tenant's servers: a cookie one of them sets must not travel with a later call."""
    fake = fake_http({("GET", "*"): Reply(body=b"{}", headers=(("Set-Cookie", "session=tenant-a; Path=/"),))})
    request("GET", f"{fake.url}/one", deadline_seconds=5)
    request("GET", f"{fake.url}/two", deadline_seconds=5)
    assert [r.headers.get("cookie") for r in fake.requests] == [None, None]


def test_the_sync_call_refuses_to_run_on_its_own_loop() -> None:
    """A coroutine on the loop thread that called `request` would wait on itself forever: it is refused."""
    loop = httpcall._LOOP.loop()

    async def inside() -> None:
        request("GET", "http://127.0.0.1:9/x", deadline_seconds=1)

    future = asyncio.run_coroutine_threadsafe(inside(), loop)
    with pytest.raises(RuntimeError, match="its own loop"):
        future.result(timeout=5)
