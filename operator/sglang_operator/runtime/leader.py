"""Leader election with a `coordination.k8s.io/v1` Lease: of several `run` processes, only the Lease's holder runs
kopf, so only one of them writes.

The decisions are pure functions of the Lease as read, the local monotonic clock and the timing (`standby_verdict`,
`must_step_down`, the `*_spec` builders); `LeaderElector` only reads and writes the Lease and sleeps. Like
client-go's leaderelection, a candidate never compares the Lease's `renewTime` with its own wall clock (the
clocks of two nodes may differ by seconds): it notes *when it first saw* each version of the Lease
(`resourceVersion`) and takes over once that version is `leaseDurationSeconds` old on its own monotonic clock.
The holder, in turn, counts from the moment it *sent* its last successful renewal and gives up after
`renew_deadline_seconds`, strictly less than the lease duration: by the time any other replica may consider the
Lease expired, the old holder has stopped (see `runner`: it exits the process, which stops every handler at once).
Every write carries the `resourceVersion` it was decided on, so of two candidates racing for an expired Lease the
API server lets exactly one win (409 Conflict for the other).
"""

from __future__ import annotations

import json
import logging
import secrets
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import Enum
from pathlib import Path
from typing import Any, Final, Protocol

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from .leasetiming import Timing

log = logging.getLogger(__name__)

LEASE_NAME: Final = "sglang-operator-leader"
IN_CLUSTER_NAMESPACE_FILE: Final = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
POD_NAME_ENV: Final = "POD_NAME"
POD_NAMESPACE_ENV: Final = "POD_NAMESPACE"
LEASE_API_TIMEOUT: Final = (2.0, 4.0)
"""`_request_timeout` of every Lease call (connect, read): a renewal sent at its interval over an open connection
has its answer or its error by the renew deadline (7 s + 4 s), so a slow answer still counts; a call that cannot
even connect ends after 2 s, leaving time for a retry. Either way the watchdog, not the call, decides to stop."""
WATCHDOG_TICK_SECONDS: Final = 0.25
DEFAULT_TIMING: Final = Timing()


@dataclass(frozen=True)
class LeaseRecord:
    """The Lease as read: its spec's election fields and the version a write must name."""

    holder: str  # "" once released
    lease_seconds: int
    acquire_time: str | None
    renew_time: str | None
    transitions: int
    resource_version: str


def record_from_lease(lease: Mapping[str, Any]) -> LeaseRecord:
    """Parse the JSON of a Lease (tolerant: a Lease another tool created may lack any spec field)."""
    spec = lease.get("spec") or {}
    return LeaseRecord(
        holder=str(spec.get("holderIdentity") or ""),
        lease_seconds=int(spec.get("leaseDurationSeconds") or 0),
        acquire_time=spec.get("acquireTime"),
        renew_time=spec.get("renewTime"),
        transitions=int(spec.get("leaseTransitions") or 0),
        resource_version=str(lease["metadata"]["resourceVersion"]),
    )


@dataclass(frozen=True)
class Observed:
    """What a candidate last read (None: there is no Lease) and when, on its monotonic clock, it first saw it."""

    record: LeaseRecord | None
    since: float


def observe(previous: Observed | None, record: LeaseRecord | None, now: float) -> Observed:
    """Keep the first-seen time while the Lease has not changed; a new version (a renewal) restarts the count."""
    if previous is not None:
        same = (
            previous.record.resource_version == record.resource_version
            if previous.record is not None and record is not None
            else previous.record is None and record is None
        )
        if same:
            return previous
    return Observed(record, now)


class Verdict(Enum):
    CREATE = "create"  # no Lease: create it with ourselves as holder
    TAKE = "take"  # free, expired, or already ours: write ourselves as holder over the version read
    WAIT = "wait"  # another holder's Lease still runs


def standby_verdict(identity: str, observed: Observed, now: float, look_seconds: float) -> tuple[Verdict, float]:
    """What a candidate that does not lead does now, and (for WAIT) how long it sleeps before reading again:
    `look_seconds`, or less when the Lease expires sooner, so that a takeover is not late by up to a whole look."""
    record = observed.record
    if record is None:
        return Verdict.CREATE, 0.0
    if record.holder in ("", identity):
        return Verdict.TAKE, 0.0
    expires = observed.since + max(record.lease_seconds, 1)
    if now >= expires:
        return Verdict.TAKE, 0.0
    return Verdict.WAIT, min(look_seconds, expires - now)


def must_step_down(last_renewed: float, now: float, timing: Timing) -> bool:
    """The holder whose last successful renewal was *sent* `renew_deadline_seconds` ago stops writing: others may
    take the Lease `lease_seconds` after they saw that renewal, and the margin covers stopping."""
    return now - last_renewed >= timing.renew_deadline_seconds


