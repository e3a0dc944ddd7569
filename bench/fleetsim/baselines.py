"""The baselines, following /work/shared/reference/autoscaling.md (Kubernetes HPA, KEDA) plus static and oracle.

- Both read the same request rate as the operator's policy: the router's arrivals over 60 s (or, with
  `--baseline-qps finished`, the workers' `sglang:num_requests_total`, which cannot see demand a saturated fleet
  does not serve: cheaper and far more misses under overload).
- HPA on a Pods metric (QPS per replica, a 60 s rate as a Prometheus adapter would serve it): the replica
  calculator of kubernetes/kubernetes `replica_calculator.go` (tolerance 0.1; starting pods have no metric and
  count as 0 on a scale-up and as the target on a scale-down), then the default behaviour: scale-up
  max(100 %, 4 pods) per 15 s, scale-down 100 % per 15 s after a 300 s window taking the highest recommendation.
- KEDA's Prometheus scaler: an External AverageValue metric (total QPS) feeding the same HPA loop every 15 s:
  ratio = total / (threshold x current), desired = ceil(total / threshold) outside the tolerance, no readiness
  dampening; with minReplicaCount 0 it activates 0 -> 1 on its 30 s poll and returns to 0 after a 300 s cooldown.
- Static: the oracle's peak, all the time.
- Oracle: knows every future request. For each decision interval it computes, with the project's capacity function
  and no headroom, the replicas the coming requests need (their true rate x their true mean slot time / C), starts
  them `startup` seconds ahead, and keeps a replica through a gap shorter than the start-up delay (restarting it
  would cost more). It goes through the same simulator and cost accounting as everyone else, so its SLO misses
  (bursts inside an interval) are measured, not assumed away.
- SLO oracle: the fewest replicas, second by second, with which no request at all misses the SLO (see
  `slo_need`), planned the same way: a lower bound on what zero misses cost.
"""

import heapq
import math
from dataclasses import dataclass, field

import numpy as np

from sglang_operator.capacity import ceil_replicas, replicas_exact

from .sim import Command, FleetView

HPA_TOLERANCE = 0.1
HPA_SYNC_S = 15.0
HPA_DOWN_WINDOW_S = 300.0
KEDA_POLLING_S = 30.0
KEDA_COOLDOWN_S = 300.0
METRIC_WINDOW_S = 60.0


def hpa_pods_metric_replicas(current: int, ready: int, missing: int, total: float, target: float) -> int:
    """`calcPlainMetricReplicas`: pods with metrics are `ready`; starting pods are `missing`."""
    if ready == 0:
        return current  # "did not receive metrics for targeted pods": the HPA does nothing
    ratio = total / ready / target
    if missing == 0:
        if abs(ratio - 1.0) <= HPA_TOLERANCE:
            return current
        return math.ceil(ratio * ready)
    filled = total + (missing * target if ratio < 1.0 else 0.0)
    new_ratio = filled / (ready + missing) / target
    if abs(new_ratio - 1.0) <= HPA_TOLERANCE or (ratio > 1.0 > new_ratio) or (ratio < 1.0 < new_ratio):
        return current
    new = math.ceil(new_ratio * (ready + missing))
    if (new_ratio < 1.0 and new > current) or (new_ratio > 1.0 and new < current):
        return current
    return new


def hpa_external_average_replicas(current: int, total: float, target: float) -> int:
    """`GetExternalPerPodMetricReplicas` (AverageValue): no readiness dampening."""
    if current > 0 and abs(total / (target * current) - 1.0) <= HPA_TOLERANCE:
        return current
    return math.ceil(total / target)


@dataclass
class HpaBehavior:
    """Default HPA behaviour: no scale-up window, max(100 %, 4 pods)/15 s up, 300 s window and 100 %/15 s down."""

    min_replicas: int
    max_replicas: int
    recommendations: list[tuple[float, int]] = field(default_factory=list)

    def normalize(self, t: float, current: int, recommendation: int) -> int:
        self.recommendations = [(ts, r) for ts, r in self.recommendations if t - ts < HPA_DOWN_WINDOW_S]
        self.recommendations.append((t, recommendation))
        down = max(r for _, r in self.recommendations)
        desired = current
        if recommendation > current:
            desired = recommendation
        elif current > down:
            desired = down
        up_limit = max(2 * current, current + 4)
        return max(self.min_replicas, min(self.max_replicas, up_limit, desired))


