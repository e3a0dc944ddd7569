"""Every HTTP request the operator sends (to a router, a worker or a Prometheus) goes through `request`: it ends by a
total deadline, reads at most `MAX_BODY_BYTES`, and never follows a redirect.

Why these three:

- **Deadline.** A server that drips one byte a second must not hold a call, or the pass that made it, for longer
  than the call's budget: aiohttp's `ClientTimeout(total=...)` bounds the whole call (connect, headers and body),
  and `asyncio.timeout` around it is the guard of last resort.
- **Body limit.** The body is read in chunks, after decompression (a small gzip that inflates to gigabytes is
  refused like a large body).
- **No redirects.** The servers are the tenant's (the images are theirs): a `307 Location: http://anything` would
  make the operator re-send its request, with the workers' API key in a registration body, to a target the tenant
  chose, and write that target's answer into status (a blind SSRF and a port-scan oracle). Any 3xx answer is a
  `CallFailed` that names the endpoint that answered it, never the `Location`.

Errors say what failed (method, `scheme://host:port/path`, why) and never what the server said: a body or a header
can carry anything, and these messages end up in status conditions and events that other people read.

The reconcile, autoscaling and doctor passes are blocking code in the shared worker pool, and the CLI is sync. They
call `request`, which hands the coroutine to one process-wide event-loop thread (started on first use) and waits for
it; nothing per call or per CR holds a thread. That loop keeps one aiohttp session, whose connector reuses idle
connections (at most `_CONNECTIONS_PER_HOST` per target, `_CONNECTIONS` in all), stores no cookies (a tenant's
server must not set what the operator sends to another), and ignores proxy variables and `.netrc` (`trust_env`
off: no ambient credential reaches a tenant's server).
"""

import asyncio
import atexit
import base64
import concurrent.futures
import contextlib
import errno
import functools
import json
import ssl
import threading
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

import aiohttp

from .keepalive import KeepaliveEventLoop

MAX_BODY_BYTES = 1 << 20
"""Nothing the operator reads (a worker list, a load report, a PromQL answer) comes near this."""
CONNECT_TIMEOUT_SECONDS = 3.0
_CHUNK_BYTES = 64 * 1024
_CONNECTIONS = 100
_CONNECTIONS_PER_HOST = 8
"""Above the pool's default 8 threads: a call waits for a connection only when many passes talk to one target."""
_IDLE_SECONDS = 15.0
"""An idle pooled connection is closed after this (a router's next pass reuses it; a gone pod's is dropped)."""
_SYNC_SLACK_SECONDS = 2.0
"""How much longer a sync caller waits for the loop than the call's own deadline before giving up on it."""

T = TypeVar("T")


class CallFailed(Exception):
    """A bounded call that failed; its message is safe to show in status (no response content).

    `not_connected`: no connection could be opened (refused, no route): the server got nothing of the request.
    `timed_out`: the deadline ended the call."""

    def __init__(self, message: str, *, not_connected: bool = False, timed_out: bool = False) -> None:
        super().__init__(message)
        self.not_connected = not_connected
        self.timed_out = timed_out


@dataclass(frozen=True)
class Response:
    """A complete answer: its status (never a 3xx) and its whole body."""

    status: int
    content: bytes

    def json(self) -> Any:
        return json.loads(self.content)


def describe(method: str, url: str) -> str:
    """`METHOD scheme://host:port/path`: no user info (a password in a URL), no query, no fragment."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host
    try:
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        port = ""
    return f"{method} {parts.scheme}://{host}{port}{parts.path or '/'}"


@functools.lru_cache(maxsize=32)
def _ca_context(cafile: str) -> ssl.SSLContext:
    """A verifying context for a CA bundle file; the file's name is its content's hash (`credentials.ca_file`), so
    caching by path never serves a rotated CA's old context."""
    return ssl.create_default_context(cafile=cafile)


def _tls(verify: bool | str) -> ssl.SSLContext | bool:
    """aiohttp's `ssl=`: True (the system's CAs), False (no verification) or a context for a CA bundle file."""
    if isinstance(verify, str):
        return _ca_context(verify)
    return verify


def _basic(username: str, password: str) -> dict[str, str]:
    """The HTTP basic auth header (RFC 7617): latin-1 where the pair fits, as `requests` sent it, else UTF-8."""
    pair = f"{username}:{password}"
    try:
        encoded = pair.encode("latin-1")
    except UnicodeEncodeError:
        encoded = pair.encode()
    return {"Authorization": "Basic " + base64.b64encode(encoded).decode("ascii")}


async def request_async(
    session: aiohttp.ClientSession,
    method: str,
    url: str,
    *,
    deadline_seconds: float,
    headers: Mapping[str, str] | None = None,
    json_body: Any = None,
    params: Mapping[str, str] | None = None,
    basic_auth: tuple[str, str] | None = None,
    verify: bool | str = True,
    max_bytes: int = MAX_BODY_BYTES,
) -> Response:
    """The call itself, on `session`'s loop; see `request`."""
    what = describe(method, url)
    timeout = aiohttp.ClientTimeout(total=deadline_seconds, connect=min(CONNECT_TIMEOUT_SECONDS, deadline_seconds))
    answered: int | None = None  # the status, once the headers are in
    try:
        async with asyncio.timeout(deadline_seconds):
            async with session.request(
                method,
                url,
                headers={**(headers or {}), **(_basic(*basic_auth) if basic_auth else {})},
                json=json_body,
                params=dict(params or {}),
                ssl=_tls(verify),
                allow_redirects=False,
                timeout=timeout,
            ) as response:
                answered = response.status
                return await _read(response, what, max_bytes)
    except (TimeoutError, aiohttp.ClientError) as exc:
        raise _failure(exc, what, answered, deadline_seconds) from exc
    except (ValueError, TypeError) as exc:  # a header value aiohttp refuses, a body that is not JSON-serialisable
        raise CallFailed(f"{what}: request not sent ({type(exc).__name__})") from exc


