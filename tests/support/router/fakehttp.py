"""A scripted HTTP server on 127.0.0.1 for client tests: each (method, path) answers a `Reply`, possibly garbage,
a hang, or a drip of one byte at a time. It records every request it received."""

import json
import socketserver
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Reply:
    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"
    drip_seconds: float = 0.0
    """Pause before each byte of the body (or of the whole answer, with `drip_headers`)."""
    drip_headers: bool = False
    hang: bool = False
    """Read the request, then answer nothing until the server stops."""
    content_encoding: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    """More header lines (a redirect's Location)."""

    @staticmethod
    def redirect(status: int, location: str) -> "Reply":
        return Reply(status=status, body=b'{"moved": true}', headers=(("Location", location),))

    @staticmethod
    def json(payload: Any, status: int = 200) -> "Reply":
        return Reply(status=status, body=json.dumps(payload).encode())


@dataclass
class Recorded:
    method: str
    path: str
    body: bytes
    authorization: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    """Every header line, by its name in lower case."""
    query: str = ""
    """What followed `?` in the request target."""


@dataclass
class FakeHTTP:
    routes: dict[tuple[str, str], Reply] = field(default_factory=dict)
    requests: list[Recorded] = field(default_factory=list)
    stopping: threading.Event = field(default_factory=threading.Event)
    url: str = ""

    def reply(self, method: str, path: str) -> Reply:
        return self.routes.get((method, path)) or self.routes.get((method, "*")) or Reply(404, b"{}")


class _Handler(socketserver.StreamRequestHandler):
    server: "_Server"

    def handle(self) -> None:
        fake = self.server.fake
        request_line = self.rfile.readline().decode("latin-1").split()
        if len(request_line) < 2:
            return
        length, authorization, headers = 0, None, {}
        while (line := self.rfile.readline()) not in (b"\r\n", b"\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
            if name.strip().lower() == "content-length":
                length = int(value.strip())
            elif name.strip().lower() == "authorization":
                authorization = value.strip()
        method, (path, _, query) = request_line[0], request_line[1].partition("?")
        body = self.rfile.read(length) if length else b""
        fake.requests.append(Recorded(method, path, body, authorization, headers, query))
        reply = fake.reply(method, path)
        if reply.hang:
            fake.stopping.wait(30)
            return
        head = (
            f"HTTP/1.1 {reply.status} X\r\nContent-Type: {reply.content_type}\r\n"
            + (f"Content-Encoding: {reply.content_encoding}\r\n" if reply.content_encoding else "")
            + "".join(f"{name}: {value}\r\n" for name, value in reply.headers)
            + f"Content-Length: {len(reply.body)}\r\nConnection: close\r\n\r\n"
        ).encode()
        try:
            if reply.drip_seconds and reply.drip_headers:
                self._drip(head + reply.body, reply.drip_seconds)
                return
            self.wfile.write(head)
            self.wfile.flush()
            if reply.drip_seconds:
                self._drip(reply.body, reply.drip_seconds)
            else:
                self.wfile.write(reply.body)
        except OSError:  # the client gave up, which is what the deadline tests want
            pass

    def _drip(self, data: bytes, pause: float) -> None:
        for i in range(len(data)):
            if self.server.fake.stopping.wait(pause):  # paces the answer; returns at once when the test ends
                return
            self.wfile.write(data[i : i + 1])
            self.wfile.flush()


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    fake: FakeHTTP


def start(fake: FakeHTTP, host: str = "127.0.0.1", port: int = 0) -> tuple[FakeHTTP, _Server]:
    server = _Server((host, port), _Handler)
    server.fake = fake
    fake.url = f"http://{host}:{server.server_address[1]}"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return fake, server


@contextmanager
def serving(routes: dict[tuple[str, str], Reply], host: str = "127.0.0.1", port: int = 0) -> Iterator[FakeHTTP]:
    """A started server (on another loopback address and a given port where asked); on exit every held or dripping
    answer ends and the server stops."""
    fake, server = start(FakeHTTP(routes=dict(routes)), host, port)
    try:
        yield fake
    finally:
        fake.stopping.set()
        server.shutdown()
        server.server_close()
