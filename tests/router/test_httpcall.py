"""Bounded calls: a total deadline whatever the server does, a body size limit, and messages without the body."""

import gzip
import time
from collections.abc import Callable

import pytest

from sglang_operator.httpcall import BoundedSession, CallFailed, bounded_request, new_session

from .fakehttp import FakeHTTP, Reply

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
    elapsed, error = timed(lambda: bounded_request(new_session(), "GET", f"{fake.url}/workers", deadline_seconds=1.5))
    assert isinstance(error, CallFailed)
    assert elapsed < 1.5 + SLACK
    assert "GET http://127.0.0.1" in str(error) and "/workers" in str(error)


def test_a_body_over_the_limit_is_refused_and_not_quoted(fake_http: Callable[..., FakeHTTP]) -> None:
    fake = fake_http({("GET", "/big"): Reply(body=b"SECRET" * 1000)})
    with pytest.raises(CallFailed, match="larger than 4096 bytes") as caught:
        bounded_request(new_session(), "GET", f"{fake.url}/big", deadline_seconds=5, max_bytes=4096)
    assert "SECRET" not in str(caught.value)


def test_a_complete_answer_reads_as_a_normal_response(fake_http: Callable[..., FakeHTTP]) -> None:
    fake = fake_http({("POST", "/workers"): Reply.json({"ok": True}, status=202)})
    response = bounded_request(new_session(), "POST", f"{fake.url}/workers", deadline_seconds=5, json={"url": "u"})
    assert (response.status_code, response.json()) == (202, {"ok": True})
    assert fake.requests[0].body == b'{"url": "u"}'


def test_a_refused_connection_says_so_without_waiting() -> None:
    elapsed, error = timed(lambda: bounded_request(new_session(), "GET", "http://127.0.0.1:9/x", deadline_seconds=5))
    assert isinstance(error, CallFailed) and error.not_connected and "connection refused" in str(error)
    assert elapsed < 5


def test_bounded_session_bounds_a_library_that_calls_session_request(fake_http: Callable[..., FakeHTTP]) -> None:
    fake = fake_http({("GET", "/api/v1/query"): Reply(body=b'{"status": "success"}' * 10, drip_seconds=0.2)})
    session = BoundedSession(deadline_seconds=1.0)
    elapsed, error = timed(lambda: session.request("GET", f"{fake.url}/api/v1/query", timeout=60))
    assert isinstance(error, CallFailed)
    assert elapsed < 1.0 + SLACK


def test_a_compressed_answer_is_decoded_and_its_decoded_size_is_limited(fake_http: Callable[..., FakeHTTP]) -> None:
    """Prometheus gzips its answers: the body must read as `.json()` would; a small gzip that inflates to more than
    the limit (a zip bomb) is refused like a large body."""
    fake = fake_http({
        ("GET", "/small"): Reply(body=gzip.compress(b'{"ok": true}'), content_encoding="gzip"),
        ("GET", "/bomb"): Reply(body=gzip.compress(b"0" * (8 << 20)), content_encoding="gzip"),
    })  # fmt: skip
    assert bounded_request(new_session(), "GET", f"{fake.url}/small", deadline_seconds=5).json() == {"ok": True}
    with pytest.raises(CallFailed, match="larger than"):
        bounded_request(new_session(), "GET", f"{fake.url}/bomb", deadline_seconds=5)