@dataclass
class Hpa:
    target_qps: float
    initial_replicas: int
    min_replicas: int
    max_replicas: int
    finished: bool = False  # read the workers' finished requests instead of the router's arrivals
    name: str = "hpa"
    period: float = HPA_SYNC_S

    def __post_init__(self) -> None:
        # An HPA cannot scale to zero (HPAScaleToZero is alpha): minReplicas is at least 1.
        self.behavior = HpaBehavior(max(1, self.min_replicas), self.max_replicas)

    def initial(self) -> int:
        return self.initial_replicas

    def step(self, view: FleetView) -> Command:
        counter = view.scrapes.finished if self.finished else view.scrapes.arrivals
        total = view.scrapes.rate(counter, METRIC_WINDOW_S)
        if total is None:
            return Command(view.desired)
        rec = hpa_pods_metric_replicas(view.desired, view.ready, view.starting, total, self.target_qps)
        return Command(self.behavior.normalize(view.t, view.desired, rec))


@dataclass
class Keda:
    target_qps: float
    initial_replicas: int
    min_replicas: int
    max_replicas: int
    finished: bool = False  # see Hpa
    name: str = "keda"
    period: float = HPA_SYNC_S
    last_active: float = 0.0
    last_poll: float = -math.inf

    def __post_init__(self) -> None:
        self.behavior = HpaBehavior(max(1, self.min_replicas), self.max_replicas)

    def initial(self) -> int:
        return self.initial_replicas

    def step(self, view: FleetView) -> Command:
        # At zero no worker reports: KEDA's query can only see the router.
        counter = view.scrapes.finished if self.finished and view.desired > 0 else view.scrapes.arrivals
        total = view.scrapes.rate(counter, METRIC_WINDOW_S)
        if total is None:
            return Command(view.desired)
        if view.desired == 0 or self.min_replicas == 0:
            if total > 0:
                self.last_active = view.t
            if view.t - self.last_poll >= KEDA_POLLING_S:  # KEDA's own loop only handles 0 <-> 1
                self.last_poll = view.t
                if view.desired == 0:
                    return Command(1 if total > 0 else 0)
                if view.t - self.last_active >= KEDA_COOLDOWN_S:
                    return Command(0)
            if view.desired == 0:
                return Command(0)
        rec = hpa_external_average_replicas(view.desired, total, self.target_qps)
        return Command(self.behavior.normalize(view.t, view.desired, rec))


@dataclass
class Static:
    replicas: int
    name: str = "static-peak"
    period: float = 3600.0

    def initial(self) -> int:
        return self.replicas

    def step(self, view: FleetView) -> Command:
        return Command(self.replicas)


