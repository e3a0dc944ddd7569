"""A PD request's life on a prefill or a decode server, driven with asyncio around the engine's `Runtime`.

Prefill (`_prefill`): bootstrap queue until the decode holding the same room has sent its metadata (or
SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT passes: "Prefill bootstrap failed ..."), then the engine prefills it with
`max_new_tokens` 1, then the inflight queue while its KV is written (transfer time), then the room's verdict goes to
the decode and the answer (one token, finish_reason length 0) to the client. A decode's abort notification turns
the transfer into "Prefill transfer failed ...".

Decode (`_decode`): prealloc queue while it fetches the prefill's layout from the bootstrap server (once per prefill;
a page-size, KV-dtype or PP mismatch kills the server, as SGLang's scheduler raises) and waits for a request slot
(running + preallocated <= max running + the release's extra slots), then the transfer queue while it waits for the
room's KV (`POST /sim/kv_transfer`; SGLANG_DISAGGREGATION_WAITING_TIMEOUT: "Decode transfer failed ... timed out
... in KVPoll.WaitingForInput"), then the engine generates from the transferred first token.

Host 2.2.2.2 (warmup, health generation) is a fake transfer: each side runs the request alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections import deque
from collections.abc import AsyncGenerator, Callable
from dataclasses import replace
from typing import Any

import aiohttp

from sglang_operator.api.releases import parse_version

from . import disagg
from .args import ServerArgs
from .bootstrap import BootstrapServer, Verdict
from .disagg import PdQueues, PdRequest, PdTimeouts, RemoteLayout
from .engine import Job
from .knobs import SimKnobs
from .metrics import SimMetrics
from .runtime import Progress, Runtime

log = logging.getLogger("sglang.srt.disaggregation")
req_log = logging.getLogger("sglang.srt.managers.tokenizer_manager")


class PdFailure(Exception):
    """A PD request the scheduler aborted; `message` is its FINISH_ABORT message, answered with `status`."""

    def __init__(self, message: str, status: int = 500) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


class PdRuntime:
    def __init__(
        self,
        args: ServerArgs,
        knobs: SimKnobs,
        runtime: Runtime,
        metrics: SimMetrics,
        timeouts: PdTimeouts,
        crash: Callable[[str], None],
        max_running_per_rank: int,
        bootstrap: BootstrapServer | None = None,
    ) -> None:
        self.args = args
        self.knobs = knobs
        self.runtime = runtime
        self.metrics = metrics
        self.timeouts = timeouts
        self.crash = crash
        self.bootstrap = bootstrap
        self.queues = PdQueues(args.num_dp_ranks)
        self.capacity = max_running_per_rank + disagg.extra_decode_slots(args, max_running_per_rank)
        self.clock = runtime.clock
        self._layouts: dict[str, RemoteLayout] = {}
        self._fetching: dict[str, asyncio.Task[RemoteLayout | None]] = {}
        self._warned_tp = False
        self._slot_waiters: deque[tuple[int, asyncio.Future[None], Callable[[], None]]] = deque()
        self._background: set[asyncio.Task[None]] = set()
        self._session: aiohttp.ClientSession | None = None
        runtime.listeners.append(self._wake_slot_waiters)

    @property
    def tp_rank(self) -> int:
        return 0

    async def close(self) -> None:
        for task in (*self._fetching.values(), *self._background):
            task.cancel()
        if self._session is not None:
            await self._session.close()

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, sock_connect=5))
        return self._session

    # --- entry ---------------------------------------------------------------------------------------------------

    async def run(self, job: Job, streaming: bool, req: PdRequest) -> AsyncGenerator[Progress, None]:
        """Yield the request's progress, as `Runtime.run`; raises PdFailure when the scheduler aborts it."""
        req_log.info(
            "Receive: rid=%s disaggregation_mode=%s bootstrap_host=%s bootstrap_port=%s bootstrap_room=%s",
            job.rid, self.args.disaggregation_mode, req.host, req.port, req.room,
        )  # fmt: skip
        if self.args.disaggregation_mode == "prefill":
            gen = self._prefill(job, streaming, req)
        else:
            gen = self._decode(job, streaming, req)
        async with contextlib.aclosing(gen) as g:
            async for p in g:
                yield p

    def _fail(
        self, stage: str, rank: int, job: Job, room: int, reason: str | None, arrival: float, streaming: bool
    ) -> PdFailure:
        message = disagg.failure_message(stage, self.tp_rank, job.rid, room, reason)
        (log.warning if stage.startswith("Prefill") else log.error)(message)
        self.metrics.count_pd_failure("bootstrap" if stage.endswith(("bootstrap", "handshake")) else "transfer", rank)
        self.metrics.observe_pd_failed(job.prompt.num_tokens, self.clock() - arrival, streaming)
        return PdFailure(message)

    # --- prefill -------------------------------------------------------------------------------------------------

    def _prefill_rank(self, room: int, pinned: int | None) -> int:
        """follow_bootstrap_room: room % DP size, unless the router pinned a rank; other methods dispatch and
        register the room's rank (the sender's POST /register_dp_rank) for decode to query."""
        n = self.args.num_dp_ranks
        if pinned is not None:
            rank = pinned
        elif self.args.load_balance_method == "follow_bootstrap_room":
            return room % n
        else:
            rank = self.runtime.engine.pick_rank()
        if self.bootstrap is not None:
            self.bootstrap.room_to_dp_rank[room] = rank
        return rank

    async def _prefill(self, job: Job, streaming: bool, req: PdRequest) -> AsyncGenerator[Progress, None]:
        one = replace(job, max_new_tokens=1)  # PrefillBootstrapQueue._process_req
        bs = self.bootstrap
        if disagg.is_fake_transfer(req, self.args) or bs is None or req.room is None:
            async with contextlib.aclosing(self.runtime.run(one, streaming)) as gen:
                async for p in gen:
                    yield p
            return
        room, arrival, tokens = req.room, self.clock(), job.prompt.num_tokens
        rank = self._prefill_rank(room, job.dp_rank)
        one = replace(one, dp_rank=rank)
        r = bs.room(room, owner=True)
        verdict: Verdict | None = Verdict(False)  # None once handed to the decode
        try:
            self.queues.enter("bootstrap", rank, job.rid, tokens)
            try:
                await asyncio.wait_for(r.registered.wait(), timeout=self.timeouts.bootstrap_s)
            except TimeoutError:
                reason = disagg.bootstrap_timed_out(room, self.clock() - arrival)
                verdict = Verdict(False, reason)
                raise self._fail("Prefill bootstrap", rank, job, room, reason, arrival, streaming) from None
            finally:
                self.queues.leave("bootstrap", rank, job.rid)
            self.metrics.observe_kv_bootstrap(rank, (self.clock() - arrival) * 1000, 0.0)
            if r.decode_aborted.is_set():
                raise self._fail("Prefill bootstrap", rank, job, room, None, arrival, streaming)
            last: Progress | None = None
            async with contextlib.aclosing(self.runtime.run(one, False, arrival=arrival, observe=False)) as gen:
                async for p in gen:
                    last = p
            assert last is not None
            t0 = self.clock()
            self.queues.enter("inflight", rank, job.rid, tokens)
            try:
                seconds = self.knobs.scaled(
                    disagg.transfer_seconds(tokens, self.knobs.kv_bytes_per_token, self.knobs.kv_transfer_gbps)
                )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(r.decode_aborted.wait(), timeout=seconds)
            finally:
                self.queues.leave("inflight", rank, job.rid)
            if r.decode_aborted.is_set():
                raise self._fail("Prefill transfer", rank, job, room, None, arrival, streaming)
            latency_ms, total_mb, speed = self.queues.record_transfer(
                self.clock() - t0, tokens * self.knobs.kv_bytes_per_token
            )
            self.metrics.observe_kv_transfer(rank, latency_ms, total_mb, speed)
            bs.close_room(room, Verdict(True))  # KVPoll.Success reaches the decode
            verdict = None
            self.metrics.observe_finished(last.schedule, self.clock() - arrival, streaming, first_token=False)
            yield Progress(last.schedule, last.tokens, True)
        finally:
            if verdict is not None:
                bs.close_room(room, verdict)

    # --- decode --------------------------------------------------------------------------------------------------

    async def _decode(self, job: Job, streaming: bool, req: PdRequest) -> AsyncGenerator[Progress, None]:
        if disagg.is_fake_transfer(req, self.args) or req.room is None:
            async with contextlib.aclosing(self.runtime.run(job, streaming)) as gen:
                async for p in gen:
                    yield p
            return
        room, arrival, tokens = req.room, self.clock(), job.prompt.num_tokens
        rank = job.dp_rank if job.dp_rank is not None else self.runtime.engine.pick_rank()

        def grant() -> None:  # preallocated: from the prealloc queue to the transfer queue, in one step
            self.queues.leave("prealloc", rank, job.rid)
            self.queues.enter("transfer", rank, job.rid, tokens)

        self.queues.enter("prealloc", rank, job.rid, tokens)
        try:
            layout = await self._ensure_layout(req.addr)
            if layout is None:
                unreachable = disagg.layout_unreachable(self.args.sglang_version, req.addr)
                raise self._fail("Decode handshake", rank, job, room, unreachable, arrival, streaming)
            bootstrap_done = self.clock()
            await self._preallocate(rank, grant)
            now = self.clock()
            self.metrics.observe_kv_bootstrap(rank, (bootstrap_done - arrival) * 1000, (now - bootstrap_done) * 1000)
            reason = await self._receive(req, room)
        finally:
            self.queues.leave("prealloc", rank, job.rid)
            self.queues.leave("transfer", rank, job.rid)
            self._wake_slot_waiters()
        if reason is not None:
            raise self._fail("Decode transfer", rank, job, room, reason or None, arrival, streaming)
        ready = replace(job, dp_rank=rank, kv_ready=True)
        async with contextlib.aclosing(self.runtime.run(ready, streaming, arrival=arrival)) as gen:
            async for p in gen:
                yield p

    async def _ensure_layout(self, addr: str) -> RemoteLayout | None:
        """The prefill's layout, fetched once per prefill (concurrent requests share the fetch)."""
        if addr in self._layouts:
            return self._layouts[addr]
        task = self._fetching.get(addr)
        if task is None:
            task = asyncio.create_task(self._fetch_layout(addr))
            self._fetching[addr] = task
            task.add_done_callback(lambda _: self._fetching.pop(addr, None))
        return await asyncio.shield(task)

    async def _fetch_layout(self, addr: str) -> RemoteLayout | None:
        version = self.args.sglang_version
        attempts = 1 if parse_version(version) < disagg.REGISTRY_SINCE else disagg.MAX_ENSURE_RETRIES
        url = f"http://{addr}/route?{disagg.layout_query(version)}"
        for attempt in range(attempts):
            if attempt:
                await asyncio.sleep(disagg.ENSURE_RETRY_INTERVAL_S)
            status, body = await self._get(url)
            layout = disagg.parse_layout(body, version) if status == 200 else None
            if layout is None:
                log.error("Failed to get prefill server info: %s, %s", status, body)
                continue
            verdict = disagg.check_layout(self.args, layout)
            if verdict.crash is not None:
                self.crash(verdict.crash)
                raise PdFailure(verdict.crash)
            if verdict.warning is not None and not self._warned_tp:
                self._warned_tp = True
                log.warning(verdict.warning)
            self._layouts[addr] = layout
            return layout
        log.error("Could not fetch prefill parallel info from %s after %d attempts", addr, attempts)
        return None

    async def _get(self, url: str) -> tuple[int, Any]:
        try:
            async with self._http().get(url, timeout=aiohttp.ClientTimeout(total=5)) as resp:
                text = await resp.text()
        except (aiohttp.ClientError, OSError, TimeoutError) as e:
            return 0, str(e)
        try:
            return resp.status, json.loads(text)
        except ValueError:
            return resp.status, text

    def _free_slots(self, rank: int) -> int:
        used = self.runtime.engine.rank_in_flight(rank) + self.queues.count("transfer", rank)
        return self.capacity - used

    async def _preallocate(self, rank: int, grant: Callable[[], None]) -> None:
        """Wait, in arrival order per rank, for a request slot (the decode req-to-token pool); `grant` takes it."""
        if self._free_slots(rank) > 0 and not any(r == rank and not f.done() for r, f, _ in self._slot_waiters):
            grant()
            return
        entry = (rank, asyncio.get_running_loop().create_future(), grant)
        self._slot_waiters.append(entry)
        try:
            await entry[1]
        finally:
            with contextlib.suppress(ValueError):
                self._slot_waiters.remove(entry)

    def _wake_slot_waiters(self) -> None:
        for rank, fut, grant in list(self._slot_waiters):
            if not fut.done() and self._free_slots(rank) > 0:
                grant()
                fut.set_result(None)

    async def _receive(self, req: PdRequest, room: int) -> str | None:
        """Send the metadata and wait for the room's KV: None when it arrived, else the failure reason ("" for one
        recorded on the prefill side only)."""
        url = f"http://{req.addr}{disagg.KV_TRANSFER_ROUTE}"
        t0 = self.clock()
        try:
            async with self._http().post(
                url,
                json={"op": "send_metadata", "bootstrap_room": room},
                timeout=aiohttp.ClientTimeout(total=self.timeouts.waiting_s),
            ) as resp:
                body = await resp.json(content_type=None)
        except TimeoutError:
            await self._notify_abort(url, room)
            return disagg.waiting_timed_out(room, self.clock() - t0)
        except asyncio.CancelledError:  # the client went away: SGLang aborts the request and tells the prefill
            task = asyncio.get_running_loop().create_task(self._notify_abort(url, room))
            self._background.add(task)
            task.add_done_callback(self._background.discard)
            raise
        except (aiohttp.ClientError, OSError, ValueError):
            self._layouts.pop(req.addr, None)  # `_handle_node_failure`: fetch the layout again when it is back
            return disagg.prefill_down(req.addr, room)
        if isinstance(body, dict) and body.get("status") == "success":
            return None
        return ""

    async def _notify_abort(self, url: str, room: int) -> None:
        """The receiver's abort notification to the prefill (best effort)."""
        with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError):
            async with self._http().post(
                url, json={"op": "abort", "bootstrap_room": room}, timeout=aiohttp.ClientTimeout(total=2)
            ) as resp:
                await resp.read()

    def loads(self) -> list[disagg.PdRankLoad]:
        return self.queues.loads()
