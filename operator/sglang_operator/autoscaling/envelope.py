"""The burst envelope: pure functions over the policy's memory of five-minute blocks (docs/autoscaling.md, step 2).

The fleet must not scale down into a burst it has just seen: a burst shorter than the start-up delay is over
before a replica started for it is ready. So the busiest short-window rate of each block is remembered, and the
policy sizes for the second highest of the last 90 minutes, each scaled by how far the traffic's level has fallen
since: the half-hour mean rate, or where the blocks' means lie on a line (a steady rise or decline, which the mean
lags by a quarter of an hour) the line. No I/O, clock or randomness.
"""

import bisect
import itertools
import math
from collections.abc import Sequence

from .signals import Block, Samples, usable

# The busiest short-window rate of each ENVELOPE_BLOCK_S is remembered for ENVELOPE_HOLD_S, scaled down by how far
# the mean rate over ENVELOPE_MEAN_S has fallen since.
ENVELOPE_BLOCK_S = 300.0
ENVELOPE_HOLD_S = 5400.0
ENVELOPE_MEAN_S = 1800.0
ENVELOPE_RANK = 2  # the envelope is the second highest held block peak: one isolated burst is not a pattern
ENVELOPE_MARGIN = 1.05  # a held peak samples the next burst's height, which varies: 5 % over the burst headroom
# A steady rise or decline the half-hour mean lags by a quarter of an hour: when the blocks' mean rates of the last
# ENVELOPE_FIT_S lie along a line (at least three blocks, the line explaining at least ENVELOPE_LINE_FIT of their
# variance), the level is read off the line: now on a decline, and when a peak was seen on a rise.
ENVELOPE_FIT_S = 1200.0
ENVELOPE_LINE_FIT = 0.85


def update_envelope(blocks: Sequence[Block], samples: Samples, now: float) -> tuple[Block, ...]:
    """The envelope's memory with this reading added: its busiest short-window rate (`qps_peak`, `qps_burst`) and
    its stable rate go into the newest block, or start a new one every ENVELOPE_BLOCK_S; blocks older than the hold
    plus the mean's window are dropped (at most 25 blocks)."""
    peaks = [x for x in (samples.qps_peak, samples.qps_burst, samples.qps) if x is not None and usable(x)]
    kept = [b for b in blocks if now - ENVELOPE_HOLD_S - ENVELOPE_MEAN_S < b.start <= now]
    if not peaks or samples.qps is None or not usable(samples.qps):
        return tuple(kept)
    peak, qps = max(peaks), samples.qps
    if kept and now - kept[-1].start < ENVELOPE_BLOCK_S:
        last = kept[-1]
        kept[-1] = Block(last.start, max(last.peak_qps, peak), last.qps_sum + qps, last.readings + 1)
    else:
        kept.append(Block(now, peak, qps, 1))
    return tuple(kept)


def envelope_qps(blocks: Sequence[Block], now: float) -> float:
    """The burst envelope: the ENVELOPE_RANK-th highest block peak of the last ENVELOPE_HOLD_S, each scaled by the
    mean rate now over the mean rate when it was seen (only down: a risen mean is in the newest peaks already); 0
    without memory. The second highest, not the highest: a burst that came once in 90 minutes is not held, bursts
    that recur are.

    Means are over ENVELOPE_MEAN_S of blocks ending at each block. A burst lifts its own mean a little, so a past
    burst is held a little lower than it was; a day's decline lowers the mean now, and the held peaks with it. The
    level now is the lower of that mean and `declining_level`, the level then the higher of its mean and
    `rising_level`: a steady decline is followed, and a peak seen on a steady rise is measured against the rise's
    level, not the lagging mean (a day's peak taken for a burst would be held through the evening)."""

    if not blocks:
        return 0.0
    sums = list(itertools.accumulate((b.qps_sum for b in blocks), initial=0.0))
    counts = list(itertools.accumulate((b.readings for b in blocks), initial=0))
    starts = [b.start for b in blocks]

    def mean_at(i: int) -> float:  # blocks i - k .. i, those within ENVELOPE_MEAN_S of block i
        first = bisect.bisect_right(starts, starts[i] - ENVELOPE_MEAN_S)
        count = counts[i + 1] - counts[first]
        return (sums[i + 1] - sums[first]) / count if count else 0.0

    now_mean = min(mean_at(len(blocks) - 1), declining_level(blocks, now))
    held: list[float] = []
    for i, b in enumerate(blocks):
        if now - b.start >= ENVELOPE_HOLD_S:
            continue
        then = max(mean_at(i), rising_level(blocks, i, now))
        scale = 1.0 if then <= 0 else min(1.0, now_mean / then)
        held.append(b.peak_qps * scale)
    held.sort(reverse=True)
    return held[ENVELOPE_RANK - 1] if len(held) >= ENVELOPE_RANK else 0.0


def declining_level(blocks: Sequence[Block], now: float) -> float:
    """The rate now on the line through the mean rates of the blocks of the last ENVELOPE_FIT_S, when they fall
    along it; inf otherwise (see `_trend_line`)."""
    line = _trend_line(blocks, len(blocks) - 1, now)
    if line is None or line[2] >= 0:
        return math.inf
    x, y, slope = line
    return max(0.0, y + slope * (now - x))


def rising_level(blocks: Sequence[Block], i: int, now: float) -> float:
    """The rate at the start of block i on the line through the mean rates of the blocks of the ENVELOPE_FIT_S up
    to it, when they rise along it; 0 otherwise (see `_trend_line`). The start: the lowest level the rise gives
    that block, so a peak seen on a rise is never taken for a higher burst than the line shows."""
    line = _trend_line(blocks, i, now)
    if line is None or line[2] <= 0:
        return 0.0
    x, y, slope = line
    return max(0.0, y + slope * (blocks[i].start - x))


def _trend_line(blocks: Sequence[Block], last: int, now: float) -> tuple[float, float, float] | None:
    """(mean time, mean rate, slope) of the weighted least-squares line through the mean rates of the blocks of the
    ENVELOPE_FIT_S up to block `last`, when it explains at least ENVELOPE_LINE_FIT of their variance (R^2) over
    at least three blocks; None otherwise.

    Each block's mean is placed at the middle of its span (the newest ends now) and weighted by its readings. Traffic
    that keeps its level, or swings (bursts, on/off, periodic waves), fits no line: the half-hour mean stands.
    """
    points = []
    for i in range(last, -1, -1):
        b = blocks[i]
        if b.start <= blocks[last].start - ENVELOPE_FIT_S:
            break
        end = blocks[i + 1].start if i + 1 < len(blocks) else now
        points.append(((b.start + max(b.start, end)) / 2.0, b.qps_sum / b.readings, float(b.readings)))
    if len(points) < 3:
        return None
    weight = sum(w for _, _, w in points)
    mx = sum(x * w for x, _, w in points) / weight
    my = sum(y * w for _, y, w in points) / weight
    sxx = sum(w * (x - mx) ** 2 for x, _, w in points)
    syy = sum(w * (y - my) ** 2 for _, y, w in points)
    sxy = sum(w * (x - mx) * (y - my) for x, y, w in points)
    if sxx <= 0 or syy <= 0 or sxy * sxy < ENVELOPE_LINE_FIT * sxx * syy:
        return None
    return mx, my, sxy / sxx
