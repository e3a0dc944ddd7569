"""The standby's Lease view: reads come from the watch while it is up (no request), from a GET while it is not, and
after a refused write; the elector's takeover timing is unchanged."""

import queue
import threading
from collections.abc import Iterator, Mapping
from typing import Any

from kubernetes.client.exceptions import ApiException

from sglang_operator.runtime.leader import LeaderElector
from sglang_operator.runtime.leasetiming import Timing
from sglang_operator.runtime.leasewatch import LOOK_SECONDS, WatchedLeases
from tests.unit.runtime.test_leader import Clock, FakeLeases, sleeper

END = ("END", {})


class FakeWatch:
    """Watches opened by `WatchedLeases`: each takes the events put on `feed` until END (the server's timeout)."""

    def __init__(self) -> None:
        self.feed: queue.Queue[tuple[str, Mapping[str, Any]]] = queue.Queue()
        self.opened: list[str | None] = []
        self.consumed = threading.Semaphore(0)

    def __call__(self, resource_version: str | None) -> Iterator[tuple[str, Mapping[str, Any]]]:
        self.opened.append(resource_version)
        while True:
            event = self.feed.get(timeout=10)
            try:
                if event == END:
                    return
                yield event
            finally:
                self.consumed.release()

    def send(self, kind: str, version: int, holder: str = "a") -> None:
        self.feed.put((kind, lease(version, holder)))
        assert self.consumed.acquire(timeout=5)

    def end(self) -> None:
        self.feed.put(END)
        assert self.consumed.acquire(timeout=5)


def lease(version: int, holder: str) -> dict[str, Any]:
    return {
        "metadata": {"resourceVersion": str(version)},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": Timing().lease_seconds},
    }


def wait_until(condition: Any) -> None:
    done = threading.Event()
    for _ in range(500):
        if condition():
            return
        done.wait(0.01)
    raise AssertionError("condition not reached in 5 s")


def started(store: FakeLeases, watch: FakeWatch) -> WatchedLeases:
    leases = WatchedLeases(store, watch, retry_seconds=0.01)
    leases.start()
    wait_until(lambda: watch.opened)
    return leases


def test_reads_come_from_the_watch_while_it_is_up() -> None:
    store, watch = FakeLeases(), FakeWatch()
    store.create({"holderIdentity": "a", "leaseDurationSeconds": 10})
    leases = started(store, watch)
    assert watch.opened == ["1"] and leases.gets == 1  # one GET to start the watch from
    record = leases.read()
    assert record is not None and record.resource_version == "1"
    watch.send("MODIFIED", 7)
    for _ in range(100):  # a standby polling every retry period: no request
        record = leases.read()
    assert record is not None and record.resource_version == "7" and leases.gets == 1
    watch.send("DELETED", 8)
    assert leases.read() is None and leases.gets == 1
    leases.stop()
    record = leases.read()  # stopped: a GET, which shows the API server's Lease
    assert record is not None and record.resource_version == "1" and leases.gets == 2
    watch.feed.put(END)


def test_a_refused_write_or_an_ended_watch_sends_reads_to_the_api_server() -> None:
    store, watch = FakeLeases(), FakeWatch()
    store.create({"holderIdentity": "a", "leaseDurationSeconds": 10})
    leases = started(store, watch)
    assert leases.replace({"holderIdentity": "b"}, "0") is None  # a stale version: refused
    gets = leases.gets
    record = leases.read()
    assert record is not None and record.resource_version == "1" and leases.gets == gets + 1
    watch.end()  # the watch's timeout: reopened from a fresh GET
    wait_until(lambda: len(watch.opened) == 2)
    assert watch.opened == ["1", "1"]
    watch.send("MODIFIED", 9)
    gets = leases.gets
    record = leases.read()
    assert record is not None and record.resource_version == "9" and leases.gets == gets
    leases.stop()
    watch.feed.put(END)


