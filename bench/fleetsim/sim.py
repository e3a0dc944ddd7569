"""A discrete-event simulation of one fleet behind an ideal router, driven by a controller.

Model (the same for every policy, so the comparison is fair):
- Each ready replica serves at most C requests at once; the router keeps one FIFO queue and hands a request to any
  free slot (least-load routing with perfect balance). A request's service time is fixed by its tokens.
- A new replica is ready `startup_s` after it is started; starting replicas cost replica-hours. A removed replica
  stops taking requests at once and costs until its in-flight requests finish (draining).
- Prometheus scrapes the workers every `scrape_s`: counters of finished requests, e2e and queue-time sums (at
  completion, as SGLang does), the queue-time histogram (at admission, as SGLang does, with its buckets), arrivals at
  the router, and running/queued gauges. Controllers see only scrapes.
- Warm replicas (optional) are started and ready but serve nothing until promoted, which is instant.
"""

import bisect
import heapq
import itertools
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from sglang_sim.metrics import QUEUE_BUCKETS


@dataclass
class Scrapes:
    """Prometheus' view: one entry per scrape, for rate() and gauge reads."""

    interval: float
    t: list[float] = field(default_factory=list)
    finished: list[float] = field(default_factory=list)
    e2e_sum: list[float] = field(default_factory=list)
    queue_sum: list[float] = field(default_factory=list)
    arrivals: list[float] = field(default_factory=list)
    running: list[float] = field(default_factory=list)
    queued: list[float] = field(default_factory=list)
    ready: list[int] = field(default_factory=list)
    queue_le: list[tuple[float, ...]] = field(default_factory=list)
    """Per scrape, the `sglang:queue_time_seconds` bucket counts: requests admitted after waiting at most
    QUEUE_BUCKETS[k] seconds, for each k, then the +Inf bucket (every admitted request)."""
    _rates: dict[tuple[int, float, int], float | None] = field(default_factory=dict, repr=False)

    def points(self, window: float) -> int:
        """Scrapes inside (t - window, t], as Prometheus' range selector sees them."""
        return math.ceil(window / self.interval - 1e-9)

    def span(self, window: float, at: int = -1) -> tuple[int, int]:
        """(first, last) scrape index of a window ending at scrape `at`."""
        last = len(self.t) + at if at < 0 else at
        return max(0, last - self.points(window) + 1), last

    def delta(self, series: list[float], window: float, at: int = -1) -> tuple[float, float] | None:
        """(increase, seconds) over a window ending at scrape `at`; None with fewer than two scrapes."""
        i, j = self.span(window, at)
        if j <= i:
            return None
        return series[j] - series[i], self.t[j] - self.t[i]

    def rate(self, series: list[float], window: float, at: int = -1) -> float | None:
        """rate(series[window]) at scrape `at`; remembered, since past scrapes never change (controllers ask for
        the same sliding windows at every decision)."""
        key = (id(series), window, len(self.t) + at if at < 0 else at)
        if key not in self._rates:
            d = self.delta(series, window, at)
            self._rates[key] = None if d is None else d[0] / d[1]
        return self._rates[key]

    def bucket_delta(self, bound: int, window: float) -> float | None:
        """increase(queue-time bucket `bound`, -1 for +Inf) over a window ending at the latest scrape."""
        i, j = self.span(window)
        return None if j <= i else self.queue_le[j][bound] - self.queue_le[i][bound]

    def peak_rate(self, series: list[float], window: float, lookback: float) -> float | None:
        """max_over_time(rate(x[window])[lookback:interval]) at the latest scrape."""
        i, j = self.span(lookback)
        rates = [self.rate(series, window, k) for k in range(i, j + 1)]
        known = [r for r in rates if r is not None]
        return max(known) if known else None


@dataclass(frozen=True)
class Command:
    serving: int
    warm: int = 0


@dataclass
class FleetView:
    """What a controller may look at: the scrapes and the replica counts the operator knows."""

    t: float
    scrapes: Scrapes
    ready: int
    starting: int
    warm_ready: int
    warm_starting: int
    concurrency: int

    @property
    def desired(self) -> int:
        return self.ready + self.starting


class Controller(Protocol):
    name: str

    @property
    def period(self) -> float:
        """Seconds between decisions."""

    def initial(self) -> int: ...

    def step(self, view: FleetView) -> Command: ...


@dataclass(frozen=True)
class SimConfig:
    concurrency: int
    startup_s: float
    scrape_s: float
    slo_wait_s: float
    horizon_s: float  # replica-hours are counted over [0, horizon]
    control_offset_s: float = 1.0  # decisions run just after a scrape, as a timer reading Prometheus would
    # Prometheus holds this much history from before the trace: steady traffic at `history_qps` with mean slot time
    # `history_slot_s` (a cold Prometheus would read the trace's first seconds as a traffic drop and its first
    # completions, the short requests, as the mean slot time). The baselines' targets use the same knowledge.
    history_s: float = 0.0
    history_qps: float = 0.0
    history_slot_s: float = 0.0


@dataclass
class SimResult:
    name: str
    replica_seconds: float
    waits: np.ndarray
    scale_events: int
    timeline_t: list[float]
    timeline_replicas: list[int]  # serving + warm, ready or starting (what is paid for, minus draining)
    timeline_ready: list[int]


