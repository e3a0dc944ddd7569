"""Leader election: the pure decisions over a table of Leases and times, then the elector's loops against an
in-memory Lease store with optimistic concurrency and a fake clock (a takeover, a race, a lost Lease, a release),
then the thin Lease client's calls."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import kopf
import pytest
from kubernetes.client.exceptions import ApiException

from sglang_operator.cli import build_parser, leader_timing, main
from sglang_operator.runtime import leader, runner
from sglang_operator.runtime.leader import (
    LeaderElector,
    LeaseClient,
    LeaseRecord,
    Observed,
    Verdict,
    acquired_spec,
    must_step_down,
    observe,
    record_from_lease,
    released_spec,
    renewed_spec,
    standby_verdict,
)
from sglang_operator.runtime.leasetiming import Timing

T = Timing()  # 13 s lease, 11 s renew deadline, a renewal every 7 s, 1 s retry
WALL = datetime(2026, 12, 1, 18, 0, 0, 0, tzinfo=UTC)


def lease(holder: str, rv: str = "1", seconds: int = 10, transitions: int = 0) -> LeaseRecord:
    return LeaseRecord(holder, seconds, "2026-12-01T17:00:00.000000Z", "2026-12-01T17:59:58.000000Z", transitions, rv)


@pytest.mark.parametrize(
    ("record", "since", "now", "expected"),
    [
        (None, 0.0, 0.0, (Verdict.CREATE, 0.0)),
        (lease(""), 0.0, 0.0, (Verdict.TAKE, 0.0)),  # released by a graceful stop
        (lease("me_1"), 0.0, 0.0, (Verdict.TAKE, 0.0)),  # already ours
        (lease("other_1"), 0.0, 0.0, (Verdict.WAIT, 1.0)),  # fresh: wait a retry period
        (lease("other_1"), 0.0, 9.5, (Verdict.WAIT, 0.5)),  # expires in 0.5 s: read again right then
        (lease("other_1"), 0.0, 10.0, (Verdict.TAKE, 0.0)),  # unchanged for the whole lease duration
        (lease("other_1", seconds=0), 0.0, 1.0, (Verdict.TAKE, 0.0)),  # a 0 s duration counts as 1 s
        (lease("other_1", seconds=30), 0.0, 29.0, (Verdict.WAIT, 1.0)),  # the Lease's own duration, not ours
    ],
)
def test_standby_verdict(record: LeaseRecord | None, since: float, now: float, expected: tuple[Verdict, float]) -> None:
    assert standby_verdict("me_1", Observed(record, since), now, T.retry_seconds) == expected


def test_expiry_counts_from_first_sight_not_from_the_leases_wall_clock() -> None:
    """renewTime says 17:59:58, hours before any plausible local clock: a candidate with a skewed clock must still
    wait a whole lease duration after it first saw this version, and a renewal (a new version) restarts that."""
    first = observe(None, lease("other_1", rv="7"), now=100.0)
    assert observe(first, lease("other_1", rv="7"), now=105.0) is first
    assert standby_verdict("me_1", first, 109.9, 1.0)[0] is Verdict.WAIT
    renewed = observe(first, lease("other_1", rv="8"), now=108.0)
    assert renewed.since == 108.0
    assert standby_verdict("me_1", renewed, 112.0, 1.0)[0] is Verdict.WAIT
    assert standby_verdict("me_1", renewed, 118.0, 1.0)[0] is Verdict.TAKE
    gone = observe(renewed, None, now=119.0)
    assert gone == Observed(None, 119.0) and observe(gone, None, 120.0) is gone


def test_step_down_before_any_standby_may_take_over() -> None:
    assert not must_step_down(last_renewed=100.0, now=110.9, timing=T)
    assert must_step_down(last_renewed=100.0, now=111.0, timing=T)
    # The earliest a standby can take over is a whole lease after it saw the renewal, which it cannot see before
    # the renewal was sent: the holder has stopped 2 s earlier.
    assert T.lease_seconds - T.renew_deadline_seconds >= 2


@pytest.mark.parametrize(
    ("lease_s", "deadline", "interval", "retry"),
    [
        (10, 10.0, 7.0, 1.0),  # the holder would still write when a standby may take over
        (10, 7.0, 7.0, 1.0),  # no renewal before the deadline
        (10, 7.0, 2.0, 0.0),
        (10, 7.0, 2.0, 3.0),  # retrying a failure more slowly than renewing
    ],
)
def test_timing_refuses_durations_that_would_allow_two_writers(
    lease_s: int, deadline: float, interval: float, retry: float
) -> None:
    with pytest.raises(ValueError, match="retry <= renew interval < renew deadline < lease duration"):
        Timing(lease_s, deadline, interval, retry)


def test_specs_record_acquisition_renewal_and_release() -> None:
    created = acquired_spec("me_1", None, WALL, T)
    assert created == {
        "holderIdentity": "me_1",
        "leaseDurationSeconds": 13,
        "acquireTime": "2026-12-01T18:00:00.000000Z",  # six digits even when the fraction is zero
        "renewTime": "2026-12-01T18:00:00.000000Z",
        "leaseTransitions": 0,
    }
    taken = acquired_spec("me_1", lease("other_1", transitions=4), WALL, T)
    assert (taken["acquireTime"], taken["leaseTransitions"]) == ("2026-12-01T18:00:00.000000Z", 5)
    assert acquired_spec("me_1", lease("", transitions=4), WALL, T)["leaseTransitions"] == 5  # released: new holder
    again = acquired_spec("me_1", lease("me_1", transitions=4), WALL, T)
    assert (again["acquireTime"], again["leaseTransitions"]) == ("2026-12-01T17:00:00.000000Z", 4)

    later = datetime(2026, 12, 1, 18, 0, 2, 250000, tzinfo=UTC)
    renewed = renewed_spec("me_1", lease("me_1", transitions=5), later, T)
    assert renewed == {
        "holderIdentity": "me_1",
        "leaseDurationSeconds": 13,
        "acquireTime": "2026-12-01T17:00:00.000000Z",
        "renewTime": "2026-12-01T18:00:02.250000Z",
        "leaseTransitions": 5,
    }
    released = released_spec(lease("me_1", transitions=5), later)
    assert (released["holderIdentity"], released["leaseDurationSeconds"], released["leaseTransitions"]) == ("", 1, 5)


def test_record_from_lease_tolerates_a_bare_lease() -> None:
    assert record_from_lease({"metadata": {"resourceVersion": "3"}}) == LeaseRecord("", 0, None, None, 0, "3")
    full = {
        "metadata": {"resourceVersion": "9"},
        "spec": {"holderIdentity": "a_1", "leaseDurationSeconds": 10, "leaseTransitions": 2, "renewTime": "x"},
    }
    assert record_from_lease(full) == LeaseRecord("a_1", 10, None, "x", 2, "9")


def test_identity_and_namespace_defaults(tmp_path: Path) -> None:
    assert leader.default_identity({"POD_NAME": "sgo-7d9f-abcde"}) == "sgo-7d9f-abcde"
    one, two = leader.new_identity("sgo-7d9f-abcde", {}), leader.new_identity("sgo-7d9f-abcde", {})
    assert one.startswith("sgo-7d9f-abcde_") and one != two  # a restarted pod is a new candidate
    ns_file = tmp_path / "namespace"
    assert leader.default_namespace({"POD_NAMESPACE": "ops"}, ns_file) == "ops"
    assert leader.default_namespace({}, ns_file) == "default"
    ns_file.write_text("sglang-operator\n")
    assert leader.default_namespace({}, ns_file) == "sglang-operator"


# -- the elector against an in-memory Lease with optimistic concurrency ---------------------------------------


@dataclass
class FakeLeases:
    """One Lease as the API server keeps it: every write bumps resourceVersion, a write naming an older one is a
    conflict (None), as is creating one that exists. `errors` are raised by the next calls, in order."""

    record: LeaseRecord | None = None
    version: int = 0
    writes: list[dict[str, Any]] = field(default_factory=list)
    errors: list[Exception] = field(default_factory=list)

    def _maybe_fail(self) -> None:
        if self.errors:
            raise self.errors.pop(0)

    def _write(self, spec: Mapping[str, Any]) -> LeaseRecord:
        self.version += 1
        self.writes.append(dict(spec))
        self.record = record_from_lease({"metadata": {"resourceVersion": str(self.version)}, "spec": spec})
        return self.record

    def read(self) -> LeaseRecord | None:
        self._maybe_fail()
        return self.record

    def create(self, spec: Mapping[str, Any]) -> LeaseRecord | None:
        self._maybe_fail()
        return None if self.record is not None else self._write(spec)

    def replace(self, spec: Mapping[str, Any], resource_version: str) -> LeaseRecord | None:
        self._maybe_fail()
        if self.record is None or self.record.resource_version != resource_version:
            return None
        return self._write(spec)


@dataclass
class Clock:
    now: float = 0.0

    def __call__(self) -> float:
        return self.now


def sleeper(clock: Clock, limit: float, each: Any = None) -> Any:
    """A `wait` that advances the fake clock (calling `each()` after every step) and reports "stopping" past
    `limit`, so no loop under test can run forever."""

    def wait(seconds: float) -> bool:
        assert seconds >= 0
        clock.now += seconds
        if each is not None:
            each()
        return clock.now > limit

    return wait


def test_standby_takes_over_a_killed_leader_within_15_s_and_not_before_it_stopped_writing() -> None:
    clock, store = Clock(), FakeLeases()
    a = LeaderElector(store, "a_1", T, clock=clock)
    assert a.acquire(sleeper(clock, 1)) and store.record is not None and store.record.holder == "a_1"
    kill_at = 31.0
    renewals: list[float] = []

    def leader_a_renews() -> None:  # a's renewal loop, every renew interval while it lives
        interval = T.renew_interval_seconds
        while not renewals or (renewals[-1] + interval <= clock.now and renewals[-1] + interval < kill_at):
            at = renewals[-1] + interval if renewals else 0.0
            assert a.record is not None
            a.record = store.replace(renewed_spec("a_1", a.record, WALL, T), a.record.resource_version)
            renewals.append(at)

    leader_a_renews()
    b = LeaderElector(store, "b_1", T, clock=clock)
    assert b.acquire(sleeper(clock, 120, leader_a_renews))
    last_renewal = renewals[-1]
    assert last_renewal < kill_at
    handover = clock.now - kill_at
    assert handover <= 15.0, handover
    # b saw a's last renewal at most one retry period late and waited a whole lease from then ...
    assert T.lease_seconds <= clock.now - last_renewal <= T.lease_seconds + T.retry_seconds
    # ... so a, which stops renew_deadline after its last renewal was sent, had stopped before b wrote anything.
    assert clock.now > last_renewal + T.renew_deadline_seconds
    assert store.record is not None
    assert (store.record.holder, store.record.transitions) == ("b_1", 1)
    assert store.writes[-1]["acquireTime"] == store.writes[-1]["renewTime"]


def test_two_candidates_racing_for_an_expired_lease_one_wins() -> None:
    clock, store = Clock(), FakeLeases(record=lease("dead_1", rv="5"), version=5)
    b, c = LeaderElector(store, "b_1", T, clock=clock), LeaderElector(store, "c_1", T, clock=clock)
    observed = observe(None, store.read(), 0.0)
    clock.now = 10.0
    assert standby_verdict("b_1", observed, clock.now, 1.0)[0] is Verdict.TAKE
    # both decided on version 5; b writes first, c's write over version 5 is then a conflict
    assert store.replace(acquired_spec("b_1", observed.record, WALL, T), "5") is not None
    assert store.replace(acquired_spec("c_1", observed.record, WALL, T), "5") is None
    # and through the loops: c, reading b's fresh Lease, keeps waiting
    assert not c.acquire(sleeper(clock, 15.0))
    assert store.record is not None and store.record.holder == "b_1"
    assert b.record is None  # b's loop never ran: nothing claims it leads


def test_renewals_keep_the_lease_and_a_foreign_holder_ends_them() -> None:
    clock, store = Clock(), FakeLeases()
    a = LeaderElector(store, "a_1", T, clock=clock)
    assert a.acquire(sleeper(clock, 1))
    assert a.renew_until_lost(sleeper(clock, 29)) is None  # stopped by the process, not by a loss
    assert store.record is not None and store.record.holder == "a_1" and len(store.writes) == 1 + 4
    assert a.renewed_at == 4 * T.renew_interval_seconds
    # someone else takes the Lease (an admin, or a standby that judged it expired): the next renewal conflicts
    store._write(acquired_spec("b_1", store.record, WALL, T))
    reason = a.renew_until_lost(sleeper(clock, 100))
    assert reason is not None and "b_1" in reason
    assert store.record.holder == "b_1"


def test_a_changed_but_still_held_lease_is_renewed_over_its_new_version() -> None:
    clock, store = Clock(), FakeLeases()
    a = LeaderElector(store, "a_1", T, clock=clock)
    assert a.acquire(sleeper(clock, 1))
    assert store.record is not None
    store._write(renewed_spec("a_1", store.record, WALL, T))  # e.g. a label edit bumps the version
    assert a.renew_until_lost(sleeper(clock, 9)) is None
    # the renewal at 7 s conflicts; the one a retry period later names the new version and succeeds
    assert store.record.holder == "a_1" and a.record == store.record and a.renewed_at == 8.0


def test_the_watchdog_fires_when_renewals_fail_for_the_renew_deadline() -> None:
    clock, store = Clock(), FakeLeases()
    a = LeaderElector(store, "a_1", T, clock=clock)
    assert a.acquire(sleeper(clock, 1))
    store.errors = [ApiException(status=500), OSError("connection refused"), ApiException(status=503)]
    assert a.renew_until_lost(sleeper(clock, 9.5)) is None  # attempts at 7, 8, 9 s failed: renewed_at stays 0
    assert a.renewed_at == 0.0 and not store.errors
    clock.now = 0.0
    reason = a.watch(sleeper(clock, 60))
    assert reason == "no renewal for 11 s"
    assert clock.now == pytest.approx(T.renew_deadline_seconds)


def test_renewals_come_every_renew_interval_and_a_failed_one_is_retried_a_retry_period_later() -> None:
    """The renewal's period is the operator's fixed API cost; a failure must not wait that long again, or a short
    API stall would leave no second attempt before the renew deadline."""
    clock, store = Clock(), FakeLeases()
    a = LeaderElector(store, "a_1", T, clock=clock)
    assert a.acquire(sleeper(clock, 1))
    attempts: list[float] = []
    replace = store.replace

    def timed_replace(spec: Mapping[str, Any], resource_version: str) -> LeaseRecord | None:
        attempts.append(clock.now)
        return replace(spec, resource_version)

    store.replace = timed_replace  # type: ignore[method-assign]
    store.errors = [OSError("reset"), ApiException(status=503)]  # the first two attempts fail
    assert a.renew_until_lost(sleeper(clock, 30)) is None
    assert attempts == [7.0, 8.0, 9.0, 16.0, 23.0, 30.0]
    assert a.renewed_at == 30.0


def test_a_released_lease_is_taken_at_the_next_attempt() -> None:
    clock, store = Clock(), FakeLeases()
    a, b = LeaderElector(store, "a_1", T, clock=clock), LeaderElector(store, "b_1", T, clock=clock)
    assert a.acquire(sleeper(clock, 1))
    a.release()
    assert store.record is not None and (store.record.holder, store.record.lease_seconds) == ("", 1)
    start = clock.now
    assert b.acquire(sleeper(clock, 5))
    assert clock.now == start and store.record.holder == "b_1" and store.record.transitions == 1


def test_the_standby_survives_api_errors() -> None:
    clock, store = Clock(), FakeLeases()
    store.errors = [ApiException(status=500), OSError("reset")]
    b = LeaderElector(store, "b_1", T, clock=clock)
    assert b.acquire(sleeper(clock, 10))
    assert clock.now == 2 * T.retry_seconds and store.record is not None and store.record.holder == "b_1"


# -- the Lease client ------------------------------------------------------------------------------------------


@dataclass
class Response:
    data: bytes
    status: int = 200


class FakeCoordination:
    """CoordinationV1Api's three Lease calls, recording their arguments."""

    def __init__(self, fail: ApiException | None = None) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.fail = fail

    def _answer(self, verb: str, kwargs: dict[str, Any], body: dict[str, Any] | None) -> Response:
        self.calls.append((verb, kwargs))
        assert kwargs["_request_timeout"] == leader.LEASE_API_TIMEOUT and kwargs["_preload_content"] is False
        if self.fail is not None:
            raise self.fail
        lease = body or {"metadata": {"name": "l"}, "spec": {"holderIdentity": "a_1"}}
        lease = {**lease, "metadata": {**lease["metadata"], "resourceVersion": "42"}}
        return Response(json.dumps(lease).encode(), 201 if verb == "create" else 200)

    def read_namespaced_lease(self, name: str, namespace: str, **kwargs: Any) -> Response:
        return self._answer("get", kwargs, None)

    def create_namespaced_lease(self, namespace: str, body: dict[str, Any], **kwargs: Any) -> Response:
        assert "resourceVersion" not in body["metadata"]
        return self._answer("create", kwargs, body)

    def replace_namespaced_lease(self, name: str, namespace: str, body: dict[str, Any], **kwargs: Any) -> Response:
        assert body["metadata"]["resourceVersion"] == "41"  # optimistic concurrency: the version decided on
        return self._answer("update", kwargs, body)


