"""Light pods: SGLang workers and smg routers answered from the agent's own event loop, with no process each.

Why: a real pod here is a process (the simulator: ~60 MB, the real `smg`: ~60 MB and a few threads), so a machine
with 2 cores holds a few dozen fleets. A scale benchmark of the *operator* needs hundreds of fleets whose pods only
have to look real from the outside: an address, listening ports, probes that pass, the endpoints the operator and
its routers call. A light pod is exactly that. `images.py` decides which pods are light (an image whose repository
ends in `-light`, or the pod annotation `localcluster.sglang.ai/light: "true"`); everything else about the pod
(scheduling, IP, volumes, probes, status, deletion) is the same code path as for a real one.

One `LightServer` per agent runs one aiohttp application; each light pod adds a listening socket on its own
127.x.y.z address for each of its ports, and a request is routed to the pod by the address it arrived on.

A light SGLang worker (`kind` "sglang") answers, on every port it listens on:
    GET /health, /health_generate, /ping, /ready   200 once up, 503 before (up after SGLANG_SIM_STARTUP_SECONDS,
                                                   default 0, like the simulator's knob)
    GET /v1/loads                                  one DP rank with nothing running or waiting
    GET /metrics                                   SGLang's gauge names, all 0
    GET /v1/models, /model_info, /get_model_info, /server_info, /get_server_info
    anything else                                  501: a light worker serves no inference
A light router (`kind` "router") answers smg's worker API (shared/reference/smg-router.md section 3):
    GET /workers, GET /workers/{id}, POST /workers {"url": ...} (202, or 409 for a known URL),
    DELETE /workers/{id} (202, 404 when unknown); GET /health, /liveness (200 "OK"), /readiness (200 with a worker,
    else 503), /metrics; anything else 501.
Each worker entry carries `registered_at` (epoch seconds at which its POST arrived), so a benchmark reads
registration times from the routers once instead of polling hundreds of them.

Probes of a light container are answered by the same functions without a socket (`probe`): 400 pods probed every
few seconds would otherwise cost the agent a core of HTTP round trips to itself, and the answer is the same.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from localcluster.nodeagent.process import ProcRecord

STARTUP_ENV = "SGLANG_SIM_STARTUP_SECONDS"
MAX_STARTUP_S = 3600.0
MAX_ROUTER_WORKERS = 10_000  # a router of a benchmark fleet never holds more; a bound on what a POST can grow
MAX_BODY_BYTES = 64 * 1024
PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"
WORKER_GAUGES = (
    "sglang:num_running_reqs",
    "sglang:num_queue_reqs",
    "sglang:num_used_tokens",
    "sglang:token_usage",
    "sglang:cache_hit_rate",
    "sglang:gen_throughput",
)
HEALTH_PATHS = ("/health", "/health_generate", "/ping", "/ready")


# ----- what a light pod is (pure) ------------------------------------------------------------------------------


def flag_value(argv: Sequence[str], flag: str) -> str | None:
    """The value of `--flag V` or `--flag=V` (the last one wins, as with argparse)."""
    value = None
    for index, arg in enumerate(argv):
        if arg == flag and index + 1 < len(argv):
            value = argv[index + 1]
        elif arg.startswith(flag + "="):
            value = arg.split("=", 1)[1]
    return value


def light_ports(kind: str, container: Mapping[str, Any], argv: Sequence[str]) -> tuple[int, ...]:
    """Every port the real program would listen on: the container's declared ports and the ports its flags name
    (SGLang's `--port`, default 30000; smg's `--port` and `--prometheus-port`, defaults 30000 and 29000)."""
    ports = {int(p["containerPort"]) for p in container.get("ports") or [] if p.get("containerPort")}
    flags = {"--port": "30000"} if kind == "sglang" else {"--port": "30000", "--prometheus-port": "29000"}
    for flag, default in flags.items():
        value = flag_value(argv, flag) or default
        if value.isdigit():
            ports.add(int(value))
    return tuple(sorted(p for p in ports if 0 < p < 65536))


def startup_seconds(env: Mapping[str, str]) -> float:
    try:
        value = float(env.get(STARTUP_ENV, "0") or 0)
    except ValueError:
        return 0.0
    return min(max(value, 0.0), MAX_STARTUP_S) if value == value else 0.0  # NaN reads as 0


@dataclass
class LightPod:
    kind: str  # "sglang" | "router"
    ip: str
    ports: tuple[int, ...]
    model: str = "default"
    startup_s: float = 0.0
    started: float = field(default_factory=time.monotonic)
    workers: dict[str, dict[str, Any]] = field(default_factory=dict)  # router: id -> entry

    def up(self, now: float | None = None) -> bool:
        return (time.monotonic() if now is None else now) - self.started >= self.startup_s


def make_pod(kind: str, ip: str, container: Mapping[str, Any], argv: Sequence[str], env: Mapping[str, str]) -> LightPod:
    model = flag_value(argv, "--served-model-name") or flag_value(argv, "--model-path") or "default"
    startup = startup_seconds(env) if kind == "sglang" else 0.0
    return LightPod(kind, ip, light_ports(kind, container, argv), model, startup)


Answer = tuple[int, Any]  # (HTTP status, body: a dict/list for JSON or a str for text)


def worker_get(pod: LightPod, path: str) -> Answer:
    up = pod.up()
    if path in HEALTH_PATHS:
        return (200, "") if up else (503, "")
    if path == "/metrics":
        labels = f'{{model_name="{pod.model}"}}'
        lines = [line for name in WORKER_GAUGES for line in (f"# TYPE {name} gauge", f"{name}{labels} 0.0")]
        return 200, "\n".join(lines) + "\n"
    if not up:
        return 503, {"detail": "server is starting"}
    if path == "/v1/loads":
        rank = {"dp_rank": 0, "num_running_reqs": 0, "num_waiting_reqs": 0, "num_used_tokens": 0, "token_usage": 0.0}
        return 200, {"timestamp": time.time(), "dp_rank_count": 1, "loads": [rank]}
    if path == "/v1/models":
        return 200, {"object": "list", "data": [{"id": pod.model, "object": "model", "owned_by": "sglang"}]}
    if path in ("/model_info", "/get_model_info"):
        return 200, {"model_path": pod.model, "tokenizer_path": pod.model, "is_generation": True}
    if path in ("/server_info", "/get_server_info"):
        return 200, {"model_path": pod.model, "served_model_name": pod.model, "light": True}
    return 501, {"detail": f"a light worker does not serve {path}"}


def router_get(pod: LightPod, path: str) -> Answer:
    if path in ("/health", "/liveness"):
        return 200, "OK"
    if path == "/readiness":
        n = len(pod.workers)
        if n:
            return 200, {"status": "ready", "healthy_workers": n, "total_workers": n}
        return 503, {"status": "not ready", "reason": "insufficient healthy workers"}
    if path == "/workers":
        workers = [dict(w) for w in pod.workers.values()]
        stats = {"prefill_count": 0, "decode_count": 0, "regular_count": len(workers)}
        return 200, {"workers": workers, "total": len(workers), "stats": stats}
    if path.startswith("/workers/"):
        entry = pod.workers.get(path[len("/workers/") :])
        return (200, dict(entry)) if entry else (404, {"error": "Worker not found", "code": "WORKER_NOT_FOUND"})
    if path == "/metrics":
        return 200, f"# TYPE smg_worker_pool_size gauge\nsmg_worker_pool_size {len(pod.workers)}\n"
    return 501, {"error": f"a light router does not serve {path}"}


def router_add(pod: LightPod, body: Any, now: float) -> Answer:
    """smg's POST /workers: a new URL is accepted (202) and listed ready at once; a known one is a 409."""
    url = body.get("url") if isinstance(body, dict) else None
    if not isinstance(url, str) or not url:
        return 400, {"error": "Invalid JSON data: missing field `url`", "code": "BAD_REQUEST"}
    for entry in pod.workers.values():
        if entry["url"] == url:
            return 409, {
                "error": f"Worker already exists at URL '{url}' with ID {entry['id']}.",
                "code": "WORKER_ALREADY_EXISTS",
            }
    if len(pod.workers) >= MAX_ROUTER_WORKERS:
        return 429, {"error": "too many workers", "code": "TOO_MANY_WORKERS"}
    worker_id = str(uuid.uuid4())
    pod.workers[worker_id] = {
        "id": worker_id,
        "url": url,
        "model_id": body.get("model_id") or "default",
        "worker_type": "regular",
        "connection_mode": "http",
        "is_healthy": True,
        "status": "ready",
        "load": 0,
        "registered_at": now,
    }
    location = f"/workers/{worker_id}"
    return 202, {"status": "accepted", "worker_id": worker_id, "url": url, "location": location,
                 "message": "Worker addition queued for background processing"}  # fmt: skip