def micro_time(wall: datetime) -> str:
    """A `MicroTime` as the API server writes it (always six fraction digits, UTC, `Z`)."""
    return wall.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def acquired_spec(identity: str, previous: LeaseRecord | None, wall: datetime, timing: Timing) -> dict[str, Any]:
    """The spec that makes `identity` the holder: a new holder gets a new acquireTime and one more transition (as
    client-go counts them: a change of holder, a released Lease included); a Lease created fresh starts at 0."""
    now = micro_time(wall)
    if previous is None:
        transitions = 0
    elif previous.holder == identity:
        transitions = previous.transitions
    else:
        transitions = previous.transitions + 1
    acquire = previous.acquire_time if previous is not None and previous.holder == identity else now
    return {
        "holderIdentity": identity,
        "leaseDurationSeconds": timing.lease_seconds,
        "acquireTime": acquire,
        "renewTime": now,
        "leaseTransitions": transitions,
    }


def renewed_spec(identity: str, current: LeaseRecord, wall: datetime, timing: Timing) -> dict[str, Any]:
    """The holder's renewal: only renewTime moves."""
    return {
        "holderIdentity": identity,
        "leaseDurationSeconds": timing.lease_seconds,
        "acquireTime": current.acquire_time or micro_time(wall),
        "renewTime": micro_time(wall),
        "leaseTransitions": current.transitions,
    }


def released_spec(current: LeaseRecord, wall: datetime) -> dict[str, Any]:
    """A graceful stop hands the Lease back (client-go's ReleaseOnCancel): no holder and a 1 s duration, so a
    standby takes over at its next attempt instead of waiting for the whole lease duration."""
    now = micro_time(wall)
    return {
        "holderIdentity": "",
        "leaseDurationSeconds": 1,
        "acquireTime": current.acquire_time or now,
        "renewTime": now,
        "leaseTransitions": current.transitions,
    }


def lease_body(name: str, spec: Mapping[str, Any], resource_version: str | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "labels": {"app.kubernetes.io/part-of": "sglang-operator"}}
    if resource_version is not None:
        metadata["resourceVersion"] = resource_version
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": metadata, "spec": dict(spec)}


def holder_identity(base: str, suffix: str) -> str:
    """`<pod name>_<random>`: a restarted pod keeps its name but is a new candidate, never mistaken for the
    holder it was before its restart (which might still be in the Lease)."""
    return f"{base}_{suffix}"


def default_identity(environ: Mapping[str, str]) -> str:
    return environ.get(POD_NAME_ENV) or socket.gethostname()


def new_identity(base: str | None, environ: Mapping[str, str]) -> str:
    return holder_identity(base or default_identity(environ), secrets.token_hex(4))


def default_namespace(environ: Mapping[str, str], namespace_file: Path = IN_CLUSTER_NAMESPACE_FILE) -> str:
    """The pod's namespace (downward API), else the service account's in-cluster namespace file, else
    `default` (a process outside the cluster)."""
    if environ.get(POD_NAMESPACE_ENV):
        return environ[POD_NAMESPACE_ENV]
    try:
        return namespace_file.read_text().strip() or "default"
    except OSError:
        return "default"


# -- I/O ---------------------------------------------------------------------------------------------------------


class Leases(Protocol):
    """The three Lease calls the elector makes. `create`/`replace` return None when another writer won (409)."""

    def read(self) -> LeaseRecord | None: ...
    def create(self, spec: Mapping[str, Any]) -> LeaseRecord | None: ...
    def replace(self, spec: Mapping[str, Any], resource_version: str) -> LeaseRecord | None: ...


TRANSIENT_ERRORS: Final = (ApiException, urllib3.exceptions.HTTPError, OSError)


class LeaseClient:
    """One named Lease through the API server, as plain JSON (the generated models would serialise MicroTime with
    `isoformat()`, which drops the fraction when it is zero). The requests are counted in the operator's metrics by
    the shared client (`kube.api_client`), like every other call."""

    def __init__(self, api: client.ApiClient, namespace: str, name: str = LEASE_NAME) -> None:
        self.coordination = client.CoordinationV1Api(api)
        self.namespace, self.name = namespace, name

    def _call(self, verb: str, call: Callable[[], Any]) -> dict[str, Any] | None:
        try:
            response = call()
        except ApiException as exc:
            if (verb == "get" and exc.status == 404) or exc.status == 409:
                return None
            raise
        return dict(json.loads(response.data))

    def read(self) -> LeaseRecord | None:
        lease = self._call(
            "get",
            lambda: self.coordination.read_namespaced_lease(
                self.name, self.namespace, _request_timeout=LEASE_API_TIMEOUT, _preload_content=False
            ),
        )
        return None if lease is None else record_from_lease(lease)

    def create(self, spec: Mapping[str, Any]) -> LeaseRecord | None:
        lease = self._call(
            "create",
            lambda: self.coordination.create_namespaced_lease(
                self.namespace, lease_body(self.name, spec), _request_timeout=LEASE_API_TIMEOUT, _preload_content=False
            ),
        )
        return None if lease is None else record_from_lease(lease)

    def replace(self, spec: Mapping[str, Any], resource_version: str) -> LeaseRecord | None:
        body = lease_body(self.name, spec, resource_version)
        lease = self._call(
            "update",
            lambda: self.coordination.replace_namespaced_lease(
                self.name, self.namespace, body, _request_timeout=LEASE_API_TIMEOUT, _preload_content=False
            ),
        )
        return None if lease is None else record_from_lease(lease)


