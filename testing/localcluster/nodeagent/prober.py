"""Running probes: one asyncio task per (container instance, probe kind), like the kubelet's probe workers.

httpGet goes to the pod IP (2xx/3xx pass, redirects are not followed), tcpSocket connects, exec runs the
command with the container's environment inside its mount namespace. gRPC probes are not implemented and
always fail with a message saying so.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import aiohttp

from localcluster.nodeagent.probes import ProbeSpec, ProbeState, initial_state, observe, resolve_port

OUTPUT_LIMIT = 1024
USER_AGENT = "kube-probe/1.37"


class ProbeTarget:
    """Where and how a container is probed."""

    def __init__(
        self,
        pod_ip: str,
        container: Mapping[str, Any],
        env: Mapping[str, str],
        exec_prefix: Sequence[str],
        session: aiohttp.ClientSession,
        local: Callable[[str, int, str], int | None] | None = None,
    ) -> None:
        """`local(ip, port, path)`: the status a GET would get, answered in-process (a light container's probes,
        `light.py`); None falls back to a real request."""
        self.pod_ip = pod_ip
        self.local = local
        self.container = container
        self.env = dict(env)
        self.exec_prefix = list(exec_prefix)
        self.session = session


async def http_get(target: ProbeTarget, action: Mapping[str, Any], timeout: float) -> tuple[bool, str]:
    port = resolve_port(action.get("port", 80), target.container)
    scheme = str(action.get("scheme") or "HTTP").lower()
    host = action.get("host") or target.pod_ip
    path = action.get("path") or "/"
    if not path.startswith("/"):
        path = "/" + path
    headers = {"User-Agent": USER_AGENT, "Accept": "*/*"}
    headers.update({h["name"]: h["value"] for h in action.get("httpHeaders") or []})
    if target.local is not None and scheme == "http":
        status = target.local(host, port, path)
        if status is not None:
            if 200 <= status < 400:
                return True, ""
            return False, f"HTTP probe failed with statuscode: {status}"
    url = f"{scheme}://{host}:{port}{path}"
    async with target.session.get(
        url,
        headers=headers,
        allow_redirects=False,
        ssl=False,
        timeout=aiohttp.ClientTimeout(total=timeout),
    ) as response:
        body = await response.content.read(OUTPUT_LIMIT)
        if 200 <= response.status < 400:
            return True, ""
        return False, f"HTTP probe failed with statuscode: {response.status} {body[:200]!r}"


async def tcp_socket(target: ProbeTarget, action: Mapping[str, Any], timeout: float) -> tuple[bool, str]:
    port = resolve_port(action["port"], target.container)
    host = action.get("host") or target.pod_ip
    _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True, ""


async def run_exec(target: ProbeTarget, action: Mapping[str, Any], timeout: float) -> tuple[bool, str]:
    command = list(action.get("command") or [])
    if not command:
        return False, "exec probe has no command"
    proc = await asyncio.create_subprocess_exec(
        *target.exec_prefix,
        *command,
        env=target.env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        output, _ = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
        return False, f"command {command!r} timed out after {timeout:g}s"
    text = output[:OUTPUT_LIMIT].decode(errors="replace").strip()
    if proc.returncode == 0:
        return True, text
    return False, f"command {command!r} exited with {proc.returncode}: {text}"


async def check(spec: ProbeSpec, target: ProbeTarget) -> tuple[bool, str]:
    """One probe attempt: (passed, message). Errors count as failures, as in the kubelet."""
    action = spec.action
    try:
        if "httpGet" in action:
            return await http_get(target, action["httpGet"], spec.timeout)
        if "tcpSocket" in action:
            return await tcp_socket(target, action["tcpSocket"], spec.timeout)
        if "exec" in action:
            return await run_exec(target, action["exec"], spec.timeout)
        if "grpc" in action:
            return False, "gRPC probes are not supported by the local node agent"
        return False, f"probe has no handler: {sorted(action)}"
    except TimeoutError:
        return False, f"probe timed out after {spec.timeout:g}s"
    except (OSError, aiohttp.ClientError, ValueError) as err:
        return False, f"probe error: {err}"


OnResult = Callable[[ProbeSpec, ProbeState, ProbeState, str], None]


async def probe_loop(
    spec: ProbeSpec, target: ProbeTarget, started_at: float, on_result: OnResult, initial: ProbeState | None = None
) -> None:
    """Probe every `period` from `started_at + initialDelay` on; report every result (old and new state).

    Runs until cancelled (the container stops), or for a startup probe until it first succeeds.
    """
    state = initial or initial_state(spec.kind)
    first = started_at + spec.initial_delay
    await asyncio.sleep(max(0.0, first - time.time()))
    while True:
        began = time.monotonic()
        ok, message = await check(spec, target)
        new = observe(state, spec, ok, message)
        on_result(spec, state, new, message)
        state = new
        if spec.kind == "startup" and state.result:
            return
        await asyncio.sleep(max(0.0, spec.period - (time.monotonic() - began)))