def router_remove(pod: LightPod, worker_id: str) -> Answer:
    if pod.workers.pop(worker_id, None) is None:
        return 404, {"error": f"Worker {worker_id} not found", "code": "WORKER_NOT_FOUND"}
    return 202, {
        "status": "accepted",
        "worker_id": worker_id,
        "message": "Worker removal queued for background processing",
    }


def answer(pod: LightPod, method: str, path: str, body: Any, now: float) -> Answer:
    """What the pod answers to one request (pure apart from a router's worker table)."""
    if pod.kind == "router":
        if method == "POST" and path == "/workers":
            return router_add(pod, body, now)
        if method == "DELETE" and path.startswith("/workers/"):
            return router_remove(pod, path[len("/workers/") :])
        if method in ("GET", "HEAD"):
            return router_get(pod, path)
        return 501, {"error": f"a light router does not serve {method} {path}"}
    if method in ("GET", "HEAD"):
        return worker_get(pod, path)
    return 501, {"detail": f"a light worker does not serve {method} {path}"}


# ----- serving (I/O) -------------------------------------------------------------------------------------------


class LightServer:
    """One aiohttp application for every light pod of this agent; a listening socket per pod address and port."""

    def __init__(self) -> None:
        app = web.Application(client_max_size=MAX_BODY_BYTES)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        self._pods: dict[tuple[str, int], LightPod] = {}
        self._started = False

    async def start(self) -> None:
        if not self._started:
            await self._runner.setup()
            self._started = True

    async def close(self) -> None:
        if self._started:
            await self._runner.cleanup()
            self._started = False
        self._pods.clear()

    async def open(self, pod: LightPod) -> list[web.TCPSite]:
        """Listen on every port of the pod on its address; OSError (e.g. port in use) leaves nothing open."""
        await self.start()
        sites: list[web.TCPSite] = []
        try:
            for port in pod.ports:
                site = web.TCPSite(self._runner, pod.ip, port, reuse_address=True)
                await site.start()
                sites.append(site)
        except OSError:
            await self._stop_sites(sites)
            raise
        for port in pod.ports:
            self._pods[(pod.ip, port)] = pod
        return sites

    async def release(self, pod: LightPod, sites: Sequence[web.TCPSite]) -> None:
        for port in pod.ports:
            if self._pods.get((pod.ip, port)) is pod:
                del self._pods[(pod.ip, port)]
        await self._stop_sites(sites)

    @staticmethod
    async def _stop_sites(sites: Sequence[web.TCPSite]) -> None:
        for site in sites:
            try:
                await site.stop()
            except (RuntimeError, OSError):  # already stopped (the runner was cleaned up first)
                continue

    def probe(self, ip: str, port: int, path: str) -> int | None:
        """The status a GET of `path` would get, without a socket; None when nothing of ours listens there."""
        pod = self._pods.get((ip, port))
        if pod is None:
            return None
        return answer(pod, "GET", path.split("?", 1)[0], None, time.time())[0]

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        sockname = request.transport.get_extra_info("sockname") if request.transport else None
        pod = self._pods.get((sockname[0], sockname[1])) if sockname else None
        if pod is None:
            # The pod stopped while a keep-alive connection stayed open: drop it, as the end of a process would.
            if request.transport is not None:
                request.transport.abort()
            return web.Response(status=503)
        body: Any = None
        if request.method == "POST" and request.can_read_body:
            try:
                body = json.loads(await request.read() or b"null")
            except (ValueError, UnicodeDecodeError):
                return web.json_response({"error": "Invalid JSON data", "code": "BAD_REQUEST"}, status=400)
        status, payload = answer(pod, request.method, request.path, body, time.time())
        if isinstance(payload, str):
            content_type = PROMETHEUS_TEXT if request.path == "/metrics" else "text/plain"
            return web.Response(status=status, text=payload, headers={"Content-Type": content_type})
        return web.json_response(payload, status=status)


