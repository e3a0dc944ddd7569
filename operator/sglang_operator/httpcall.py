"""Bounded HTTP calls: every request the operator sends to a router, a worker or Prometheus ends by a total deadline
and reads at most `MAX_BODY_BYTES`.

`requests` timeouts bound each socket read, not the call: a server that drips one byte a second keeps a "5 s" call
alive for as long as it likes, in the headers or in the body. Two things close that gap here:

- the body is read with `stream=True` in chunks (`read1`, which returns what has arrived instead of waiting for a
  full chunk) against a monotonic deadline and a size limit;
- one process-wide watchdog thread shuts the call's socket down when its deadline passes, which also ends a read
  that is blocked in the status line or the headers. The socket is handed to the watchdog by the connection class
  of `DeadlineAdapter`, the only way `requests` lets a caller near it before the headers are read.

Errors say what failed (method, path, why) and never what the server said: a body can carry anything, and these
messages end up in status conditions and events that other people read.
"""

import contextlib
import heapq
import itertools
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import requests
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.exceptions import NewConnectionError

MAX_BODY_BYTES = 1 << 20
"""Nothing the operator reads (a worker list, a load report, a PromQL answer) comes near this."""
CONNECT_TIMEOUT_SECONDS = 3.0
_CHUNK_BYTES = 64 * 1024


class CallFailed(requests.RequestException):
    """A bounded call that failed; its message is safe to show in status (no response content).

    `not_connected`: no connection could be opened (refused, no route): the server got nothing of the request.
    `timed_out`: the deadline ended the call."""

    not_connected: bool = False
    timed_out: bool = False


def _late(message: str) -> CallFailed:
    failure = CallFailed(message)
    failure.timed_out = True
    return failure


@dataclass
class _Guard:
    """One call under the watchdog: the socket it reads from, once the connection has one."""

    deadline: float
    sock: socket.socket | None = None
    expired: bool = False
    done: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    def expire(self) -> None:
        with self.lock:
            if self.done:
                return
            self.expired = True
            if self.sock is not None:
                # The plain socket's shutdown, also under TLS: it wakes the blocked read with an EOF.
                with contextlib.suppress(OSError):
                    socket.socket.shutdown(self.sock, socket.SHUT_RDWR)

    def attach(self, sock: socket.socket | None) -> None:
        with self.lock:
            self.sock = sock
        if self.expired and sock is not None:
            self.expire()


class _Watchdog:
    """A single thread for the whole process (nothing per call or per object holds one)."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, _Guard]] = []
        self._order = itertools.count()
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None

    def watch(self, guard: _Guard) -> None:
        with self._wake:
            heapq.heappush(self._heap, (guard.deadline, next(self._order), guard))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="http-deadlines", daemon=True)
                self._thread.start()
            self._wake.notify()

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._heap or self._heap[0][0] > time.monotonic():
                    self._wake.wait(None if not self._heap else self._heap[0][0] - time.monotonic())
                _, _, guard = heapq.heappop(self._heap)
            guard.expire()


_watchdog = _Watchdog()
_current = threading.local()


def _current_guard() -> _Guard | None:
    guard: _Guard | None = getattr(_current, "guard", None)
    return guard


class _GuardedHTTPConnection(HTTPConnection):
    def getresponse(self) -> Any:
        guard = _current_guard()
        if guard is not None:
            guard.attach(self.sock)
        return super().getresponse()


class _GuardedHTTPSConnection(HTTPSConnection):
    def getresponse(self) -> Any:
        guard = _current_guard()
        if guard is not None:
            guard.attach(self.sock)
        return super().getresponse()


class _GuardedHTTPPool(HTTPConnectionPool):
    ConnectionCls = _GuardedHTTPConnection


class _GuardedHTTPSPool(HTTPSConnectionPool):
    ConnectionCls = _GuardedHTTPSConnection


class DeadlineAdapter(HTTPAdapter):
    """An adapter whose connections hand their socket to the watchdog of the call in progress."""

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = {"http": _GuardedHTTPPool, "https": _GuardedHTTPSPool}


def _describe(method: str, url: str) -> str:
    """`METHOD scheme://host:port/path`: no user info (a password in a URL), no query."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host
    try:
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        port = ""
    return f"{method} {parts.scheme}://{host}{port}{parts.path or '/'}"


@contextmanager
def _guarded(deadline: float) -> Iterator[_Guard]:
    guard = _Guard(deadline)
    previous = _current_guard()
    _current.guard = guard
    _watchdog.watch(guard)
    try:
        yield guard
    finally:
        with guard.lock:
            guard.done = True
        _current.guard = previous


