"""The engine model: DP ranks, each with a running set, a FIFO queue, a KV budget and a prefix cache.

Pure state machine with time passed in (`now`, seconds on any monotonic clock): it never sleeps or reads a
clock, so tests drive it with plain numbers and the asyncio runtime (`runtime.py`) drives it with real time.

Concurrency follows SGLang: `--max-running-requests` is per scheduler. In-process DP (`--dp-size N`) runs N
full schedulers, so a replica holds N x max_running_requests; attention DP splits one scheduler group, and
SGLang gives each attention-DP rank max_running_requests // attn_dp_size (the flag stays the replica total).
The caller passes the per-rank value; see `server.engine_config`.

A request's life: `submit` (dispatched to a rank round-robin, as SGLang's default load-balance method) ->
queued -> `admit` when its rank has a free slot and KV room (prompt + max_new_tokens reserved) -> prefill
of the uncached prompt tokens at the prefill rate -> first token -> one token per 1/decode_rate seconds ->
`finish` (or `abort`). The prefix cache is matched and filled at admission. A PD decode request (`kv_ready`)
skips the prefill: its KV and first token came from the prefill server, so its first token is out at admission.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from .prefix_cache import PrefixCache
from .tokens import BLOCK_TOKENS, Prompt


@dataclass(frozen=True)
class EngineConfig:
    num_ranks: int
    max_running_per_rank: int
    max_total_tokens_per_rank: int
    prefill_tokens_per_s: float
    decode_tokens_per_s: float
    prefix_cache: bool = True
    dispatch: str = "round_robin"  # or total_requests / total_tokens (SGLang's --load-balance-method)
    stats_window_s: float = 10.0  # window of the busy fraction (GPU utilisation)
    hit_rate_window: int = 64  # admissions behind cache_hit_rate


@dataclass(frozen=True)
class Job:
    rid: str
    prompt: Prompt
    max_new_tokens: int
    dp_rank: int | None = None  # pinned by the client (`data_parallel_rank`), else dispatched
    kv_ready: bool = False  # PD decode: the prompt's KV (and the first token) came from a prefill server


@dataclass(frozen=True)
class Schedule:
    """A request's timeline, fixed when it is admitted."""

    rid: str
    dp_rank: int
    arrival: float
    admitted_at: float
    prompt_tokens: int
    cached_tokens: int
    output_tokens: int
    first_token_at: float
    token_interval: float

    @property
    def finish_at(self) -> float:
        return self.first_token_at + max(0, self.output_tokens - 1) * self.token_interval

    @property
    def queue_time(self) -> float:
        return self.admitted_at - self.arrival

    @property
    def ttft(self) -> float:
        return self.first_token_at - self.arrival

    def token_time(self, i: int) -> float:
        """When output token i (0-based) is produced."""
        return self.first_token_at + i * self.token_interval

    def tokens_done(self, now: float) -> int:
        if self.output_tokens == 0 or now < self.first_token_at:
            return 0
        if self.token_interval <= 0:
            return self.output_tokens
        return min(self.output_tokens, 1 + int((now - self.first_token_at) / self.token_interval + 1e-9))

    def decoding(self, now: float) -> bool:
        return self.output_tokens > 1 and self.first_token_at <= now < self.finish_at


@dataclass(frozen=True)
class RankLoad:
    """One DP rank's state, the fields of SGLang's /v1/loads entry plus the busy fraction."""

    dp_rank: int
    num_running_reqs: int
    num_waiting_reqs: int
    num_used_tokens: int
    num_total_tokens: int
    max_total_num_tokens: int
    token_usage: float
    gen_throughput: float
    cache_hit_rate: float
    utilization: float
    max_running_requests: int
    busy_fraction: float
    cache_tokens: int


class BusyTracker:
    """Intervals during which a rank had running requests, kept for one window (older ones are dropped)."""

    def __init__(self, window: float, start: float) -> None:
        self.window = window
        self.start = start
        self.since: float | None = None
        self.spans: deque[tuple[float, float]] = deque()

    def set(self, busy: bool, now: float) -> None:
        if busy and self.since is None:
            self.since = now
        elif not busy and self.since is not None:
            self.spans.append((self.since, now))
            self.since = None
        while self.spans and self.spans[0][1] <= now - self.window:
            self.spans.popleft()

    def fraction(self, now: float) -> float:
        lo = max(now - self.window, self.start)
        if now <= lo:
            return 1.0 if self.since is not None else 0.0
        total = sum(min(e, now) - max(s, lo) for s, e in self.spans if e > lo)
        if self.since is not None:
            total += now - max(self.since, lo)
        return min(1.0, max(0.0, total / (now - lo)))


@dataclass
class _Queued:
    job: Job
    arrival: float


@dataclass
class _Rank:
    index: int
    cache: PrefixCache
    busy: BusyTracker
    queue: deque[_Queued] = field(default_factory=deque)
    running: dict[str, Schedule] = field(default_factory=dict)
    reserved: int = 0
    hits: deque[tuple[int, int]] = field(default_factory=deque)