class LightProc:
    """A light container as the pod worker sees a process: a record, an exit future, signals, stop.

    There is no pid (0): nothing to adopt after an agent restart (the container then counts as exited with the old
    agent and starts again), no pidfile, and exec probes and hooks run on the host.
    """

    def __init__(self, record: ProcRecord, server: LightServer, pod: LightPod, sites: Sequence[web.TCPSite]) -> None:
        self.record = record
        self.popen = None
        self.server, self.pod, self.sites = server, pod, list(sites)
        self.exited: asyncio.Future[int | None] = asyncio.get_running_loop().create_future()
        self.signal_number: int | None = None

    @property
    def pid(self) -> int:
        return 0

    def signal(self, sig: int) -> None:
        """SIGTERM and SIGKILL end it at once (nothing to drain); other signals are ignored, as by the simulator."""
        if sig in (signal.SIGTERM, signal.SIGKILL) and not self.exited.done():
            self.signal_number = sig if sig == signal.SIGKILL else None
            asyncio.get_running_loop().create_task(self._end(137 if sig == signal.SIGKILL else 0))

    async def _end(self, code: int) -> None:
        await self.server.release(self.pod, self.sites)
        if not self.exited.done():
            self.exited.set_result(code)

    async def stop(self, grace: float) -> int | None:
        if not self.exited.done():
            await self._end(0)
        return self.exited.result()