async def _read(response: aiohttp.ClientResponse, what: str, max_bytes: int) -> Response:
    """The answer, read up to `max_bytes`; a redirect is refused unread (its connection is not reused)."""
    if 300 <= response.status < 400:
        response.close()
        raise CallFailed(f"{what}: HTTP {response.status}, a redirect, not followed")
    body = bytearray()
    async for chunk in response.content.iter_chunked(_CHUNK_BYTES):
        body += chunk
        if len(body) > max_bytes:
            response.close()
            raise CallFailed(f"{what}: HTTP {response.status}, body larger than {max_bytes} bytes")
    return Response(response.status, bytes(body))


def _failure(exc: BaseException, what: str, answered: int | None, deadline_seconds: float) -> CallFailed:
    """What a failed call says: the endpoint and the kind of failure, never what the other side sent."""
    if isinstance(exc, TimeoutError):  # asyncio's, and aiohttp's connect and read timeouts (its subclasses)
        late = "no answer" if answered is None else f"HTTP {answered}, body not complete"
        return CallFailed(f"{what}: {late} within {deadline_seconds:g}s", timed_out=True)
    if isinstance(exc, aiohttp.ClientSSLError):  # before ClientConnectorError, its parent: the TLS handshake failed
        return CallFailed(f"{what}: TLS error")
    if isinstance(exc, aiohttp.ClientConnectorError):
        refused = exc.os_error.errno == errno.ECONNREFUSED
        return CallFailed(f"{what}: {'connection refused' if refused else 'connection failed'}", not_connected=True)
    if isinstance(exc, aiohttp.ClientPayloadError | aiohttp.ClientResponseError):  # a broken or unparsable answer
        status = f"HTTP {answered}, " if answered is not None else ""
        return CallFailed(f"{what}: {status}answer unreadable ({type(exc).__name__})")
    return CallFailed(f"{what}: {type(exc).__name__}")  # a reset connection, an invalid URL, ...


class _LoopThread:
    """The one thread (and event loop) for every sync caller in the process, started on first use, with the one
    session whose connection pool every call shares."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._session: aiohttp.ClientSession | None = None

    def loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None or self._thread is None or not self._thread.is_alive():
                loop = KeepaliveEventLoop()
                thread = threading.Thread(target=loop.run_forever, name="http-calls", daemon=True)
                thread.start()
                self._loop, self._thread, self._session = loop, thread, None
            return self._loop

    def in_loop_thread(self) -> bool:
        return self._thread is threading.current_thread()

    async def session(self) -> aiohttp.ClientSession:
        """The shared session, made on the loop it belongs to (only ever called there, so no lock is needed)."""
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(
                limit=_CONNECTIONS, limit_per_host=_CONNECTIONS_PER_HOST, keepalive_timeout=_IDLE_SECONDS
            )
            self._session = aiohttp.ClientSession(
                connector=connector, cookie_jar=aiohttp.DummyCookieJar(), trust_env=False
            )
        return self._session

    def run(self, coroutine: Coroutine[Any, Any, T], wait_seconds: float) -> T:
        if self.in_loop_thread():
            coroutine.close()
            raise RuntimeError("httpcall.request called on its own loop: await request_async instead")
        future = asyncio.run_coroutine_threadsafe(coroutine, self.loop())
        try:
            return future.result(timeout=wait_seconds)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise

    def close(self) -> None:
        """Close the session and stop the loop (at exit; a later call starts a new one)."""
        with self._lock:
            loop, thread, session = self._loop, self._thread, self._session
            self._loop = self._thread = self._session = None
        if loop is None or thread is None or not thread.is_alive():
            return
        if session is not None:
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(session.close(), loop).result(timeout=2.0)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=2.0)


_LOOP = _LoopThread()
atexit.register(_LOOP.close)


def request(
    method: str,
    url: str,
    *,
    deadline_seconds: float,
    headers: Mapping[str, str] | None = None,
    json_body: Any = None,
    params: Mapping[str, str] | None = None,
    basic_auth: tuple[str, str] | None = None,
    verify: bool | str = True,
    max_bytes: int = MAX_BODY_BYTES,
) -> Response:
    """One call, finished (status and the whole body) within `deadline_seconds`, or `CallFailed`; any 3xx is a
    `CallFailed` (nothing is sent to its `Location`). `verify`: True, False or the path of a CA bundle. For blocking
    callers (a pass in the worker pool, the CLI); never call it on the loop thread itself."""

    async def call() -> Response:
        session = await _LOOP.session()
        return await request_async(
            session, method, url, deadline_seconds=deadline_seconds, headers=headers, json_body=json_body,
            params=params, basic_auth=basic_auth, verify=verify, max_bytes=max_bytes,
        )  # fmt: skip

    try:
        return _LOOP.run(call(), deadline_seconds + _SYNC_SLACK_SECONDS)
    except concurrent.futures.TimeoutError as exc:  # the loop itself was too busy: the call is cancelled
        raise CallFailed(f"{describe(method, url)}: no answer within {deadline_seconds:g}s", timed_out=True) from exc
