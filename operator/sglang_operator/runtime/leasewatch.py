"""A standby's view of the Lease from one watch, instead of a GET every retry period.

A standby looks at the Lease every `LOOK_SECONDS` to see whether the holder still renews: a GET each time would
cost 240 requests a minute that change nothing (at 2 s, 30: docs/scale.md). `WatchedLeases` keeps one watch on the
Lease and answers `read` from the last version it delivered while the watch is up, and from the API server (a GET,
at most one per `RETRY_SECONDS`, the last one's answer in between) while it is not, so the elector and its
decisions (`leader.standby_verdict`) are unchanged: they depend only on the version read and on when it was first
seen, and the watch delivers a new version no later than the next GET would have shown it.

The API server stays the arbiter: every write still names the version it was decided on. A write it refuses (409,
another writer) may mean the watch is behind, so the next read is a GET. A watch that stalls without closing makes
the standby see an old version and try to take the Lease over it, which the API server refuses: a stale cache costs
a request, never a second leader.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Final

from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

from .leader import TRANSIENT_ERRORS, LeaseClient, LeaseRecord, Leases, record_from_lease

log = logging.getLogger(__name__)

WATCH_SECONDS: Final = 1800
"""How long the API server keeps one watch open; the watch is then opened again after one GET."""
RETRY_SECONDS: Final = 2.0
"""After a failed GET or watch, the next attempt waits this long; while the watch is down, reads GET at most this
often (a later first sight of a renewal only makes a takeover later, never earlier)."""
LOOK_SECONDS: Final = 0.25
"""How often the standby looks at its watched Lease: it first sees a renewal at most this late, so it takes over at
most a lease duration and this long after the holder's last renewal (13.25 s)."""

LeaseEvents = Callable[[str | None], Iterable[tuple[str, Mapping[str, Any]]]]
"""Opens a watch on the Lease from a resourceVersion (None: from now) and yields (event type, object)."""


def lease_events(leases: LeaseClient) -> LeaseEvents:
    """The watch through the API server: one request per `WATCH_SECONDS`, whatever the renewals."""

    def events(resource_version: str | None) -> Iterator[tuple[str, Mapping[str, Any]]]:
        response = leases.coordination.list_namespaced_lease(
            leases.namespace,
            field_selector=f"metadata.name={leases.name}",
            watch=True,
            resource_version=resource_version,
            timeout_seconds=WATCH_SECONDS,
            _preload_content=False,
            _request_timeout=(2.0, WATCH_SECONDS + 10),
        )
        try:
            for line in iter_resp_lines(response):
                event = json.loads(line)
                yield str(event.get("type")), event.get("object") or {}
        finally:
            response.close()

    return events


class WatchedLeases:
    """The `leader.Leases` calls, with `read` served from a watch while it is up (see the module's docstring).
    `start` runs the watch in a daemon thread; `stop` ends it (the holder needs no reads but after a conflict)."""

    def __init__(
        self,
        leases: Leases,
        events: LeaseEvents,
        retry_seconds: float = RETRY_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.leases, self.events, self.retry_seconds, self.clock = leases, events, retry_seconds, clock
        self._lock = threading.Lock()
        self._fresh = False  # the watch is up and `_record` is the last version it delivered
        self._record: LeaseRecord | None = None
        self._got: tuple[float, LeaseRecord | None] | None = None  # when the last read's GET was sent, its answer
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self.gets = 0  # reads that went to the API server (the tests count them)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._watch, name="lease-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._invalidate()

    def read(self) -> LeaseRecord | None:
        with self._lock:
            if self._fresh:
                return self._record
            if self._got is not None and self.clock() - self._got[0] < self.retry_seconds:
                return self._got[1]
        self.gets += 1
        sent = self.clock()
        record = self.leases.read()
        with self._lock:
            self._got = (sent, record)
        return record

    def create(self, spec: Mapping[str, Any]) -> LeaseRecord | None:
        return self._written(self.leases.create(spec))

    def replace(self, spec: Mapping[str, Any], resource_version: str) -> LeaseRecord | None:
        return self._written(self.leases.replace(spec, resource_version))

    def _written(self, record: LeaseRecord | None) -> LeaseRecord | None:
        if record is None:  # another writer won: this view may be behind; the watch catches up, reads GET till then
            with self._lock:
                self._fresh, self._got = False, None
        return record

    def _invalidate(self) -> None:
        with self._lock:
            self._fresh = False

    def _deliver(self, record: LeaseRecord | None) -> None:
        with self._lock:
            self._record, self._fresh = record, True

    def _watch(self) -> None:
        while not self._stopping.is_set():
            try:
                self.gets += 1
                current = self.leases.read()
                if self._stopping.is_set():
                    return
                self._deliver(current)
                self._follow(current.resource_version if current is not None else None)
                self._invalidate()  # the watch ended (its timeout): open the next one from a fresh GET
                continue
            except ApiException as exc:
                if exc.status in (401, 403):  # no right to list/watch Leases: read with GETs, as before, for good
                    log.warning("leader election: cannot watch the Lease (HTTP %s); reading it every retry period",
                                exc.status)  # fmt: skip
                    self._invalidate()
                    return
                log.info("leader election: the Lease watch failed (%s); reading it directly meanwhile", exc)
            except TRANSIENT_ERRORS as exc:
                log.info("leader election: the Lease watch failed (%s); reading it directly meanwhile", exc)
            except (ValueError, KeyError, TypeError) as exc:  # an event not shaped like a Lease
                log.warning("leader election: unexpected Lease watch event (%s); reading it directly meanwhile", exc)
            self._invalidate()
            self._stopping.wait(self.retry_seconds)

    def _follow(self, resource_version: str | None) -> None:
        """Apply events until the watch ends (its timeout, a 410 Gone, an error) or `stop`."""
        for kind, lease in self.events(resource_version):
            if self._stopping.is_set():
                return
            if kind in ("ADDED", "MODIFIED"):
                self._deliver(record_from_lease(lease))
            elif kind == "DELETED":
                self._deliver(None)
            elif kind == "ERROR":  # 410 Gone (the version is too old) and the like: start again from a GET
                return