class LeaderElector:
    """Acquire, renew and release one Lease. `wait(seconds)` sleeps and returns True when the process is stopping
    (a `threading.Event.wait`); `clock` is monotonic. Tests pass a fake Lease store and a fake clock.

    A standby looks at the Lease every `look_seconds` (default: the retry period): it first sees a renewal up to one
    look after it was written and takes over a lease duration after that. `runner` looks every
    `leasewatch.LOOK_SECONDS` through a watch, where a look costs no request."""

    def __init__(
        self,
        leases: Leases,
        identity: str,
        timing: Timing = DEFAULT_TIMING,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime] = lambda: datetime.now(UTC),
        look_seconds: float | None = None,
    ) -> None:
        self.leases, self.identity, self.timing, self.clock, self.wall = leases, identity, timing, clock, wall
        self.look_seconds = timing.retry_seconds if look_seconds is None else look_seconds
        self.record: LeaseRecord | None = None  # the Lease as our last successful write left it
        self.renewed_at = float("-inf")  # when that write was sent
        self.heartbeat = clock()  # last attempt of either loop: the standby's liveness

    def acquire(self, wait: Callable[[float], bool]) -> bool:
        """Block until this process holds the Lease (True) or `wait` reports the process is stopping (False)."""
        observed: Observed | None = None
        holder = None
        while True:
            self.heartbeat = now = self.clock()
            try:
                current = self.leases.read()
            except TRANSIENT_ERRORS as exc:
                log.warning("leader election: cannot read the Lease (%s); retrying", exc)
                if wait(self.timing.retry_seconds):
                    return False
                continue
            observed = observe(observed, current, now)
            verdict, pause = standby_verdict(self.identity, observed, now, self.look_seconds)
            if verdict is Verdict.WAIT:
                if current is not None and current.holder != holder:
                    holder = current.holder
                    log.info("leader election: %s leads; %s waits as standby", holder, self.identity)
                if wait(pause):
                    return False
                continue
            if self._take(current):
                return True
            if wait(self.timing.retry_seconds):  # another candidate won the race: it leads now
                return False

    def _take(self, current: LeaseRecord | None) -> bool:
        """Write the Lease as ours over `current` (create it when there is none); False when another write won or
        the API did not answer."""
        sent = self.clock()
        spec = acquired_spec(self.identity, current, self.wall(), self.timing)
        try:
            if current is None:
                written = self.leases.create(spec)
            else:
                written = self.leases.replace(spec, current.resource_version)
        except TRANSIENT_ERRORS as exc:
            log.warning("leader election: cannot write the Lease (%s); retrying", exc)
            return False
        if written is None:
            return False
        self.record, self.renewed_at = written, sent
        log.info("leader election: %s acquired the Lease (transition %d)", self.identity, written.transitions)
        return True

    def renew_until_lost(self, wait: Callable[[float], bool]) -> str | None:
        """Renew every renew interval, and a retry period after a failed attempt, until `wait` reports stopping
        (None) or the Lease is lost: another holder took it (returns why). A renewal that fails for a while is the
        watchdog's business (`watch`)."""
        pause = self.timing.renew_interval_seconds
        while not wait(pause):
            self.heartbeat = self.clock()
            assert self.record is not None, "renew_until_lost before acquire"
            pause = self.timing.retry_seconds  # unless this attempt succeeds
            sent = self.clock()
            try:
                written = self.leases.replace(
                    renewed_spec(self.identity, self.record, self.wall(), self.timing), self.record.resource_version
                )
                if written is None:  # someone wrote the Lease since our last write: who holds it now?
                    current = self.leases.read()
                    if current is None or current.holder != self.identity:
                        return f"the Lease is now held by {current.holder if current else 'nobody (deleted)'!r}"
                    self.record = current  # still ours (a label changed): renew over it a retry period later
                    continue
            except TRANSIENT_ERRORS as exc:
                log.warning("leader election: renewal failed (%s); retrying in %g s", exc, pause)
                continue
            self.record, self.renewed_at = written, sent
            pause = self.timing.renew_interval_seconds
        return None

    def watch(self, wait: Callable[[float], bool]) -> str | None:
        """Return why, as soon as the last renewal is older than the renew deadline, even while a renewal call is
        still hanging; None when stopping. Separate from the renewing loop so that a slow call cannot delay it."""
        while not wait(WATCHDOG_TICK_SECONDS):
            if must_step_down(self.renewed_at, self.clock(), self.timing):
                return f"no renewal for {self.timing.renew_deadline_seconds:g} s"
        return None

    def release(self) -> None:
        """Hand the Lease back after a graceful stop, once; a failure only means the standby waits for expiry."""
        if self.record is None:
            return
        try:
            self.leases.replace(released_spec(self.record, self.wall()), self.record.resource_version)
        except TRANSIENT_ERRORS as exc:
            log.warning("leader election: could not release the Lease (%s); it expires on its own", exc)
        self.record = None
