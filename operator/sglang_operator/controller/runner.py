"""`sglang-operator run`: serve the operator's metrics, win the leader Lease (with `--leader-elect`), then run kopf
with this package's handlers.

Only the Lease's holder runs kopf, so kopf itself stays `standalone` (no peering). A standby serves `/metrics` (leader
gauge 0) and answers kopf's liveness URL itself, since kopf's own endpoint exists only while kopf runs. The holder
renews from a thread of its own and a watchdog thread exits the process the moment the last renewal is older than
the renew deadline: `os._exit`, not a graceful kopf stop, because a graceful stop lets handlers run on (and write)
for up to their cancellation timeout, after another replica may already lead. The pod restarts and stands by.
A graceful stop (SIGTERM) of the holder lets kopf finish, then releases the Lease so the standby takes over at once.
"""

import asyncio
import logging
import os
import signal
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType
from typing import Final, NoReturn

import kopf
import prometheus_client

from .. import metrics
from . import leader
from .leasewatch import WatchedLeases, lease_events

log = logging.getLogger(__name__)

LOST_LEASE_EXIT_CODE: Final = 3
"""Exit status of a leader that could not renew its Lease: not 0, so that any supervisor restarts it."""
STANDBY_STALE_SECONDS: Final = 30.0
"""A standby whose election loop has not attempted for this long is reported unhealthy (a wedged loop would never
take over); attempts come every retry period and each call is bounded by the Lease timeout."""


def operator_environment(
    prometheus_url: str | None = None,
    prometheus_token_file: str | None = None,
    prometheus_ca_file: str | None = None,
    allowed_prometheus_urls: list[str] | None = None,
    allowed_host_paths: list[str] | None = None,
    operator_namespace: str | None = None,
    operator_pod_labels: str | None = None,
    prometheus_namespace_labels: str | None = None,
    prometheus_pod_labels: str | None = None,
) -> dict[str, str]:
    """The environment variables `run` sets from its flags, read by `settings.load_settings` and the autoscaler.
    Pure; only the flags given appear (the chart may set the variables itself)."""
    from ..autoscaling.credentials import CA_FILE_ENV, TOKEN_FILE_ENV
    from ..autoscaling.loop import PROMETHEUS_URL_ENV
    from ..settings import (
        ENV_ALLOWED_HOST_PATHS,
        ENV_ALLOWED_PROMETHEUS_URLS,
        ENV_OPERATOR_NAMESPACE,
        ENV_OPERATOR_POD_LABELS,
        ENV_PROMETHEUS_NAMESPACE_LABELS,
        ENV_PROMETHEUS_POD_LABELS,
    )

    values = {
        PROMETHEUS_URL_ENV: prometheus_url,
        TOKEN_FILE_ENV: prometheus_token_file,
        CA_FILE_ENV: prometheus_ca_file,
        ENV_ALLOWED_PROMETHEUS_URLS: ",".join(allowed_prometheus_urls or []),
        ENV_ALLOWED_HOST_PATHS: ",".join(allowed_host_paths or []),
        ENV_OPERATOR_NAMESPACE: operator_namespace,
        ENV_OPERATOR_POD_LABELS: operator_pod_labels,
        ENV_PROMETHEUS_NAMESPACE_LABELS: prometheus_namespace_labels,
        ENV_PROMETHEUS_POD_LABELS: prometheus_pod_labels,
    }
    return {env: value for env, value in values.items() if value}


@dataclass(frozen=True)
class LeaderElection:
    """`run --leader-elect`: the Lease `namespace/name` and this process's holder identity (with its suffix)."""

    namespace: str
    name: str
    identity: str
    timing: leader.Timing = field(default_factory=leader.Timing)


def serve_metrics(port: int, address: str) -> None:
    """`/metrics` from the operator's own registry, on a thread of prometheus_client's."""
    prometheus_client.start_http_server(port, addr=address, registry=metrics.REGISTRY)
    log.info("metrics: serving /metrics on %s:%d", address, port)


