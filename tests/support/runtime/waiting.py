"""A bounded wait for the async tests: poll a condition on the event loop, fail after a fixed time."""

import asyncio
from collections.abc import Callable


async def until(condition: Callable[[], bool], seconds: float = 5.0, interval: float = 0.01) -> None:
    """Return once `condition()` holds; raise AssertionError after `seconds` (a wait, never a sleep that hopes)."""
    for _ in range(int(seconds / interval)):
        if condition():
            return
        await asyncio.sleep(interval)
    raise AssertionError(f"condition not reached in {seconds:g} s")