def lease_client(fake: FakeCoordination) -> LeaseClient:
    client = LeaseClient.__new__(LeaseClient)
    client.coordination, client.namespace, client.name = fake, "ops", "sglang-operator-leader"
    return client


def test_lease_client_calls_are_bounded_and_versioned() -> None:
    fake = FakeCoordination()
    leases = lease_client(fake)
    assert leases.read() == LeaseRecord("a_1", 0, None, None, 0, "42")
    created = leases.create(acquired_spec("a_1", None, WALL, T))
    assert created is not None and created.holder == "a_1" and created.lease_seconds == 13
    replaced = leases.replace(renewed_spec("a_1", created, WALL, T), "41")
    assert replaced is not None and replaced.resource_version == "42"
    assert [verb for verb, _ in fake.calls] == ["get", "create", "update"]


@pytest.mark.parametrize(("status", "verb"), [(404, "get"), (409, "create"), (409, "update")])
def test_lease_client_maps_absent_and_conflict_to_none(status: int, verb: str) -> None:
    leases = lease_client(FakeCoordination(fail=ApiException(status=status)))
    call = {"get": leases.read, "create": lambda: leases.create({}), "update": lambda: leases.replace({}, "41")}[verb]
    assert call() is None


@pytest.mark.parametrize("status", [403, 500])
def test_lease_client_raises_other_errors(status: int) -> None:
    leases = lease_client(FakeCoordination(fail=ApiException(status=status)))
    with pytest.raises(ApiException):
        leases.read()
    with pytest.raises(ApiException):
        leases.replace({}, "41")