class Engine:
    def __init__(self, cfg: EngineConfig, start: float) -> None:
        if cfg.num_ranks < 1 or cfg.max_running_per_rank < 1:
            raise ValueError("an engine needs at least one rank and one running slot per rank")
        self.cfg = cfg
        self.start = start
        self._ranks = [
            _Rank(i, PrefixCache(cfg.max_total_tokens_per_rank, BLOCK_TOKENS), BusyTracker(cfg.stats_window_s, start))
            for i in range(cfg.num_ranks)
        ]
        self._rr = 0
        self._where: dict[str, int] = {}

    @property
    def in_flight(self) -> int:
        return sum(len(r.queue) + len(r.running) for r in self._ranks)

    def pick_rank(self) -> int:
        """The DP rank the dispatcher would give the next request (PD decode picks it at arrival)."""
        return self._pick_rank().index

    def rank_in_flight(self, rank: int) -> int:
        """Requests queued or running on one DP rank."""
        r = self._ranks[rank]
        return len(r.queue) + len(r.running)

    def _pick_rank(self) -> _Rank:
        if self.cfg.dispatch == "total_requests":
            return min(self._ranks, key=lambda r: (len(r.running) + len(r.queue), r.index))
        if self.cfg.dispatch == "total_tokens":
            return min(self._ranks, key=lambda r: (r.reserved + sum(q.job.prompt.num_tokens for q in r.queue), r.index))
        rank = self._ranks[self._rr % len(self._ranks)]
        self._rr += 1
        return rank

    def submit(self, job: Job, now: float) -> int:
        if job.rid in self._where:
            raise ValueError(f"duplicate request id {job.rid}")
        if job.dp_rank is not None and not 0 <= job.dp_rank < len(self._ranks):
            raise ValueError(f"dp_rank {job.dp_rank} out of range [0, {len(self._ranks)})")
        rank = self._pick_rank() if job.dp_rank is None else self._ranks[job.dp_rank]
        rank.queue.append(_Queued(job, now))
        self._where[job.rid] = rank.index
        return rank.index

    def admit(self, now: float) -> list[Schedule]:
        """Move queued requests into free slots, in FIFO order per rank; return their timelines."""
        admitted: list[Schedule] = []
        cfg = self.cfg
        for rank in self._ranks:
            while rank.queue and len(rank.running) < cfg.max_running_per_rank:
                head = rank.queue[0]
                need = head.job.prompt.num_tokens + head.job.max_new_tokens
                if rank.running and rank.reserved + need > cfg.max_total_tokens_per_rank:
                    break
                rank.queue.popleft()
                admitted.append(self._start(rank, head, now))
        return admitted

    def _start(self, rank: _Rank, q: _Queued, now: float) -> Schedule:
        prompt = q.job.prompt
        cached = 0
        if self.cfg.prefix_cache and not q.job.kv_ready:
            blocks = rank.cache.match(prompt.block_keys)
            cached = min(blocks * BLOCK_TOKENS, max(0, prompt.num_tokens - 1))
            rank.cache.insert(prompt.block_keys)
        rank.hits.append((cached, prompt.num_tokens))
        while len(rank.hits) > self.cfg.hit_rate_window:
            rank.hits.popleft()
        sched = Schedule(
            rid=q.job.rid,
            dp_rank=rank.index,
            arrival=q.arrival,
            admitted_at=now,
            prompt_tokens=prompt.num_tokens,
            cached_tokens=cached,
            output_tokens=q.job.max_new_tokens,
            first_token_at=now
            if q.job.kv_ready
            else now + (prompt.num_tokens - cached) / self.cfg.prefill_tokens_per_s,
            token_interval=1.0 / self.cfg.decode_tokens_per_s,
        )
        rank.running[sched.rid] = sched
        rank.reserved += prompt.num_tokens + q.job.max_new_tokens
        rank.busy.set(True, now)
        return sched

    def _release(self, rank: _Rank, sched: Schedule, now: float) -> None:
        del rank.running[sched.rid]
        rank.reserved -= sched.prompt_tokens + sched.output_tokens
        rank.busy.set(bool(rank.running), now)

    def finish(self, rid: str, now: float) -> Schedule:
        rank = self._ranks[self._where.pop(rid)]
        sched = rank.running[rid]
        self._release(rank, sched, now)
        return sched

    def abort(self, rid: str, now: float) -> bool:
        """Drop a queued or running request; False if it is unknown (already finished)."""
        idx = self._where.pop(rid, None)
        if idx is None:
            return False
        rank = self._ranks[idx]
        if rid in rank.running:
            self._release(rank, rank.running[rid], now)
            return True
        rank.queue = deque(q for q in rank.queue if q.job.rid != rid)
        return True

    def flush_cache(self) -> bool:
        """SGLang refuses to flush while any request is running or waiting."""
        if self.in_flight:
            return False
        for rank in self._ranks:
            rank.cache.clear()
            rank.hits.clear()
        return True

    def loads(self, now: float) -> list[RankLoad]:
        cfg = self.cfg
        out = []
        for rank in self._ranks:
            used = sum(s.prompt_tokens + s.tokens_done(now) for s in rank.running.values())
            waiting_tokens = sum(q.job.prompt.num_tokens for q in rank.queue)
            usage = used / cfg.max_total_tokens_per_rank
            hit_num = sum(c for c, _ in rank.hits)
            hit_den = sum(p for _, p in rank.hits)
            out.append(
                RankLoad(
                    dp_rank=rank.index,
                    num_running_reqs=len(rank.running),
                    num_waiting_reqs=len(rank.queue),
                    num_used_tokens=used,
                    num_total_tokens=used + waiting_tokens,
                    max_total_num_tokens=cfg.max_total_tokens_per_rank,
                    token_usage=usage,
                    gen_throughput=cfg.decode_tokens_per_s * sum(s.decoding(now) for s in rank.running.values()),
                    cache_hit_rate=hit_num / hit_den if hit_den else 0.0,
                    utilization=max(len(rank.running) / cfg.max_running_per_rank, usage / 0.9),
                    max_running_requests=cfg.max_running_per_rank,
                    busy_fraction=rank.busy.fraction(now),
                    cache_tokens=rank.cache.cached_tokens,
                )
            )
        return out