def test_an_event_that_is_not_a_lease_is_a_failed_watch_not_a_crash() -> None:
    store, watch = FakeLeases(), FakeWatch()
    store.create({"holderIdentity": "a", "leaseDurationSeconds": 10})
    leases = started(store, watch)
    watch.feed.put(("MODIFIED", {"spec": {}}))  # no metadata
    wait_until(lambda: len(watch.opened) == 2)  # invalidated, then watched again from a GET
    record = leases.read()
    assert record is not None and record.resource_version == "1"
    leases.stop()
    watch.feed.put(END)


def test_the_standby_takes_over_through_the_watch_as_it_did_reading() -> None:
    """The leader renews through the API server; the standby sees each renewal as a watch event and takes the
    Lease once no new version arrived for the lease duration, with one GET in all, within one look of the expiry."""
    clock, store, watch = Clock(), FakeLeases(), FakeWatch()
    timing = Timing()
    leader = LeaderElector(store, "a", timing, clock=clock)
    assert leader.acquire(sleeper(clock, 100))
    leases = started(store, watch)
    standby = LeaderElector(leases, "b", timing, clock=clock, look_seconds=LOOK_SECONDS)
    renewals = iter(range(5))

    def leader_renews_then_dies() -> None:
        if next(renewals, None) is not None and store.record is not None:
            record = leader.record
            assert record is not None
            leader.record = store.replace({**store.writes[-1]}, record.resource_version)
            watch.send("MODIFIED", int(store.record.resource_version))

    assert standby.acquire(sleeper(clock, 100, each=leader_renews_then_dies))
    assert store.record is not None and store.record.holder == "b"
    last_renewal = 5 * LOOK_SECONDS  # one renewal after each of the standby's first five looks
    assert last_renewal + timing.lease_seconds <= clock.now <= last_renewal + timing.lease_seconds + LOOK_SECONDS
    assert leases.gets == 1
    leases.stop()
    watch.feed.put(END)


class ForbiddenWatch(FakeWatch):
    def __call__(self, resource_version: str | None) -> Iterator[tuple[str, Mapping[str, Any]]]:
        self.opened.append(resource_version)
        raise ApiException(status=403, reason="Forbidden")


def test_without_the_right_to_watch_the_standby_reads_as_before_and_stops_trying() -> None:
    """A Role without list/watch on Leases (an older chart): one refused watch, then GETs, no watch per retry."""
    store, watch = FakeLeases(), ForbiddenWatch()
    store.create({"holderIdentity": "a", "leaseDurationSeconds": 10})
    leases = started(store, watch)
    assert leases._thread is not None
    leases._thread.join(timeout=5)
    assert not leases._thread.is_alive() and watch.opened == ["1"]
    gets = leases.gets
    record = leases.read()
    assert record is not None and record.resource_version == "1" and leases.gets == gets + 1


def test_while_the_watch_is_down_reads_get_at_most_once_a_retry_period() -> None:
    """The standby looks every LOOK_SECONDS; without a watch that must not become four GETs a second. Between GETs
    it sees the last answer, which only makes a takeover later; a refused write still sends the next read to the
    API server at once."""
    clock, store, watch = Clock(), FakeLeases(), ForbiddenWatch()
    store.create({"holderIdentity": "a", "leaseDurationSeconds": 10})
    leases = WatchedLeases(store, watch, retry_seconds=2.0, clock=clock)
    leases.start()
    assert leases._thread is not None
    leases._thread.join(timeout=5)
    gets = leases.gets
    first = leases.read()
    store._write({"holderIdentity": "a", "leaseDurationSeconds": 10})  # a renewal
    clock.now = 1.9
    assert leases.read() == first and leases.gets == gets + 1
    clock.now = 2.0
    renewed = leases.read()
    assert renewed is not None and renewed.resource_version == "2" and leases.gets == gets + 2
    assert leases.replace({"holderIdentity": "b"}, "1") is None  # refused: the view is behind
    assert leases.read() == renewed and leases.gets == gets + 3
