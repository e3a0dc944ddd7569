"""Run the operator: serve its metrics, run kopf with the runtime's watches and the per-CR loops the entry point
composed (`app.py`), and (with `--leader-elect`) start those loops only once this process holds the leader Lease.

Every replica runs kopf from the start: its watches and indexes are filled while it stands by, so a new leader
starts its loops at once instead of listing and indexing every pod and child first (most of a handover's time at
200 fleets, docs/decisions.md, "A warm standby"). A standby writes nothing: kopf here has only indexes and
`on.event` handlers, and the loops that write (reconcile, autoscaler, doctor) and the CR finalizer belong to the
`supervisor`, which acts only once told this replica leads. kopf stays `standalone=True` (no peering).

The holder renews from a thread of its own and a watchdog thread exits the process the moment the last renewal is
older than the renew deadline: `os._exit`, not a graceful kopf stop, because a graceful stop lets loops run on (and
write) for up to their stop timeout, after another replica may already lead. The pod restarts and stands by. A
graceful stop (SIGTERM) of the holder lets kopf and the loops finish, then releases the Lease so the standby takes
over at once. kopf's liveness URL answers on every replica; its probe fails when the election's thread has not
attempted for `STANDBY_STALE_SECONDS` (a wedged standby would never take over).
"""

import asyncio
import logging
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, NoReturn

import kopf
import prometheus_client

from .. import metrics
from ..settings import OperatorSettings
from . import leader
from .keepalive import KeepaliveEventLoop
from .kube import api_client
from .leasetiming import Timing
from .leasewatch import LOOK_SECONDS, WatchedLeases, lease_events
from .supervisor import LoopKind, Supervisor
from .watches import operator_registry
from .workqueue import start_pool
from .writer import Writer

log = logging.getLogger(__name__)

LOST_LEASE_EXIT_CODE: Final = 3
"""Exit status of a leader that could not renew its Lease: not 0, so that any supervisor restarts it."""
STANDBY_STALE_SECONDS: Final = 30.0
"""A standby whose election loop has not attempted for this long is reported unhealthy (a wedged loop would never
take over); attempts come every retry period and each call is bounded by the Lease timeout."""


@dataclass(frozen=True)
class LeaderElection:
    """`run --leader-elect`: the Lease `namespace/name` and this process's holder identity (with its suffix)."""

    namespace: str
    name: str
    identity: str
    timing: Timing = field(default_factory=Timing)


def serve_metrics(port: int, address: str) -> None:
    """`/metrics` from the operator's own registry, on a thread of prometheus_client's."""
    prometheus_client.start_http_server(port, addr=address, registry=metrics.REGISTRY)
    log.info("metrics: serving /metrics on %s:%d", address, port)


_election_fresh: list[Callable[[], bool]] = []
"""The running election's liveness check, read by the probe (empty: no election in this process)."""


async def election_probe(**_: Any) -> str:
    """kopf's liveness URL fails (500) while the election's thread is wedged, leader or standby."""
    if not _election_fresh:
        return "no election"
    if not _election_fresh[-1]():
        raise kopf.PermanentError(f"the leader election has not attempted for {STANDBY_STALE_SECONDS:g} s")
    return "fresh"


def stop_writing_now(reason: str) -> NoReturn:
    """The leader lost its Lease: end the process at once, before another replica may lead."""
    log.critical("leader election: lost the Lease (%s); exiting now so this replica stops writing", reason)
    metrics.LEADER.set(0)
    for handler in logging.getLogger().handlers:
        handler.flush()
    os._exit(LOST_LEASE_EXIT_CODE)