def test_lease_record_round_trips_through_the_body() -> None:
    spec = acquired_spec("a_1", None, WALL, T)
    body = leader.lease_body("sglang-operator-leader", spec, "41")
    assert body["metadata"]["resourceVersion"] == "41" and body["kind"] == "Lease"
    record = record_from_lease(body)
    assert replace(record, resource_version="x") == LeaseRecord(
        "a_1", T.lease_seconds, spec["acquireTime"], spec["renewTime"], 0, "x"
    )


# -- what `run` wires around the elector -------------------------------------------------------------------------


def test_the_liveness_probe_fails_while_the_election_thread_is_wedged() -> None:
    """Every replica runs kopf, whose liveness URL runs this probe: it fails (kopf answers 500) once the election's
    thread, leader or standby, has not attempted for a while, so the kubelet restarts a replica that would never take
    over or renew."""
    runner._election_fresh.clear()
    assert asyncio.run(runner.election_probe()) == "no election"
    fresh = [True]
    runner._election_fresh.append(lambda: fresh[0])
    try:
        assert asyncio.run(runner.election_probe()) == "fresh"
        fresh[0] = False
        with pytest.raises(kopf.PermanentError, match="has not attempted"):
            asyncio.run(runner.election_probe())
    finally:
        runner._election_fresh.clear()