class _ReusableServer(ThreadingHTTPServer):
    allow_reuse_address = True  # kopf binds the same port right after
    daemon_threads = True


@contextmanager
def standby_liveness(url: str | None, fresh: Callable[[], bool]) -> Iterator[None]:
    """Answer kopf's liveness URL while kopf does not run: 200 while `fresh()`, else 503. Closed (its port free
    for kopf) when the block ends."""
    if not url:
        yield
        return
    parts = urllib.parse.urlsplit(url)
    path = parts.path or "/"

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # http.server's naming
            ok = self.path.split("?", 1)[0] == path and fresh()
            body = b"standby\n" if ok else b"unhealthy\n"
            self.send_response(200 if ok else 503)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            return  # a probe every few seconds is not worth a log line

    server = _ReusableServer((parts.hostname or "0.0.0.0", parts.port or 80), Handler)
    thread = threading.Thread(target=server.serve_forever, name="standby-liveness", daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@contextmanager
def stop_on_signals() -> Iterator[threading.Event]:
    """SIGTERM/SIGINT set the event while a standby waits (it holds nothing: it just leaves); the previous handlers
    come back afterwards, for kopf to install its own."""
    stop = threading.Event()

    def handler(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield stop
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


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
    namespaces: list[str],
    verbose: bool,
    liveness: str | None = None,
    environment: dict[str, str] | None = None,
    leader_election: LeaderElection | None = None,
    metrics_port: int = 0,
    metrics_address: str = "0.0.0.0",
) -> int:
    """Run until kopf stops (0), a standby is stopped (0), or the Lease is lost (`LOST_LEASE_EXIT_CODE`)."""
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, format="%(asctime)s %(name)s %(message)s")
    os.environ.update(environment or {})  # the settings' variables, from `operator_environment`
    from ..autoscaling import daemon  # noqa: F401  (registers the autoscaler)
    from ..doctor import daemon as doctor_daemon  # noqa: F401  (registers the fleet doctor)
    from . import handlers  # noqa: F401  (registers the handlers)
    from .kube import api_client

    metrics.LEADER.set(0 if leader_election else 1)  # without election this process is the only writer
    if metrics_port:
        serve_metrics(metrics_port, metrics_address)
    elector = None
    renewers: list[threading.Thread] = []
    leading = threading.Event()  # set: stop renewing (kopf has stopped)
    if leader_election:
        lease_client = leader.LeaseClient(api_client(), leader_election.namespace, leader_election.name)
        leases = WatchedLeases(lease_client, lease_events(lease_client))  # the standby reads from one watch
        leases.start()
        elector = leader.LeaderElector(leases, leader_election.identity, leader_election.timing)
        log.info(
            "leader election: %s competes for Lease %s/%s",
            leader_election.identity, leader_election.namespace, leader_election.name,
        )  # fmt: skip

        def fresh() -> bool:
            assert elector is not None
            return elector.clock() - elector.heartbeat < STANDBY_STALE_SECONDS

        with stop_on_signals() as stopping, standby_liveness(liveness, fresh):
            try:
                if not elector.acquire(stopping.wait):
                    log.info("leader election: stopped while standing by")
                    return 0
            finally:
                leases.stop()  # the holder only writes (and reads, with a GET, after a conflict)
        metrics.LEADER.set(1)
        renewers = start_leading(elector, leading)
    try:
        asyncio.run(
            kopf.operator(
                clusterwide=not namespaces,
                namespaces=namespaces,
                standalone=True,  # only the Lease's holder runs kopf: no peering needed
                liveness_endpoint=liveness,
            )
        )
    finally:
        if elector is not None:
            leading.set()
            for thread in renewers:
                thread.join(timeout=sum(leader.LEASE_API_TIMEOUT) + 1)
            elector.release()
            metrics.LEADER.set(0)
    return 0
