"""TCP keepalive on the operator's connections, as client-go's: the kernel ends a dead connection within 165 s and
keeps an idle one open through a load balancer (runtime/keepalive.py)."""

import asyncio
import socket
from typing import Any

import aiohttp
import kopf
import pytest
from aiohttp import web

from sglang_operator.runtime import kube, runner, watches
from sglang_operator.runtime.keepalive import (
    IDLE_SECONDS,
    PROBE_COUNT,
    PROBE_INTERVAL_SECONDS,
    KeepaliveEventLoop,
    set_keepalive,
    urllib3_socket_options,
)
from sglang_operator.settings import OperatorSettings


def keepalive_of(sock: Any) -> tuple[int, int, int, int]:
    """(SO_KEEPALIVE, TCP_KEEPIDLE, TCP_KEEPINTVL, TCP_KEEPCNT) of a socket, as the kernel holds them."""
    return (
        sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE),
        sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE),
        sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL),
        sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT),
    )


WANTED = (1, IDLE_SECONDS, PROBE_INTERVAL_SECONDS, PROBE_COUNT)


async def aiohttp_client_socket() -> tuple[int, int, int, int]:
    """GET from a local aiohttp server through a real aiohttp session (kopf's client); the client socket's
    keepalive, read while the server holds the response open (as a watch does)."""
    inspected = asyncio.Event()

    async def stream(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        await inspected.wait()
        return response

    app = web.Application()
    app.router.add_get("/", stream)
    app_runner = web.AppRunner(app)
    await app_runner.setup()
    await web.TCPSite(app_runner, "127.0.0.1", 0).start()
    port = app_runner.addresses[0][1]
    try:
        async with aiohttp.ClientSession() as session, session.get(f"http://127.0.0.1:{port}/") as response:
            assert response.connection is not None and response.connection.transport is not None
            options = keepalive_of(response.connection.transport.get_extra_info("socket"))
            inspected.set()
            return options
    finally:
        await app_runner.cleanup()


def test_connections_opened_by_the_keepalive_loop_have_keepalive_and_the_default_loops_do_not() -> None:
    with asyncio.Runner(loop_factory=KeepaliveEventLoop) as keepalive_loop:
        assert keepalive_loop.run(aiohttp_client_socket()) == WANTED
    with asyncio.Runner() as default_loop:
        assert default_loop.run(aiohttp_client_socket())[0] == 0  # what kopf's session gets without it


def test_a_socket_that_is_not_tcp_is_left_as_it_is() -> None:
    # A TCP option on an AF_UNIX socket raises (EOPNOTSUPP): set_keepalive must skip it, not fail the connection.
    left, right = socket.socketpair(socket.AF_UNIX)
    with left, right:
        with pytest.raises(OSError):
            left.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, IDLE_SECONDS)
        set_keepalive(left)
        set_keepalive(None)  # a transport without a socket
        assert left.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 0


def test_run_runs_kopf_on_the_keepalive_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[type, tuple[int, int, int, int]]] = []

    async def operator(**_: Any) -> None:  # kopf.operator's place: what its session would get
        seen.append((type(asyncio.get_running_loop()), await aiohttp_client_socket()))

    monkeypatch.setattr(kopf, "operator", operator)
    assert runner.run_operator([], OperatorSettings(), namespaces=["ns"], verbose=False) == 0
    assert seen == [(KeepaliveEventLoop, WANTED)]


def test_the_sync_clients_connections_get_keepalive_whatever_its_version(monkeypatch: pytest.MonkeyPatch) -> None:
    from kubernetes import client, config

    def no_cluster() -> None:
        raise config.ConfigException("not in a cluster")

    def kubeconfig() -> None:
        configuration = client.Configuration()
        configuration.host = "http://127.0.0.1:1"
        client.Configuration.set_default(configuration)

    monkeypatch.setattr(config, "load_incluster_config", no_cluster)
    monkeypatch.setattr(config, "load_kube_config", kubeconfig)
    api = kube.api_client.__wrapped__()
    options = api.rest_client.pool_manager.connection_pool_kw["socket_options"]
    assert options == urllib3_socket_options()
    assert (socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1) in options
    assert (socket.IPPROTO_TCP, socket.TCP_NODELAY, 1) in options  # urllib3's own default kept
    assert (socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, IDLE_SECONDS) in options


def test_watches_are_reopened_every_30_minutes() -> None:
    settings = kopf.OperatorSettings()
    watches.configure(settings, workers=4)
    assert settings.watching.server_timeout == 1800
    assert settings.watching.client_timeout == 1830
