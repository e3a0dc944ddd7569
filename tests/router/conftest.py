from collections.abc import Callable, Iterator

import pytest

from .fakehttp import FakeHTTP, Reply, start


@pytest.fixture
def fake_http() -> Iterator[Callable[[dict[tuple[str, str], Reply]], FakeHTTP]]:
    """Start scripted servers; all stop (and every held or dripping answer ends) when the test ends."""
    servers = []

    def make(routes: dict[tuple[str, str], Reply]) -> FakeHTTP:
        fake, server = start(FakeHTTP(routes=dict(routes)))
        servers.append((fake, server))
        return fake

    yield make
    for fake, server in servers:
        fake.stopping.set()
        server.shutdown()
        server.server_close()
