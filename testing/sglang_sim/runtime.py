"""Drives the pure engine with asyncio: a future per queued request (the semaphore) and timers.

Nothing polls: a request waits on its admission future, which `_pump` resolves whenever a slot frees up
(after every submit, finish and abort), then sleeps until its scheduled token times. Streams are emitted in
chunks of `--stream-interval` tokens but at least `min_chunk_s` apart (the first token alone), so a fast
decode rate or a small time scale costs a bounded number of wake-ups. Requests whose consumer goes away
(client disconnect) are aborted and counted in `sglang:num_aborted_requests_total`, as SGLang does.
"""

from __future__ import annotations

import asyncio
import math
import time
import uuid
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass

from .engine import Engine, Job, RankLoad, Schedule
from .metrics import SimMetrics
from .tokens import prompt_from_text

WARMUP_PROMPT = "The capital city of France is"
WARMUP_TOKENS = 8


@dataclass(frozen=True)
class Progress:
    schedule: Schedule
    tokens: int  # output tokens produced so far
    done: bool


class Runtime:
    def __init__(
        self,
        engine: Engine,
        metrics: SimMetrics,
        clock: Callable[[], float] = time.monotonic,
        min_chunk_s: float = 0.02,
        stream_interval: int = 1,
    ) -> None:
        self.engine = engine
        self.metrics = metrics
        self.clock = clock
        self.min_chunk_s = min_chunk_s
        self.stream_interval = max(1, stream_interval)
        self._waiters: dict[str, asyncio.Future[Schedule]] = {}
        self.listeners: list[Callable[[], None]] = []  # called whenever requests enter or leave the engine

    def loads(self) -> list[RankLoad]:
        return self.engine.loads(self.clock())

    def _pump(self) -> None:
        for sched in self.engine.admit(self.clock()):
            fut = self._waiters.pop(sched.rid, None)
            if fut is not None and not fut.done():
                fut.set_result(sched)
        for listener in self.listeners:
            listener()

    async def _sleep_until(self, t: float) -> None:
        delay = t - self.clock()
        if delay > 0:
            await asyncio.sleep(delay)

    async def run(
        self, job: Job, streaming: bool, arrival: float | None = None, observe: bool = True
    ) -> AsyncGenerator[Progress, None]:
        """Yield progress until the request is done. Use under `contextlib.aclosing`. `arrival`: when the request
        reached the server, if before now (PD: its bootstrap and transfer came first); `observe=False` leaves the
        finished request's metrics to the caller (PD prefill: it finishes after its KV transfer)."""
        fut: asyncio.Future[Schedule] = asyncio.get_running_loop().create_future()
        self._waiters[job.rid] = fut
        arrival = self.clock() if arrival is None else arrival
        self.engine.submit(job, arrival)
        finished = False
        try:
            self._pump()
            sched = await fut
            n = sched.output_tokens
            if streaming and n > 0:
                step = n
                if sched.token_interval > 0:
                    step = max(self.stream_interval, math.ceil(self.min_chunk_s / sched.token_interval))
                done = 0
                while done < n:
                    done = 1 if done == 0 else min(n, done + step)
                    await self._sleep_until(sched.token_time(done - 1))
                    finished = done == n
                    yield Progress(sched, done, finished)
            else:
                await self._sleep_until(sched.finish_at)
                finished = True
                yield Progress(sched, n, True)
        finally:
            now = self.clock()
            self._waiters.pop(job.rid, None)
            if finished:
                sched = self.engine.finish(job.rid, now)
                if observe:
                    self.metrics.observe_finished(sched, now - arrival, streaming)
            elif self.engine.abort(job.rid, now):
                self.metrics.observe_aborted()
            self._pump()

    async def complete(self, job: Job) -> Progress:
        """Run a request to completion without streaming."""
        last: Progress | None = None
        gen = self.run(job, streaming=False)
        try:
            async for p in gen:
                last = p
        finally:
            await gen.aclose()
        assert last is not None
        return last

    async def warmup(self) -> None:
        """SGLang's start-up warmup: one short /generate before the server reports Up."""
        job = Job(f"warmup-{uuid.uuid4().hex}", prompt_from_text(WARMUP_PROMPT), WARMUP_TOKENS)
        await self.complete(job)
