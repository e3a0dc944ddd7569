"""Waking a CR's loop: the watch events (`watches`) set a wake-up; the loop (`controller.loop`) waits on it.

Each running loop registers one `Wakeup`; an event of its CR, its pods or its scale targets sets it with a
`Priority` (a pod that has just turned Ready asks for registration's). Everything here runs on the event loop: no
lock.
"""

import asyncio
import contextlib

from .workqueue import Priority


class Wakeup:
    """A CR loop's wake-up: set by events, with the highest priority asked for since the loop last took it."""

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.registration = asyncio.Event()
        """Set with `event` when a registration was asked for: it takes back the loop's pass still queued."""
        self.priority = Priority.RESYNC

    def set(self, priority: Priority) -> None:
        self.priority = min(self.priority, priority)
        self.event.set()
        if priority == Priority.REGISTRATION:
            self.registration.set()

    def take(self) -> Priority:
        """The priority asked for since the last take (RESYNC if none); clears the wake-up."""
        priority, self.priority = self.priority, Priority.RESYNC
        self.event.clear()
        self.registration.clear()
        return priority


_wakeups: dict[tuple[str, str], Wakeup] = {}
_seen: dict[tuple[str, str], dict[str, tuple[int, bool]]] = {}
"""Per running loop, its pods by UID as last seen: what a pass reads of each (`state.pod_signature`) and whether it
was serving. An event that changes neither wakes nothing; one that makes a pod serving is a pod that has just
turned Ready."""


def register(namespace: str, name: str) -> Wakeup:
    _seen.setdefault((namespace, name), {})
    return _wakeups.setdefault((namespace, name), Wakeup())


def unregister(namespace: str, name: str, wake: Wakeup) -> None:
    """The loop is gone (the CR was deleted, or the operator stops): its entries go too, so the maps hold running
    loops only. Only its own entry: a CR deleted and created again under the same name may have registered a new
    loop already."""
    if _wakeups.get((namespace, name)) is wake:
        del _wakeups[(namespace, name)]
        _seen.pop((namespace, name), None)


def wake(namespace: str, name: str, priority: Priority = Priority.EVENT) -> None:
    """Wake the CR's loop if it runs. Events never add entries: a pod of a deleted CR (or any pod carrying the
    label) must not grow the maps."""
    wakeup = _wakeups.get((namespace, name))
    if wakeup is not None:
        wakeup.set(priority)


def pod_priority(
    namespace: str, deployment: str, uid: str | None, signature: int | None, serving: bool
) -> Priority | None:
    """REGISTRATION when this event shows a worker or router pod newly serving; None when nothing a pass reads of
    the pod changed (no wake-up); else EVENT. `signature` None: the pod is gone. Remembers what it saw."""
    seen = _seen.get((namespace, deployment))
    if seen is None or not uid:
        return Priority.EVENT
    if signature is None:
        seen.pop(uid, None)
        return Priority.EVENT
    previous = seen.get(uid)
    seen[uid] = (signature, serving)
    if serving and (previous is None or not previous[1]):
        return Priority.REGISTRATION
    if previous is not None and previous[0] == signature:
        return None
    return Priority.EVENT


async def sleep_or_wake(wakeup: Wakeup, seconds: float) -> None:
    """Wait `seconds`, or less when the loop is woken (the wake-up keeps the priority asked for). The supervisor
    cancels the coroutine to stop it."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(wakeup.event.wait(), timeout=seconds)