def simulate(arrivals: np.ndarray, service: np.ndarray, ctrl: Controller, cfg: SimConfig) -> SimResult:
    """Run one controller over the requests; every request is served (late ones count as SLO misses)."""
    arr = arrivals.tolist()
    svc = service.tolist()
    n = len(arr)
    c = cfg.concurrency
    waits = np.full(n, np.inf)
    done: list[tuple[float, int]] = []  # (end time, request) heap
    queue: deque[int] = deque()
    starting: deque[float] = deque()  # ready-at times, oldest first
    warm_starting: deque[float] = deque()
    ready, warm_ready, busy = ctrl.initial(), 0, 0
    scrapes = _seeded_scrapes(cfg, ready)
    finished = arrivals_before = scrapes.finished[-1] + cfg.history_qps * cfg.scrape_s if scrapes.t else 0.0
    e2e_sum, queue_sum = finished * cfg.history_slot_s, 0.0
    next_scrape, next_control = 0.0, getattr(ctrl, "offset", cfg.control_offset_s)
    area, last_t, events = 0.0, 0.0, 0
    # Admissions per queue-time bucket (the last: over every bound). The counters continue the seeded history's, as
    # a real counter does: its requests, admitted up to the trace's start, all waited 0 s.
    waited = [finished] + [0.0] * len(QUEUE_BUCKETS)
    tl_t: list[float] = []
    tl_rep: list[int] = []
    tl_ready: list[int] = []
    stop_ticks = cfg.horizon_s + 6 * 3600.0
    inf = math.inf
    i = 0

    while i < n or done or queue:
        ta = arr[i] if i < n else inf
        tc = done[0][0] if done else inf
        tr = starting[0] if starting else inf
        tw = warm_starting[0] if warm_starting else inf
        tt = min(next_scrape, next_control)
        t = min(ta, tc, tr, tw, tt)
        if t == inf or (t == tt and t > stop_ticks and not (ta < inf or tc < inf or tr < inf)):
            break  # nothing can ever serve the queue
        if last_t < cfg.horizon_s:
            draining = max(0, busy - ready * c)
            paid = ready + len(starting) + warm_ready + len(warm_starting) + -(-draining // c)
            area += paid * (min(t, cfg.horizon_s) - last_t)
        last_t = t
        if t == tr:
            starting.popleft()
            ready += 1
        elif t == tw:
            warm_starting.popleft()
            warm_ready += 1
        elif t == tc:
            _, k = heapq.heappop(done)
            busy -= 1
            finished += 1
            e2e_sum += t - arr[k]
            queue_sum += waits[k]
        elif t == tt:
            if t == next_scrape:
                scrapes.t.append(t)
                scrapes.finished.append(finished)
                scrapes.e2e_sum.append(e2e_sum)
                scrapes.queue_sum.append(queue_sum)
                scrapes.arrivals.append(arrivals_before + i)
                scrapes.running.append(float(busy))
                scrapes.queued.append(float(len(queue)))
                scrapes.ready.append(ready)
                scrapes.queue_le.append(tuple(itertools.accumulate(waited)))
                tl_t.append(t)
                tl_rep.append(ready + len(starting) + warm_ready + len(warm_starting))
                tl_ready.append(ready)
                next_scrape += cfg.scrape_s
            else:
                view = FleetView(t, scrapes, ready, len(starting), warm_ready, len(warm_starting), c)
                cmd = ctrl.step(view)
                before = ready + len(starting)
                ready, warm_ready = _actuate(cmd, t, cfg.startup_s, ready, starting, warm_ready, warm_starting)
                events += int(ready + len(starting) != before)
                next_control += ctrl.period
        else:
            queue.append(i)
            i += 1
        while queue and busy < ready * c:
            k = queue.popleft()
            waits[k] = t - arr[k]
            waited[bisect.bisect_left(QUEUE_BUCKETS, waits[k])] += 1
            busy += 1
            heapq.heappush(done, (t + svc[k], k))

    if last_t < cfg.horizon_s:
        area += (ready + len(starting) + warm_ready + len(warm_starting)) * (cfg.horizon_s - last_t)
    return SimResult(ctrl.name, area, waits, events, tl_t, tl_rep, tl_ready)


def _seeded_scrapes(cfg: SimConfig, ready: int) -> Scrapes:
    """Scrapes from before the trace: steady traffic at cfg.history_qps, each request holding a slot
    cfg.history_slot_s (scrape times are negative; the trace starts at 0)."""
    scrapes = Scrapes(cfg.scrape_s)
    points = int(cfg.history_s // cfg.scrape_s)
    for k in range(points):
        count = k * cfg.scrape_s * cfg.history_qps
        scrapes.t.append((k - points) * cfg.scrape_s)
        scrapes.finished.append(count)
        scrapes.e2e_sum.append(count * cfg.history_slot_s)
        scrapes.queue_sum.append(0.0)
        scrapes.arrivals.append(count)
        scrapes.running.append(cfg.history_qps * cfg.history_slot_s)
        scrapes.queued.append(0.0)
        scrapes.ready.append(ready)
        scrapes.queue_le.append((count,) * (len(QUEUE_BUCKETS) + 1))
    return scrapes


def _actuate(
    cmd: Command,
    t: float,
    startup: float,
    ready: int,
    starting: deque[float],
    warm_ready: int,
    warm_starting: deque[float],
) -> tuple[int, int]:
    """Apply a command: promote warm replicas first, start the rest; cancel starting replicas before draining."""
    add = cmd.serving - (ready + len(starting))
    promoted = max(0, min(add, warm_ready))
    ready, warm_ready = ready + promoted, warm_ready - promoted
    ready = _resize(ready, starting, add - promoted, t + startup)
    warm_ready = _resize(warm_ready, warm_starting, cmd.warm - (warm_ready + len(warm_starting)), t + startup)
    return ready, warm_ready


def _resize(ready: int, starting: deque[float], change: int, ready_at: float) -> int:
    """Grow a pool by starting replicas (ready at `ready_at`) or shrink it, newest starting replicas first;
    returns the new ready count."""
    if change > 0:
        starting.extend([ready_at] * change)
        return ready
    remove = -change
    while remove and starting:
        starting.pop()
        remove -= 1
    return ready - remove
