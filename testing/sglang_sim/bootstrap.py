"""A prefill server's bootstrap server (SGLang's `CommonKVBootstrapServer`) and the rooms it hands over.

Served on `--host`:`--disaggregation-bootstrap-port` (never 0.0.0.0 unless that is the host), from process start,
as SGLang's tokenizer manager starts it before the ranks load:

    PUT  /route               a rank registers (attn TP/CP/DP, PP, page size, KV dtype, its ip and port)
    GET  /route               ?prefill_dp_rank=&prefill_cp_rank=&target_tp_rank=&target_pp_rank= (0.5.9:
                              ?engine_rank=&target_dp_group=&target_pp_rank=): with every rank -1 the prefill's
                              layout (503 until every rank has registered; 0.5.9: nulls), else one rank's ip and port
    POST /register_dp_rank    {"bootstrap_room", "dp_rank"} (0.5.10+)
    POST /query_dp_ranks      {"bootstrap_rooms": [...]} -> {"<room>": dp_rank} (0.5.10+)
    GET  /health              200 "OK" as soon as the server listens, before the ranks register
    POST /sim/kv_transfer     the simulator's stand-in for the KV write (no SGLang route): {"op": "send_metadata",
                              "bootstrap_room"} from decode once it has preallocated, answered when the room's KV is
                              written: {"status": "success" | "failed", "reason"}; {"op": "abort", ...} is decode's
                              abort notification (its waiting timeout)

A room is one request's rendezvous: the decode's metadata (`registered`), then the prefill's verdict (`done`).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from sglang_operator.api.releases import parse_version

from .disagg import KV_TRANSFER_ROUTE, REGISTRY_SINCE, PrefillLayout, layout_answer

TOMBSTONES = 4096  # closed rooms remembered, so a late decode learns its room failed


@dataclass
class Room:
    registered: asyncio.Event = field(default_factory=asyncio.Event)  # decode's metadata arrived
    done: asyncio.Future[Verdict] | None = None  # the prefill's verdict on the room
    decode_aborted: asyncio.Event = field(default_factory=asyncio.Event)  # decode's abort notification
    registered_at: float = 0.0
    owned: bool = False  # the prefill has the request (else only the decode's metadata is here)

    def verdict(self) -> asyncio.Future[Verdict]:
        if self.done is None:
            self.done = asyncio.get_running_loop().create_future()
        return self.done


@dataclass(frozen=True)
class Verdict:
    ok: bool
    reason: str | None = None  # why it failed; None: nothing recorded on this side ("from another rank")


class BootstrapServer:
    def __init__(self, host: str, port: int, version: str) -> None:
        self.host = host
        self.port = port
        self.version = version
        self.layout: PrefillLayout | None = None
        self.registered = 0
        self.rank_table: dict[tuple[int, int, int, int], dict[str, Any]] = {}  # (dp, cp, tp, pp) -> ip, port
        self.room_to_dp_rank: dict[int, int] = {}
        self.rooms: dict[int, Room] = {}
        self._closed: OrderedDict[int, Verdict] = OrderedDict()
        self._runner: web.AppRunner | None = None

    # --- lifecycle -------------------------------------------------------------------------------------------

    async def start(self) -> None:
        self._runner = web.AppRunner(self.app(), access_log=None, shutdown_timeout=0.01)
        await self._runner.setup()
        await web.TCPSite(self._runner, self.host, self.port).start()

    @property
    def bound_port(self) -> int:
        """The port it listens on (the configured one while it is not started: SGLANG_SIM_BOOTSTRAP_DOWN)."""
        if self._runner is None:
            return self.port
        return int(self._runner.addresses[0][1])

    async def close(self) -> None:
        for room in self.rooms.values():
            if room.done is not None and not room.done.done():
                room.done.set_result(Verdict(False))
        if self._runner is not None:
            await self._runner.cleanup()

    def register_ranks(self, layout: PrefillLayout, rank_ip: str, rank_port: int) -> None:
        """What each prefill rank's `PUT /route` does once the model is loaded."""
        self.layout = layout
        for dp in range(layout.dp_size):
            for cp in range(layout.attn_cp_size):
                for tp in range(layout.attn_tp_size):
                    for pp in range(layout.pp_size):
                        self.rank_table[(dp, cp, tp, pp)] = {"rank_ip": rank_ip, "rank_port": rank_port}
                        self.registered += 1

    # --- rooms (the prefill side's view) ----------------------------------------------------------------------

    def room(self, room: int, owner: bool = False) -> Room:
        r = self.rooms.setdefault(room, Room())
        r.owned = r.owned or owner
        return r

    def close_room(self, room: int, verdict: Verdict) -> None:
        """The prefill is done with a room: the decode waiting on it (now or later) gets the verdict."""
        r = self.rooms.pop(room, None)
        if r is not None and not r.verdict().done():
            r.verdict().set_result(verdict)
        if r is None or not r.registered.is_set():
            self._closed[room] = verdict if not verdict.ok else Verdict(False)  # a late decode cannot get this KV
            while len(self._closed) > TOMBSTONES:
                self._closed.popitem(last=False)

    # --- routes ------------------------------------------------------------------------------------------------

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/route", self._route)
        if parse_version(self.version) >= REGISTRY_SINCE:
            app.router.add_post("/register_dp_rank", self._register_dp_rank)
            app.router.add_post("/query_dp_ranks", self._query_dp_ranks)
        app.router.add_get("/health", self._health)
        app.router.add_post(KV_TRANSFER_ROUTE, self._kv_transfer)
        return app

    async def _health(self, _: web.Request) -> web.Response:
        return web.Response(text="OK", status=200)

    async def _route(self, request: web.Request) -> web.Response:
        if request.method == "PUT":
            return await self._route_put(request)
        if request.method == "GET":
            return self._route_get(request)
        return web.Response(text="Method not allowed", status=405, content_type="application/json")

    async def _route_put(self, request: web.Request) -> web.Response:
        data = await request.json()
        if self.layout is None:
            self.layout = PrefillLayout(
                attn_tp_size=int(data["attn_tp_size"]),
                attn_cp_size=int(data.get("attn_cp_size", 1)),
                dp_size=int(data["attn_dp_size"] if data.get("system_dp_size", 1) == 1 else data["system_dp_size"]),
                pp_size=int(data["pp_size"]),
                page_size=int(data["page_size"]),
                kv_cache_dtype=str(data.get("kv_cache_dtype")),
                follow_bootstrap_room=data.get("load_balance_method", "follow_bootstrap_room")
                == "follow_bootstrap_room",
                decode_allocation_policy=str(data.get("decode_allocation_policy", "early")),
                http_port=int(data.get("prefill_http_port") or 0),
            )
        dp = data["attn_dp_rank"] if data.get("system_dp_size", 1) == 1 else data["system_dp_rank"]
        key = (int(dp), int(data.get("attn_cp_rank", 0)), int(data["attn_tp_rank"]), int(data["pp_rank"]))
        self.rank_table[key] = {"rank_ip": data["rank_ip"], "rank_port": int(data["rank_port"])}
        self.registered += 1
        return web.Response(text="OK", status=200)

    def _route_get(self, request: web.Request) -> web.Response:
        q = request.query
        legacy = parse_version(self.version) < REGISTRY_SINCE
        names = (
            ("target_dp_group", "engine_rank", "target_pp_rank")
            if legacy
            else ("prefill_dp_rank", "prefill_cp_rank", "target_tp_rank", "target_pp_rank")
        )
        values = [q.get(n) for n in names]
        if not all(values):
            return web.Response(text="Missing inputs for bootstrap server.", status=400)
        try:
            ranks = [int(str(v)) for v in values]
        except ValueError:
            return web.Response(text="500 Internal Server Error", status=500)
        if all(r == -1 for r in ranks):
            status, body = layout_answer(self.layout, self.registered, self.version)
            if isinstance(body, str):
                return web.Response(text=body, status=status)
            return web.json_response(body, status=status)
        if legacy:
            dp, tp, pp = ranks
            info = self.rank_table.get((dp, 0, tp, pp))
            return web.json_response(info) if info else web.Response(text="Bootstrap info not Found", status=404)
        if self.layout is None or self.registered < self._expected():
            return web.Response(
                text=f"Prefill server not fully registered yet ({self.registered} workers registered).", status=503
            )
        dp, cp, tp, pp = ranks
        info = self.rank_table.get((dp, cp, tp, pp))
        if info is None:
            return web.Response(
                text=f"Bootstrap info not found for dp_rank={dp} cp_rank={cp} tp_rank={tp} pp_rank={pp}", status=404
            )
        return web.json_response(info)

    def _expected(self) -> int:
        lay = self.layout
        return 0 if lay is None else lay.dp_size * lay.attn_cp_size * lay.attn_tp_size * lay.pp_size

    async def _register_dp_rank(self, request: web.Request) -> web.Response:
        data = await request.json()
        self.room_to_dp_rank[int(data["bootstrap_room"])] = int(data["dp_rank"])
        return web.Response(text="OK", status=200)

    async def _query_dp_ranks(self, request: web.Request) -> web.Response:
        data = await request.json()
        rooms = (int(r) for r in data["bootstrap_rooms"])
        return web.json_response({str(r): self.room_to_dp_rank[r] for r in rooms if r in self.room_to_dp_rank})

    async def _kv_transfer(self, request: web.Request) -> web.Response:
        try:
            data = await request.json()
            room_id = int(data["bootstrap_room"])
            op = str(data.get("op", "send_metadata"))
        except (ValueError, KeyError, TypeError, json.JSONDecodeError):
            return web.json_response({"status": "failed", "reason": "bad kv_transfer request"}, status=400)
        if op == "abort":
            room = self.rooms.get(room_id)
            if room is not None:
                room.decode_aborted.set()
                if not room.owned:  # the prefill never got this request: nothing will close the room
                    self.close_room(room_id, Verdict(False))
            return web.json_response({"status": "ok"})
        closed = self._closed.pop(room_id, None)
        if closed is not None and room_id not in self.rooms:
            return web.json_response({"status": "failed", "reason": closed.reason})
        room = self.room(room_id)
        if room.registered.is_set():
            return web.json_response({"status": "failed", "reason": "Duplicate decode bootstrap room"})
        room.registered_at = time.monotonic()
        room.registered.set()
        try:
            verdict = await asyncio.shield(room.verdict())
        except asyncio.CancelledError:  # the decode went away (aiohttp cancels on disconnect in some versions)
            room.decode_aborted.set()
            raise
        return web.json_response({"status": "success" if verdict.ok else "failed", "reason": verdict.reason})
