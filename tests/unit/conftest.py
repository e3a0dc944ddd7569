"""The unit tier: pure tests. A test here that opens a network socket or starts a process fails, so the tier stays
what its name says (such a test belongs in tests/integration). Unix sockets stay allowed: asyncio's event loop
makes a socket pair to wake itself."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest


class NotAUnitTest(AssertionError):
    """Raised where a unit test reached for the network or a process."""


def _refuse(what: str) -> None:
    raise NotAUnitTest(f"a unit test {what}: move it to tests/integration (docs/testing.md)")


@pytest.fixture(autouse=True)
def _no_sockets_or_processes(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    def guarded(name: str) -> Any:
        original = getattr(socket.socket, name)

        def call(self: socket.socket, *args: Any, **kwargs: Any) -> Any:
            if self.family != socket.AF_UNIX:
                _refuse(f"called socket.{name}{args[:1]!r}")
            return original(self, *args, **kwargs)

        return call

    for name in ("connect", "connect_ex", "bind"):
        monkeypatch.setattr(socket.socket, name, guarded(name))

    def popen(self: subprocess.Popen[Any], args: Any, *rest: Any, **kwargs: Any) -> None:
        _refuse(f"started a process ({args!r})")

    monkeypatch.setattr(subprocess.Popen, "__init__", popen)
    yield