def capacity_need(arrivals: np.ndarray, service: np.ndarray, concurrency: int, bin_s: float) -> np.ndarray:
    """Replicas per interval by the capacity rule applied to the future: ceil(Q x T / C) with the true rate Q of
    the requests arriving in the interval and their true mean slot time T."""
    nbins = math.ceil(float(arrivals[-1]) / bin_s) + 1
    idx = np.minimum((arrivals // bin_s).astype(int), nbins - 1)
    count = np.bincount(idx, minlength=nbins)
    work = np.bincount(idx, weights=service, minlength=nbins)
    need = np.zeros(nbins, dtype=int)
    for b in np.flatnonzero(count):
        need[b] = ceil_replicas(replicas_exact(count[b] / bin_s, work[b] / count[b], concurrency))
    return need


def slo_need(
    arrivals: np.ndarray, service: np.ndarray, concurrency: int, slo_wait_s: float, bin_s: float
) -> np.ndarray:
    """Fewest replicas per bin with which a FIFO fleet starts every request within the SLO wait (no misses).

    Greedy over bins, knowing the future: each bin gets the smallest count that meets the deadline of every request
    due in it, given what earlier bins left running and queued; whatever capacity is paid for serves the queue at
    once (the simulator is work-conserving too). More capacity never delays a FIFO start, so anything above this
    profile stays miss-free.
    """
    arr, svc = arrivals.tolist(), service.tolist()
    n, c = len(arr), concurrency
    nbins = math.ceil(arr[-1] / bin_s) + 1
    need = np.zeros(nbins, dtype=int)
    busy: list[float] = []  # completion times of started requests
    head = nxt = 0  # queue = requests head..nxt-1 (arrived, not started); nxt = next arrival
    level = 0
    for b in range(nbins):
        end = (b + 1) * bin_s
        lo = 0
        trial = max(level, 1) if head < nxt or (nxt < n and arr[nxt] < end) else 0
        best: tuple[int, list[float], int, int] | None = None
        while True:
            ok, state = _run_bin(arr, svc, busy, head, nxt, trial * c, end - bin_s, end, slo_wait_s)
            if ok:
                best = (trial, *state)
                if trial == lo:
                    break
                trial -= 1  # cheaper still feasible? (the first feasible count going down is the minimum)
            else:
                lo = trial + 1
                if best is not None:
                    break
                trial += 1
        level, busy, head, nxt = best
        need[b] = level
    return need


def _run_bin(
    arr: list[float],
    svc: list[float],
    busy: list[float],
    head: int,
    nxt: int,
    slots: int,
    start: float,
    end: float,
    slo: float,
) -> tuple[bool, tuple[list[float], int, int]]:
    """Serve one bin FIFO with `slots`; False when a request would start later than its arrival + slo."""
    busy = list(busy)
    heapq.heapify(busy)
    n = len(arr)
    while head < nxt and len(busy) < slots:  # capacity bought for this bin serves the queue at its start
        heapq.heappush(busy, start + svc[head])
        head += 1
    while True:
        t_done = busy[0] if busy else math.inf
        t_arr = arr[nxt] if nxt < n else math.inf
        t = min(t_done, t_arr)
        if head < nxt and arr[head] + slo < min(t, end) and len(busy) >= slots:
            return False, ([], head, nxt)  # the head's deadline passes with no free slot
        if t >= end:
            break
        if t == t_done:
            heapq.heappop(busy)
        else:
            nxt += 1
        while head < nxt and len(busy) < slots:
            heapq.heappush(busy, t + svc[head])
            head += 1
        if head < nxt and arr[head] + slo < t:
            return False, ([], head, nxt)
    return True, (busy, head, nxt)


def oracle_plan(needed: np.ndarray, bin_s: float, startup_s: float) -> np.ndarray:
    """Replicas to have (ready + starting) at each bin: every slot level's need, gaps shorter than the start-up
    delay bridged, requested `startup_s` ahead. Level k is a replica needed whenever needed >= k."""
    gap = round(startup_s / bin_s)
    merged = needed.astype(int).copy()
    for level in range(1, int(needed.max()) + 1):
        on = np.flatnonzero(needed >= level)
        if len(on) < 2:
            continue
        holes = np.flatnonzero((np.diff(on) > 1) & (np.diff(on) <= gap))
        for h in holes:
            seg = slice(on[h] + 1, on[h + 1])
            merged[seg] = np.maximum(merged[seg], level)
    # A replica needed at bin b + gap must be started at bin b: hold the max of the coming start-up delay.
    padded = np.concatenate([merged, np.zeros(gap, dtype=int)])
    windows = np.lib.stride_tricks.sliding_window_view(padded, gap + 1)
    plan: np.ndarray = windows.max(axis=1)
    return plan


@dataclass
class Oracle:
    plan: np.ndarray
    bin_s: float
    name: str = "oracle"
    offset: float = 0.0  # acts on interval boundaries, so replicas started for interval b are ready at its start

    @property
    def period(self) -> float:
        return self.bin_s

    def initial(self) -> int:
        return int(self.plan[0])

    def step(self, view: FleetView) -> Command:
        b = min(round(view.t / self.bin_s), len(self.plan) - 1)
        return Command(int(self.plan[b]))
