"""TCP keepalive on every connection the operator opens, kopf's watches included.

A connection that died without a FIN or RST (a load balancer's idle timeout, a node or NAT entry gone) shows
nothing: the client learns of it only from a timeout of its own. kopf 1.45 has one for its watches (no event, not
even a bookmark, for 70 s); the kubernetes client's pooled connections (the Lease's renewals, the standby's Lease
watch) have none. client-go dials the API server with TCP keepalive (30 s idle, then the
kernel's probes), which lets the kernel end a dead connection and keeps an idle one alive through a load balancer's
idle timer. Recent kubernetes Python clients do the same (37 does); kopf's aiohttp session does not. So `run` gives
kopf an event loop whose TCP connections all get client-go's keepalive, and `kube.api_client` sets it on the sync
client whatever its version. The watches' own timeout then only bounds a request's length
(`handlers.WATCH_SERVER_TIMEOUT_SECONDS`).
"""

import asyncio
import socket
from typing import Any, Final

IDLE_SECONDS: Final = 30
"""Silence on a connection before the first probe (client-go's dialer)."""
PROBE_INTERVAL_SECONDS: Final = 15
"""Between unanswered probes (Go's default)."""
PROBE_COUNT: Final = 9
"""Unanswered probes before the kernel ends the connection: a dead peer is noticed 30 + 9 x 15 = 165 s after the
last byte."""


def keepalive_options() -> list[tuple[int, int, int]]:
    """`(level, option, value)` for every keepalive option this platform has (Linux has all four; one it lacks is
    left out, the kernel's default then applies). Pure."""
    wanted = [
        (socket.SOL_SOCKET, "SO_KEEPALIVE", 1),
        (socket.IPPROTO_TCP, "TCP_KEEPIDLE", IDLE_SECONDS),
        (socket.IPPROTO_TCP, "TCP_KEEPINTVL", PROBE_INTERVAL_SECONDS),
        (socket.IPPROTO_TCP, "TCP_KEEPCNT", PROBE_COUNT),
    ]
    return [(level, getattr(socket, name), value) for level, name, value in wanted if hasattr(socket, name)]


def urllib3_socket_options() -> list[tuple[int, int, int]]:
    """urllib3's default options (no Nagle; it replaces its defaults with the list it is given) plus keepalive."""
    from urllib3.connection import HTTPConnection

    return [*HTTPConnection.default_socket_options, *keepalive_options()]


def set_keepalive(sock: Any) -> None:
    """Keepalive on a connected TCP socket (IPv4 or IPv6); any other socket is left as it is."""
    if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return
    for level, option, value in keepalive_options():
        sock.setsockopt(level, option, value)


class KeepaliveEventLoop(asyncio.SelectorEventLoop):
    """asyncio's default loop on Linux, with keepalive on every TCP connection it opens. aiohttp (kopf's client,
    the router and Prometheus clients) connects through `create_connection`, so this is the one place that sees
    every client socket without reaching into kopf's session."""

    async def create_connection(self, *args: Any, **kwargs: Any) -> Any:
        transport, protocol = await super().create_connection(*args, **kwargs)
        set_keepalive(transport.get_extra_info("socket"))
        return transport, protocol
