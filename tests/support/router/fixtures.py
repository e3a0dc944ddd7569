from collections.abc import Callable, Iterator
from contextlib import ExitStack

import pytest

from tests.support.router.fakehttp import FakeHTTP, Reply, serving


@pytest.fixture
def fake_http() -> Iterator[Callable[[dict[tuple[str, str], Reply]], FakeHTTP]]:
    """Start scripted servers; all stop (and every held or dripping answer ends) when the test ends."""
    with ExitStack() as stack:
        yield lambda routes: stack.enter_context(serving(routes))
