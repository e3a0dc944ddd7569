"""The kubelet's container log endpoint, so `kubectl logs [-f] [--previous] [--tail N]` works.

The apiserver proxies `pods/log` to `https://<node InternalIP>:<kubeletEndpoint port>/containerLogs/...`; all
nodes share 127.0.0.1 and this one server. It uses a self-signed certificate (made with `openssl` in the state
dir): the local apiserver has no `--kubelet-certificate-authority`, so it does not verify it. Logs are the
raw process output (no CRI timestamps; `timestamps=true` and `sinceSeconds` are ignored). exec, attach and
port-forward are not available.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import subprocess
from pathlib import Path

from aiohttp import web

from localcluster.nodeagent.layout import Layout

log = logging.getLogger(__name__)
DEFAULT_PORT = 10250
FOLLOW_POLL_S = 0.5
CHUNK = 64 * 1024


def ensure_certificate(layout: Layout) -> tuple[Path, Path]:
    folder = layout.root / "kubelet-pki"
    crt, key = folder / "kubelet.crt", folder / "kubelet.key"
    if crt.exists() and key.exists():
        return crt, key
    folder.mkdir(parents=True, exist_ok=True)
    subject = ["-subj", "/CN=localcluster-node-agent", "-addext", "subjectAltName=IP:127.0.0.1"]
    files = ["-keyout", str(key), "-out", str(crt)]
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "3650", *subject, *files],
        check=True,
        capture_output=True,
    )
    return crt, key


def free_port(preferred: int) -> int:
    for port in (preferred, 0):
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return int(sock.getsockname()[1])
    raise RuntimeError("no free port for the kubelet log endpoint")


def container_logs(layout: Layout, namespace: str, pod: str, container: str) -> list[Path]:
    """Log files of the container, oldest restart first, for the newest pod of that name."""
    folders = sorted((layout.root / "logs").glob(f"{namespace}_{pod}_*/{container}"), key=lambda p: p.stat().st_mtime)
    if not folders:
        return []
    return sorted(folders[-1].glob("*.log"), key=lambda p: int(p.stem))


def tail_bytes(data: bytes, lines: int) -> bytes:
    if lines < 0:
        return data
    if lines == 0:
        return b""
    parts = data.splitlines(keepends=True)
    return b"".join(parts[-lines:])


class LogServer:
    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self.port = 0
        self._runner: web.AppRunner | None = None

    async def start(self, preferred_port: int = DEFAULT_PORT) -> int:
        crt, key = await asyncio.to_thread(ensure_certificate, self.layout)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(crt, key)
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/containerLogs/{namespace}/{pod}/{container}", self._logs)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        self.port = free_port(preferred_port)
        await web.TCPSite(self._runner, "127.0.0.1", self.port, ssl_context=context).start()
        return self.port

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _healthz(self, _: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _logs(self, request: web.Request) -> web.StreamResponse:
        info, query = request.match_info, request.query
        files = container_logs(self.layout, info["namespace"], info["pod"], info["container"])
        previous = query.get("previous") == "true"
        if not files or (previous and len(files) < 2):
            which = "previous terminated container" if previous else "container"
            raise web.HTTPNotFound(text=f'{which} "{info["container"]}" in pod "{info["pod"]}" has no logs')
        path = files[-2] if previous else files[-1]
        data = path.read_bytes()
        data = tail_bytes(data, int(query.get("tailLines", "-1")))
        limit = int(query.get("limitBytes", "0") or 0)
        if limit > 0:
            data = data[:limit]
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await response.prepare(request)
        await response.write(data)
        if query.get("follow") == "true" and not previous and not limit:
            await self._follow(response, path, path.stat().st_size)
        await response.write_eof()
        return response

    async def _follow(self, response: web.StreamResponse, path: Path, offset: int) -> None:
        """Stream what the process writes until it is replaced by a restart or its pod is gone."""
        while True:
            try:
                with path.open("rb") as handle:
                    handle.seek(offset)
                    chunk = handle.read(CHUNK)
            except FileNotFoundError:
                return
            if chunk:
                offset += len(chunk)
                await response.write(chunk)
                continue
            newer = [p for p in path.parent.glob("*.log") if int(p.stem) > int(path.stem)]
            uid = path.parent.parent.name.rsplit("_", 1)[-1]
            if newer or not self.layout.pod(uid).exists():
                return
            await asyncio.sleep(FOLLOW_POLL_S)