def test_run_flags_for_leader_election_and_metrics() -> None:
    parser = build_parser()
    args = parser.parse_args(["run"])
    assert (args.leader_elect, args.metrics_port, args.metrics_address) == (False, 0, "0.0.0.0")
    args = parser.parse_args(
        ["run", "--leader-elect", "--leader-election-namespace", "ops", "--leader-election-identity", "op-a",
         "--metrics-port", "8081"]
    )  # fmt: skip
    assert (args.leader_elect, args.leader_election_namespace, args.leader_election_identity) == (True, "ops", "op-a")
    assert args.metrics_port == 8081
    assert parser.parse_args(["run", "--leader-elect", "--no-leader-elect"]).leader_elect is False
    for bad in ("70000", "-1", "http"):
        with pytest.raises(SystemExit) as exit_info:
            parser.parse_args(["run", "--metrics-port", bad])
        assert exit_info.value.code == 2


def test_run_flags_set_the_election_timing_and_refuse_two_writers(capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser()
    assert leader_timing(parser.parse_args(["run"])) == Timing()
    args = parser.parse_args(
        ["run", "--leader-election-lease-duration", "30", "--leader-election-renew-deadline", "20",
         "--leader-election-renew-interval", "2", "--leader-election-retry-period", "2"]
    )  # fmt: skip
    assert leader_timing(args) == Timing(30, 20.0, 2.0, 2.0)
    # a renewal that comes after the deadline: refused before anything starts (run_operator is never reached)
    assert main(["run", "--leader-elect", "--leader-election-renew-interval", "12"]) == 2
    assert "renew interval 12 s, renew deadline 11 s" in capsys.readouterr().err