def bounded_request(
    session: "requests.Session | _Unbounded",
    method: str,
    url: str,
    *,
    deadline_seconds: float,
    max_bytes: int = MAX_BODY_BYTES,
    **kwargs: Any,
) -> requests.Response:
    """`session.request`, finished (status, headers and the whole body) within `deadline_seconds`, or CallFailed.

    The response comes back fully read, so `.json()` and `.content` work as usual. `timeout` in `kwargs` is
    ignored: the deadline decides.
    """
    kwargs.pop("timeout", None)
    kwargs.pop("stream", None)
    what = _describe(method, url)
    deadline = time.monotonic() + deadline_seconds
    with _guarded(deadline) as guard:
        try:
            response = session.request(
                method, url, stream=True, timeout=(min(CONNECT_TIMEOUT_SECONDS, deadline_seconds), deadline_seconds),
                **kwargs,
            )  # fmt: skip
        except requests.RequestException as exc:
            if guard.expired:
                raise _late(f"{what}: no answer within {deadline_seconds:g}s") from exc
            failure = CallFailed(f"{what}: {_reason(exc)}")
            failure.not_connected = _not_connected(exc)
            failure.timed_out = isinstance(exc, requests.Timeout)
            raise failure from exc
        try:
            body = bytearray()
            while True:
                if time.monotonic() >= deadline or guard.expired:
                    raise _late(f"{what}: HTTP {response.status_code}, body not complete within {deadline_seconds:g}s")
                chunk = response.raw.read1(_CHUNK_BYTES, decode_content=True)  # gzip: what .json() would read
                if not chunk:
                    break
                body += chunk
                if len(body) > max_bytes:
                    raise CallFailed(f"{what}: HTTP {response.status_code}, body larger than {max_bytes} bytes")
            if guard.expired:  # the watchdog's shutdown reads as an early end of the body
                raise _late(f"{what}: HTTP {response.status_code}, body not complete within {deadline_seconds:g}s")
        except CallFailed:
            response.close()
            raise
        except Exception as exc:  # urllib3's protocol and decoding errors, a reset connection
            response.close()
            if guard.expired:
                raise _late(f"{what}: body not complete within {deadline_seconds:g}s") from exc
            raise CallFailed(f"{what}: HTTP {response.status_code}, body unreadable ({type(exc).__name__})") from exc
    response._content = bytes(body)
    response._content_consumed = True
    response.close()
    return response


def _not_connected(exc: requests.RequestException) -> bool:
    """requests wraps a failed connect as ConnectionError(MaxRetryError(reason=NewConnectionError))."""
    inner = exc.args[0] if exc.args else None
    return isinstance(exc, requests.ConnectionError) and isinstance(getattr(inner, "reason", None), NewConnectionError)


def _reason(exc: requests.RequestException) -> str:
    """Why a request failed, in our words: the exception's text can quote a proxy's or a server's answer."""
    if isinstance(exc, requests.Timeout):
        return "timed out"
    if isinstance(exc, requests.exceptions.SSLError):
        return "TLS error"
    if isinstance(exc, requests.ConnectionError):
        return "connection refused" if _not_connected(exc) else "connection failed"
    return type(exc).__name__


class BoundedSession(requests.Session):
    """A Session whose every request is a `bounded_request`, for clients such as prometheus-api-client that call
    `session.request` themselves. Adapters mounted later (that client mounts its own, for retries) are replaced by a
    `DeadlineAdapter` with the same retry settings, so the watchdog sees every connection. A smaller `timeout` a
    caller passes shortens the deadline; nothing lengthens it."""

    def __init__(self, deadline_seconds: float, max_bytes: int = MAX_BODY_BYTES) -> None:
        super().__init__()
        self.deadline_seconds = deadline_seconds
        self.max_bytes = max_bytes
        for prefix in ("https://", "http://"):
            self.mount(prefix, DeadlineAdapter())

    def mount(self, prefix: str, adapter: Any) -> None:
        if not isinstance(adapter, DeadlineAdapter):
            adapter = DeadlineAdapter(max_retries=getattr(adapter, "max_retries", 0))
        super().mount(prefix, adapter)

    def request(self, method: Any, url: Any, *args: Any, **kwargs: Any) -> requests.Response:
        timeout = kwargs.pop("timeout", None)
        deadline = self.deadline_seconds
        if isinstance(timeout, int | float) and not isinstance(timeout, bool) and timeout > 0:
            deadline = min(float(timeout), deadline)
        return bounded_request(
            _Unbounded(self), str(method), str(url), deadline_seconds=deadline, max_bytes=self.max_bytes, **kwargs
        )


class _Unbounded:
    """The session's plain `request`, which `bounded_request` calls (the override above would call itself)."""

    def __init__(self, session: requests.Session) -> None:
        self.session = session

    def request(self, method: str, url: str, **kwargs: Any) -> requests.Response:
        return requests.Session.request(self.session, method, url, **kwargs)


def new_session() -> requests.Session:
    """A Session whose connections the watchdog can end (use it with `bounded_request`)."""
    session = requests.Session()
    for prefix in ("https://", "http://"):
        session.mount(prefix, DeadlineAdapter())
    return session