def start_leading(elector: leader.LeaderElector, stop: threading.Event) -> list[threading.Thread]:
    """The renewing loop and its watchdog, each on a daemon thread; either exits the process when the Lease is
    lost, neither does anything once `stop` is set."""

    def guard(loop: Callable[[Callable[[float], bool]], str | None]) -> Callable[[], None]:
        def target() -> None:
            reason = loop(stop.wait)
            if reason is not None and not stop.is_set():
                stop_writing_now(reason)

        return target

    threads = [
        threading.Thread(target=guard(elector.renew_until_lost), name="lease-renew", daemon=True),
        threading.Thread(target=guard(elector.watch), name="lease-watchdog", daemon=True),
    ]
    for thread in threads:
        thread.start()
    return threads


def run_operator(
    loops: Sequence[LoopKind],
    settings: OperatorSettings,
    namespaces: list[str],
    verbose: bool,
    liveness: str | None = None,
    leader_election: LeaderElection | None = None,
    metrics_port: int = 0,
    metrics_address: str = "0.0.0.0",
) -> int:
    """Run `loops` for every CR until kopf stops (0), a standby is stopped (0), or the Lease is lost
    (`LOST_LEASE_EXIT_CODE`)."""
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, format="%(asctime)s %(name)s %(message)s")
    metrics.LEADER.set(0 if leader_election else 1)
    if metrics_port:
        serve_metrics(metrics_port, metrics_address)
    start_pool(settings.workers)
    supervisor = Supervisor(loops, lambda namespace, name, patch: Writer(api_client()).patch_finalizers(
        namespace, name, patch))  # fmt: skip
    registry = operator_registry(supervisor, settings.workers)
    kopf.on.probe(id="leader_election", errors=kopf.ErrorsMode.PERMANENT, registry=registry)(election_probe)
    stopping = threading.Event()  # set once kopf has stopped: the election ends, the renewers stop
    threads: list[threading.Thread] = []
    elector, leases = None, None
    if leader_election:
        lease_client = leader.LeaseClient(api_client(), leader_election.namespace, leader_election.name)
        leases = WatchedLeases(lease_client, lease_events(lease_client))  # the standby reads from one watch
        elector = leader.LeaderElector(
            leases, leader_election.identity, leader_election.timing, look_seconds=LOOK_SECONDS
        )
        _election_fresh.append(lambda: elector.clock() - elector.heartbeat < STANDBY_STALE_SECONDS)
        log.info(
            "leader election: %s competes for Lease %s/%s",
            leader_election.identity, leader_election.namespace, leader_election.name,
        )  # fmt: skip

    def stand_by(loop: asyncio.AbstractEventLoop) -> None:
        """The election's thread: wait for the Lease, then renew it and hand the loops to the event loop."""
        assert elector is not None and leases is not None
        leases.start()
        try:
            won = elector.acquire(stopping.wait)
        finally:
            leases.stop()  # the holder only writes (and reads, with a GET, after a conflict)
        if not won:
            return
        metrics.LEADER.set(1)
        threads.extend(start_leading(elector, stopping))
        try:
            loop.call_soon_threadsafe(supervisor.lead)
        except RuntimeError:  # kopf stopped meanwhile: the loop is closed, nothing to start
            log.info("leader election: won the Lease while stopping")

    async def main() -> None:
        if elector is None:
            supervisor.lead()  # the only replica: it leads from the start
        else:
            election = threading.Thread(target=stand_by, args=(asyncio.get_running_loop(),), name="lease-election")
            election.daemon = True
            threads.append(election)
            election.start()
        await kopf.operator(
            registry=registry,
            clusterwide=not namespaces,
            namespaces=namespaces,
            standalone=True,  # one writer through the Lease, not kopf's peering
            liveness_endpoint=liveness,
        )

    try:
        with asyncio.Runner(loop_factory=KeepaliveEventLoop) as runner:  # keepalive on kopf's connections too
            runner.run(main())
    finally:
        stopping.set()
        for thread in threads:
            thread.join(timeout=sum(leader.LEASE_API_TIMEOUT) + 1)
        if elector is not None:
            elector.release()
            metrics.LEADER.set(0)
            _election_fresh.clear()
    return 0
