"""Why no policy can dominate HPA on every trace: the trace that defeats a given policy, built from its own run.

A policy sees only the past. Run it and HPA on the same trace: until they first pay for different replica counts
they are one fleet (the same requests wait the same seconds on the same ready replicas, and the same
replica-seconds are paid). After that first difference, at some moment one of them has more replicas:
- the policy has fewer ready replicas than HPA: a burst arriving then queues longer behind the policy's smaller
  fleet, so it misses more requests than HPA;
- the policy pays for more replicas than HPA: the trace ends then, and it has paid more.
Neither continuation changes anything before it (neither fleet can see the future), so the trace made of the
original up to that moment plus the continuation is one on which the policy does not dominate HPA. A policy that
never differs from HPA ties it, which is not dominance either. The benchmark (`bench/autoscale.py`) computes a few
things from the whole trace: the baselines' target (from the mean slot time), the replay factor K and the
opening rate of Prometheus' history. Traces of identical requests at a rate for which K is 1 keep all three, so
the only change is the continuation; `bench/adversary.py` checks that on every trace it writes.
"""

import itertools
from dataclasses import dataclass, replace

import numpy as np

from .sim import SimResult
from .synthetic import Shape, poisson

PROMPT_TOKENS = 1000
OUTPUT_TOKENS = 495
"""Every request alike: 1000 / 10 000 + 495 / 50 = 10.0 s in a slot at the benchmark's default token rates."""
BURST_OFFSET_S = -4.0
"""A continuation starts this long after the scrape that saw a difference (so 4 s before it): after the decision
that made the difference (14 s before the scrape) and before the next one (1 s after it), which may undo it. The
replay's jitter moves it by at most a second."""


TRICKLES_S = (0, 60)
"""After the burst, one request a second for this long: once HPA's larger fleet has worked off a queue, it serves
them at once, while the policy's smaller one is still queueing (a burst into a fleet that already queues makes
both miss alike)."""


@dataclass(frozen=True)
class Attack:
    """The continuation: `burst` more requests at `at_s`, then one a second for `trickle_s`, then nothing."""

    at_s: float
    burst: int
    why: str
    trickle_s: int = 0


def shape_arrivals(shape: Shape, peak_replicas: float, slot_s: float, concurrency: int) -> np.ndarray:
    """The shape's arrivals with its rate scaled so that its peak needs `peak_replicas` replicas of `concurrency`
    slots (the benchmark then replays it once: K = 1)."""
    peak = max(shape.rate(float(t)) for t in np.arange(0.0, shape.seconds, 1.0))
    factor = peak_replicas * concurrency / (slot_s * peak)
    return poisson(lambda t: factor * shape.rate(t), shape.seconds, shape.seed)


def first_difference(policy: SimResult, hpa: SimResult) -> int | None:
    """The first scrape at which the two runs pay for different replica counts; None when they never do."""
    pairs = zip(policy.timeline_replicas, hpa.timeline_replicas, strict=False)
    return next((k for k, (a, b) in enumerate(pairs) if a != b), None)


def attacks(policy: SimResult, hpa: SimResult, first: int, span: int, bursts: tuple[int, ...]) -> list[Attack]:
    """Continuations to try, best first, over the `span` scrapes from the first difference: a burst where the
    policy has fewer ready replicas than HPA; the trace's end at the last scrape of the first stretch where it pays
    for more (it has paid more at every scrape of that stretch, whatever its extra replicas served); then every
    scrape in order. Each with every burst size: a burst also keeps K at 1 where the trace so far is too small."""
    t = policy.timeline_t
    scrapes = range(first, min(first + span, len(t)))
    fewer = [k for k in scrapes if policy.timeline_ready[k] < hpa.timeline_ready[k]]
    more = list(itertools.takewhile(lambda k: policy.timeline_replicas[k] > hpa.timeline_replicas[k], scrapes))
    tried = [Attack(t[k] + BURST_OFFSET_S, 0, "fewer ready replicas than HPA") for k in fewer]
    tried += [Attack(t[k] + BURST_OFFSET_S, 0, "paid for more replicas than HPA") for k in more[::-1]]
    tried += [Attack(t[k] + BURST_OFFSET_S, 0, "after the first difference") for k in scrapes]
    return _unique([replace(a, burst=b, trickle_s=s) for a in tried for b in bursts for s in TRICKLES_S])


def _unique(attacks: list[Attack]) -> list[Attack]:
    """The first attack of each (time, burst, trickle), in order."""
    seen: dict[tuple[float, int, int], Attack] = {}
    for a in attacks:
        seen.setdefault((a.at_s, a.burst, a.trickle_s), a)
    return list(seen.values())


def attacked(arrivals: np.ndarray, attack: Attack) -> np.ndarray:
    """The arrivals before the attack's moment, then its burst and trickle: the trace ends with them."""
    burst = np.full(attack.burst, attack.at_s)
    trickle = attack.at_s + 1.0 + np.arange(attack.trickle_s, dtype=float)
    return np.sort(np.concatenate([arrivals[arrivals < attack.at_s], burst, trickle]))


def same_until(a: SimResult, b: SimResult, until_s: float) -> bool:
    """Whether two runs of one policy paid for and had ready the same replicas at every scrape before `until_s`."""
    n = sum(1 for t in a.timeline_t if t < until_s)
    return (
        len(b.timeline_t) >= n
        and a.timeline_replicas[:n] == b.timeline_replicas[:n]
        and a.timeline_ready[:n] == b.timeline_ready[:n]
    )
