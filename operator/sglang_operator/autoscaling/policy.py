"""The autoscaling policy: a pure function from (fleet, metrics, spec, memory, now) to a replica count and a reason.

No I/O, clock or randomness here, so tests drive it over time with literals and `bench/autoscale.py` runs this very
function against a simulated fleet.

How one decision is made (docs/autoscaling.md has the reasons, docs/autoscaling-experiments.md the measurements):
1. Missing or stale metrics hold the current count (never scale down on no data). So do a reading no real fleet gives
   (past `limits.MAX_READING`: `signals.unreadable`) and a demand that is not finite or past
   `limits.MAX_DEMAND_REPLICAS` (`signals.unknown_demand`): unknown, reported in the reason, never computed on.
2. Bursty traffic (the busiest short-window rate of the last minutes is `burstyTraffic.threshold` x the mean rate or
   more) switches to that rule's constants: bursts that short end before a replica started for them is ready, so
   the fleet is sized for the busiest rate and held, instead of following the current rate (`bursty_rule`).
3. Steady demand, in fractional replicas: the capacity rule Q x T x (1 + headroom) / C, with Q the largest of the
   stable rate (with headroom), the peak short-window rate of the recent past (with burst headroom) and the burst
   envelope (with burst headroom), and T the time a request holds a slot. The envelope is the busiest short-window
   rate of the last 90 minutes, each past peak scaled down by as much as the half-hour mean rate has fallen since
   it: a burst seen an hour ago on traffic that has not declined is held (the next one is likely as high, and a replica
   started for it arrives after it), while a day's sustained decline releases it (`envelope.py`; a steady rise or
   decline is read off a line, not the lagging mean). While the stable rate has risen at every step for several
   minutes to a level it has not had in the last ten (a ramp, not a step, noise or a wave: `sustainedRise`), it is
   projected along that rise over the start-up delay first. While the stable rate of the last ten minutes falls
   along a line (a steady decline), the older, higher rates are no bursts: the envelope is not held, the peak is
   the latest short-window rate and the bursty rule is off (`declining_slope`). A GPU-utilisation target can only
   raise it; any traffic keeps one replica.
4. Backlog: queued requests beyond what the fleet tolerates are a one-off debt, paid with extra replicas that drain
   them within one start-up delay. That part is not remembered, so it leaves as soon as the queue does.
5. HPA-style tolerance around the current count (optionally wider below it).
6. Scale-up is fast but bounded per interval (max(100 %, maxScaleUpStep)); panic mode (burst demand at least
   `panicThreshold` x the ready capacity, or nothing ready at all) lifts the bound. Replicas still starting are
   already in the count, so they are capacity on the way. Scale-down goes to the highest steady recommendation of
   the stabilisation window (a shorter quiet window when, over a longer lookback, the fleet met its SLO, or without
   that reading did not queue, and its traffic did not rise again), never below what the running requests occupy,
   and not while nothing is ready. With nothing remembered (the fleet's first decision, or a memory lost or
   expired) the current count counts as recommended now, as HPA seeds its window: the window starts, it is not skipped.
7. Bounds: minReplicas/maxReplicas and the GPU budget (warm replicas give way first).
"""

import bisect
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from ..api.spec import AutoscalingSpec, AutoscalingTargets, SustainedRise
from ..capacity import ceil_replicas, replicas_exact
from .envelope import ENVELOPE_MARGIN, envelope_qps, update_envelope
from .signals import (
    Block,
    Decision,
    FleetState,
    Mode,
    Recommendation,
    Samples,
    unknown_demand,
    unreadable,
    usable,
)

# Enough memory for a 300 s window at a 15 s interval even before compaction; compaction usually keeps far fewer.
MAX_MEMORY = 20
# A steady decline: the stable-rate readings of the last DECLINE_FIT_S (at least DECLINE_COVER of it covered) lie
# along a falling line that explains at least DECLINE_LINE_FIT of their variance.
DECLINE_FIT_S = 600.0
DECLINE_COVER = 0.9
DECLINE_LINE_FIT = 0.85


@dataclass(frozen=True)
class Demand:
    steady: float
    """Replicas the request rate, concurrency and GPU targets ask for."""
    backlog: float
    """Extra replicas that drain the excess queue within one start-up delay."""
    in_flight: int
    """Replicas the requests running right now occupy: a floor for scaling down."""
    parts: dict[str, float]
    why: str


def decide(
    current: FleetState,
    samples: Samples | None,
    spec: AutoscalingSpec,
    history: Sequence[Recommendation],
    now: float,
    envelope: Sequence[Block] = (),
) -> Decision:
    """Decide the serving replica count for the next interval. `history` and `envelope` are the memory the previous
    decision returned (`Decision.history`, `Decision.envelope`)."""
    low, high, budget = _bounds(spec, current.gpus_per_replica)
    memory = prune_history(history, now, spec)
    if not memory:  # the first decision, or the memory was lost or expired: the count the fleet has counts, as HPA's
        memory = (Recommendation(now, current.desired),)
    read = _read(current, samples, spec, now, envelope)
    if isinstance(read, str):  # missing, stale, or a reading or demand no fleet gives: unknown, the count holds
        held = clamp_count(current.desired, low, high)
        return Decision(
            replicas=held,
            reason=f"holding {held} replicas: {read}",
            mode="hold",
            recommendation=current.desired,
            metrics_available=False,
            observed=_observed(samples, now, {}),
            warm_replicas=_warm(spec, held, budget),
            promote=0,
            history=memory,
            envelope=tuple(envelope),
        )
    rule, rates, demand, blocks = read.rule, read.rates, read.demand, read.blocks
    steady = tolerate(demand.steady, current.desired, rule)
    recommendation = max(steady, tolerate(demand.steady + demand.backlog, current.desired, rule))
    memory = prune_history((*memory, Recommendation(now, steady)), now, spec)
    panic = _panic(current, rates, rule)
    mode: Mode = "panic" if panic and recommendation > current.desired else "normal"
    down_window, quiet = quiet_window(current.ready, rates.qps_trend, rates.slo_miss_ratio, rates.queued_peak, rule)
    target, how = stabilise(current.desired, recommendation, memory, rule, now, mode, demand.in_flight, down_window)
    if quiet and target < current.desired:
        how += f" ({quiet}: {down_window}s window)"
    if current.ready == 0 and target < current.desired:
        target, how = current.desired, f"holding {current.desired} until the first replica is ready"
    replicas = clamp_count(target, low, high)
    if replicas != target:
        how += f", bounded to {replicas} (min {low}, max {high})"
    warm = _warm(spec, replicas, budget)
    promote = min(current.warm, max(0, replicas - current.desired))
    if promote:
        how += f", promoting {promote} warm"
    return Decision(
        replicas=replicas,
        reason=f"{how}: {demand.why}",
        mode=mode,
        recommendation=recommendation,
        metrics_available=True,
        observed=_observed(samples, now, demand.parts),
        warm_replicas=warm,
        promote=promote,
        history=memory,
        envelope=blocks,
    )


@dataclass(frozen=True)
class _Reading:
    """What a trusted reading asks for: the rule it chose, its rates under that rule, the demand, and the burst
    envelope's memory with the reading in it."""

    rule: AutoscalingSpec
    rates: Samples
    demand: Demand
    blocks: tuple[Block, ...]


def _read(
    current: FleetState, samples: Samples | None, spec: AutoscalingSpec, now: float, envelope: Sequence[Block]
) -> _Reading | str:
    """The demand of a reading (steps 2 and 3 of the module docstring), or why the count must hold instead: the
    reading is missing, stale or one no fleet gives (`_metrics_problem`), or its demand cannot be computed on."""
    problem = _metrics_problem(current, samples, spec, now)
    if problem is not None or samples is None:
        return problem or "no metrics"
    blocks = update_envelope(envelope, samples, now)
    burst_envelope = envelope_qps(blocks, now) if (samples.qps or 0.0) > 0 else 0.0  # idle: nothing to hold for
    chosen = select_rule(
        spec,
        Load(samples.qps, samples.qps_burst, samples.qps_peak),
        Load(samples.bursty_qps, samples.bursty_qps_burst, samples.bursty_qps_peak),
        samples.qps_trend,
    )
    if chosen.falling is not None:  # the older, higher rates of a decline are no bursts: the envelope is not held
        burst_envelope = 0.0
    load = chosen.load
    rates = samples.with_fields(qps=load.stable, qps_burst=load.burst, qps_peak=load.peak)
    demand = _demand(
        current,
        rates,
        chosen.spec,
        chosen.rising,
        burst_envelope * (1.0 + spec.targets.burst_headroom) * ENVELOPE_MARGIN,
        chosen.falling,
    )
    if isinstance(demand, str):  # a demand that cannot be computed on is unknown, as a missing metric is
        return demand
    if chosen.bursty:
        demand = replace(demand, why=f"{chosen.bursty}; {demand.why}")
    return _Reading(chosen.spec, rates, demand, blocks)


def prune_history(history: Sequence[Recommendation], now: float, spec: AutoscalingSpec) -> tuple[Recommendation, ...]:
    """Keep only recommendations that can still matter, oldest first, at most MAX_MEMORY.

    The scale-down window needs only its maximum, so an entry with a later entry at least as high is dropped
    (the survivors fall strictly over time); the scale-up window needs its minimum, so it keeps everything.
    Over the cap, two neighbours merge into (later time, higher count): that holds more replicas, never fewer.
    """
    down = spec.windows.scale_down_stabilization_seconds
    if spec.bursty_traffic.enabled:  # the memory serves both rules, whichever the next reading picks
        down = max(down, spec.bursty_traffic.scale_down_stabilization_seconds)
    up = spec.windows.scale_up_stabilization_seconds
    recent = sorted((r for r in history if now - max(down, up) < r.time <= now), key=lambda r: r.time)
    kept: list[Recommendation] = []
    for rec in recent:
        while kept and kept[-1].replicas <= rec.replicas and now - kept[-1].time >= up:
            kept.pop()
        kept.append(rec)
    while len(kept) > MAX_MEMORY:
        i = min(range(len(kept) - 1), key=lambda j: abs(kept[j].replicas - kept[j + 1].replicas))
        merged = Recommendation(kept[i + 1].time, max(kept[i].replicas, kept[i + 1].replicas))
        kept[i : i + 2] = [merged]
    return tuple(kept)


def _bounds(spec: AutoscalingSpec, gpus_per_replica: int) -> tuple[int, int, int | None]:
    """(min, max) serving replicas and the replica budget the GPU limit allows (None: unlimited)."""
    budget = None
    high = spec.max_replicas
    if spec.max_gpus is not None:
        budget = spec.max_gpus // max(1, gpus_per_replica)
        high = min(high, budget)
    return min(spec.min_replicas, high), high, budget


def clamp_count(value: int, low: int, high: int) -> int:
    return max(low, min(high, value))


def _warm(spec: AutoscalingSpec, serving: int, budget: int | None) -> int:
    if budget is None:
        return spec.warm_replicas
    return max(0, min(spec.warm_replicas, budget - serving))


def tolerate(exact: float, desired: int, spec: AutoscalingSpec) -> int:
    """The count for `exact` fractional replicas: a non-zero count whose tolerance band holds the demand is kept
    (HPA); above the band, the smallest count whose band holds it; below the band, ceil(exact).

    The band can be wider below the count than above it (hysteresis): adding a replica that is not needed costs
    a little; removing one that is still needed costs a start-up delay of misses. Scaling up only to the smallest
    count that the hold rule would keep, not to ceil(exact) as HPA does, saves the replica that rounding up adds
    when demand is just past an integer (measured on the synthetic trace family: docs/autoscaling-experiments.md).
    """
    wanted = ceil_replicas(exact)
    if desired <= 0 or wanted <= 0:
        return wanted
    below = spec.scale_down_tolerance if spec.scale_down_tolerance is not None else spec.tolerance
    above = desired * (1.0 + spec.tolerance)
    if desired * (1.0 - below) <= exact <= above:
        return desired
    if exact > above and above > 0:  # above > 0: a tolerance of -1 (refused by the spec's rules) divides by zero
        return max(desired + 1, ceil_replicas(exact / (1.0 + spec.tolerance)))
    return wanted


def _metrics_problem(current: FleetState, samples: Samples | None, spec: AutoscalingSpec, now: float) -> str | None:
    """Why the reading cannot be trusted, or None when it can."""
    if samples is None:
        return "metrics unavailable"
    if samples.age_seconds is None:
        return "no scrape of this deployment in Prometheus"
    age = samples.age_seconds + max(0.0, now - samples.collected_at)
    if not math.isfinite(age):
        return f"the metrics' age reads {age:g}: unknown"
    if age > spec.windows.metrics_max_age_seconds:
        return f"metrics are {age:.0f}s old (max {spec.windows.metrics_max_age_seconds}s)"
    if (unknown := unreadable(samples)) is not None:
        return unknown
    if not usable(samples.qps):
        return "no request rate (router or workers)"
    has_slot = usable(samples.slot_seconds) and (samples.slot_seconds or 0.0) > 0
    if current.ready == 0:
        # Nothing serves yet: with a slot time remembered by Prometheus the router's rate can still size the
        # fleet (scale-up only); without one, one replica is all that can be justified.
        if current.desired > 0 and not has_slot:
            return "waiting for the first ready replica"
        return None
    if (samples.qps or 0.0) > 0 and not has_slot:
        return "no slot time (e2e minus queue time) from the workers"
    return None


@dataclass(frozen=True)
class Load:
    """Demand in one measure over the policy's three windows: req/s for a colocated fleet, a role's own measure for
    a prefill/decode fleet (`roles.py`). None: no reading."""

    stable: float | None
    """Over the stable window (`windows.rateSeconds`; the bursty rule's `rateSeconds` for its load)."""
    burst: float | None
    """The latest short window (`burstSeconds`): the newest reading, which the peak's subquery may not reach yet."""
    peak: float | None
    """The busiest short window of the lookback (`peakLookbackSeconds`)."""


@dataclass(frozen=True)
class Rule:
    """What `select_rule` chose: the constants and the load to size with, and why."""

    spec: AutoscalingSpec
    """The spec, or the bursty-traffic rule's constants in its place (`bursty_rule`)."""
    load: Load
    bursty: str | None
    """Why the traffic counts as bursty (None: it does not)."""
    rising: float | None
    """A sustained rise's slope per second (`sustained_slope`), to project the stable load along; None: none."""
    falling: float | None
    """A steady decline's slope per second (`declining_slope`, negative); None: none."""


def select_rule(
    spec: AutoscalingSpec,
    load: Load,
    bursty_load: Load,
    trend: Sequence[tuple[float, float]] | None,
    unit: str = "req/s",
) -> Rule:
    """The rule to decide with, from the load over the policy's windows, over the bursty rule's windows, and the
    stable load's series (`trend`). Pure; a colocated fleet's decision and each role's (`roles.py`) call it.

    - A steady decline (`declining_slope`): the older, higher readings are no bursts, so the peak is the latest
      short window and the bursty rule is off (the caller leaves the burst envelope out too).
    - Else bursty traffic (`bursty_rule`): the bursty rule's constants and its load.
    - Else the spec, with a sustained rise's slope when there is one (`sustained_slope`).
    """
    fall = declining_slope(trend)
    if fall is None:
        bursty = bursty_rule(spec, bursty_load.stable, bursty_load.peak, unit)
        if bursty is not None:
            return Rule(bursty[0], bursty_load, bursty[1], None, None)
    else:
        load = replace(load, peak=load.burst)
    return Rule(spec, load, None, sustained_slope(trend, spec.sustained_rise), fall)


def bursty_rule(
    spec: AutoscalingSpec, mean: float | None, peak: float | None, unit: str = "req/s"
) -> tuple[AutoscalingSpec, str] | None:
    """The bursty-traffic rule's constants and why, when its busiest short-window reading (`peak`) is at least
    `threshold` x its mean (`mean`); None: not bursty (or the rule is off, or a reading is missing).

    The bursty rule is the same policy with other constants, so every other part (backlog, panic, bounds, the
    memory) behaves alike in both: its load stands in for the steady one, its tolerance is the band above the count
    (the band below keeps the steady value: hysteresis), no headroom is added to the busiest reading, and its
    scale-down window replaces the full one.
    """
    rule = spec.bursty_traffic
    if not rule.enabled or mean is None or peak is None or not (usable(mean) and usable(peak)):
        return None
    if mean <= 0 or peak < rule.threshold * mean:
        return None
    below = spec.scale_down_tolerance if spec.scale_down_tolerance is not None else spec.tolerance
    bursty = spec.model_copy(
        update={
            "tolerance": rule.tolerance,
            "scale_down_tolerance": below,
            "targets": spec.targets.model_copy(update={"headroom": 0.0, "burst_headroom": 0.0}),
            "windows": spec.windows.model_copy(
                update={"scale_down_stabilization_seconds": rule.scale_down_stabilization_seconds}
            ),
        }
    )
    return bursty, f"bursty traffic (peak {_fmt(peak)} {unit} is {peak / mean:.1f} x the mean {_fmt(mean)})"


def _fmt(value: float) -> str:
    return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"


def project(stable: float, slope: float, spec: AutoscalingSpec) -> tuple[float, float]:
    """(the stable load projected along a sustained rise, seconds ahead): `sustainedRise.projection` x `slope` over
    the start-up delay plus the stable window's lag (half its length)."""
    lead = spec.startup_seconds + spec.windows.rate_seconds / 2
    return stable + spec.sustained_rise.projection * slope * lead, lead


def sustained_slope(trend: Sequence[tuple[float, float]] | None, rule: SustainedRise) -> float | None:
    """The stable rate's slope (req/s per second) over the rule's span when it rose by at least `minRise` at every
    step to a new level, else None.

    The readings compared are the newest point and those whole steps before it (a point within a quarter step
    of each counts); a missing one means no verdict. A step change in traffic lifts a rate window for only as long
    as the window is (a 120 s window read every 60 s rises over three steps at most), and noise does not rise at
    every step, so a rule with more steps than that leaves both alone. A new level: the newest reading is more
    than `minRise` above every reading of the series before the span (the series covers the quiet lookback, 600 s
    by default). A rise back to a level the traffic had minutes ago is a wave or a recovery: projecting it carries
    the fleet past the crest, while the level itself is held by the scale-down window and the burst envelope.
    That is what lets the span be four steps: a 10-minute wave's five-minute rises are as long as that.
    """
    if not rule.enabled or not trend:
        return None
    newest = trend[-1][0]
    times = [point[0] for point in trend]
    rates: list[float] = []
    for k in range(rule.steps, -1, -1):
        at = newest - k * rule.step_seconds
        i = bisect.bisect_left(times, at)  # the nearest reading is at i - 1 or i (the series is oldest first)
        time, rate = min(trend[max(0, i - 1) : i + 1], key=lambda point: abs(point[0] - at))
        if abs(time - at) > rule.step_seconds / 4:
            return None
        rates.append(rate)
    if not all(later > earlier * (1.0 + rule.min_rise) for earlier, later in itertools.pairwise(rates)):
        return None
    before = [rate for time, rate in trend if time < newest - (rule.steps + 0.25) * rule.step_seconds]
    if before and max(before) * (1.0 + rule.min_rise) >= rates[-1]:
        return None  # back to a level the series had before the rise: a wave or a recovery, not a new level
    return (rates[-1] - rates[0]) / (rule.steps * rule.step_seconds)


def declining_slope(trend: Sequence[tuple[float, float]] | None) -> float | None:
    """The stable rate's slope (req/s per second, negative) when its readings of the last DECLINE_FIT_S lie along
    a falling line, else None.

    The line is the least-squares line through the readings (at least DECLINE_COVER of the span covered), and must
    explain at least DECLINE_LINE_FIT of their variance. A decline makes every older rate a higher one: the busiest
    short-window rate of the last minutes, the blocks of the burst envelope and the bursty rule's busiest minute
    all read the traffic's past level, not a burst. Traffic that keeps its level, swings (a wave, on/off) or bursts
    fits no such line over ten minutes; a day's evening decline is too slow against its noise to fit one either.
    """
    if not trend:
        return None
    since = trend[-1][0] - DECLINE_FIT_S
    points = [(time, rate) for time, rate in trend if time >= since]
    if len(points) < 3 or points[-1][0] - points[0][0] < DECLINE_COVER * DECLINE_FIT_S:
        return None
    mx = sum(time for time, _ in points) / len(points)
    my = sum(rate for _, rate in points) / len(points)
    sxx = sum((time - mx) ** 2 for time, _ in points)
    syy = sum((rate - my) ** 2 for _, rate in points)
    sxy = sum((time - mx) * (rate - my) for time, rate in points)
    if sxy >= 0 or syy <= 0 or sxy * sxy < DECLINE_LINE_FIT * sxx * syy:
        return None
    return sxy / sxx


def _demand(
    current: FleetState,
    samples: Samples,
    spec: AutoscalingSpec,
    slope: float | None,
    envelope_load: float = 0.0,
    fall: float | None = None,
) -> Demand | str:
    """Fractional replicas the signals ask for, their parts (for status) and a sentence explaining them; or why the
    demand is unknown (`unknown_demand`: a term that is not finite or past MAX_DEMAND_REPLICAS).

    `slope` (req/s per second) is a sustained rise of the stable rate: the rate is then projected by
    `sustainedRise.projection` x slope over the start-up delay plus the stable window's lag (half its length).
    `envelope_load` is the burst envelope with its headroom (req/s). `fall` (req/s per second) is a steady decline,
    for the reason and status only: the caller has already left the envelope and the older peaks out.
    """
    c = max(1, current.concurrency_per_replica)
    targets = spec.targets
    qps = samples.qps or 0.0
    peak = max(samples.qps_peak or 0.0, samples.qps_burst or 0.0)
    slot = samples.slot_seconds if usable(samples.slot_seconds) else None
    queued = max(0.0, samples.queued or 0.0)
    running = max(0.0, samples.running or 0.0)
    parts: dict[str, float] = {}

    capacity = 0.0
    why = f"{qps:.3g} req/s"
    if fall is not None:
        why = f"{qps:.3g} req/s falling {-60 * fall:.3g} req/s per minute"
        parts["fallingQpsPerMinute"] = -60 * fall
    if slope is not None:
        projected, lead = project(qps, slope, spec)
        why = f"{qps:.3g} req/s rising {60 * slope:.3g} req/s per minute, {projected:.3g} req/s in {lead:.0f}s"
        parts["projectedQps"] = qps = projected
    if slot:
        capacity, why = _capacity(qps, peak, envelope_load, slot, c, targets, why, fall is not None, parts)
    steady = capacity
    parts["concurrencyReplicas"] = running / c  # a floor for scale-down only (see `stabilise`)
    if targets.gpu_utilization and usable(samples.gpu_utilization) and current.ready > 0:
        gpu = current.ready * (samples.gpu_utilization or 0.0) / targets.gpu_utilization
        parts["gpuReplicas"] = gpu
        if gpu > steady:
            steady = gpu
            why += f"; GPU {samples.gpu_utilization:.0f}% vs target {targets.gpu_utilization}% needs {gpu:.2f}"
    if max(qps, running, queued) > 0 and steady < 1.0:
        steady = 1.0  # any traffic keeps (or wakes) one replica; only an idle fleet goes to zero
    excess = max(0.0, queued - targets.queue_per_replica * current.ready)
    backlog = excess * (slot or 1.0) / (c * max(1.0, float(spec.startup_seconds)))
    terms = {"the request rate": capacity, "the GPU target": parts.get("gpuReplicas", 0.0), "the queue": backlog,
             "the running requests": running / c, "the demand": steady + backlog}  # fmt: skip
    if (unknown := unknown_demand(terms)) is not None:
        return unknown
    if backlog > 0:
        why += f" + {queued:.0f} queued ({backlog:.2f})"
        parts["backlogReplicas"] = backlog
    parts["demandReplicas"] = steady + backlog
    return Demand(steady, backlog, ceil_replicas(running / c), parts, why)


def _capacity(
    qps: float,
    peak: float,
    envelope_load: float,
    slot: float,
    c: int,
    targets: AutoscalingTargets,
    why: str,
    falling: bool,
    parts: dict[str, float],
) -> tuple[float, str]:
    """The capacity rule's replicas for the largest of the stable rate with headroom, the peak with burst headroom
    and the burst envelope, and the sentence that says which (its parts go into `parts`). NaN where no load can be
    sized (a headroom below -1, which the spec's rules refuse): `unknown_demand` reports it."""
    stable_load = qps * (1.0 + targets.headroom)
    burst_load = peak * (1.0 + targets.burst_headroom)
    load = max(stable_load, burst_load, envelope_load)
    capacity = replicas_exact(load, slot, c) if load >= 0 else math.nan
    basis = why
    if burst_load > stable_load:
        basis = f"{peak:.3g} req/s peak" + (f" ({why})" if falling else "")
    if envelope_load > max(stable_load, burst_load):
        basis = f"{envelope_load:.3g} req/s burst envelope ({qps:.3g} req/s now)"
        parts["envelopeQps"] = envelope_load
    parts["capacityReplicas"] = capacity
    return capacity, f"{basis} x {slot:.3g}s slot / C {c} = {capacity:.2f}"


def _panic(current: FleetState, samples: Samples, spec: AutoscalingSpec) -> bool:
    """Panic when the latest short-window demand is at least panicThreshold x the ready capacity (Knative-style).

    With nothing ready (waking from zero) any scale-up is a panic: there is no capacity to protect.
    """
    if current.ready == 0:
        return True
    slot, burst = samples.slot_seconds, samples.qps_burst
    if slot is None or burst is None or not (usable(slot) and usable(burst)):
        return False
    c = max(1, current.concurrency_per_replica)
    queued = max(0.0, samples.queued or 0.0)
    demand = replicas_exact(burst, slot, c) + queued / c
    return demand >= spec.panic_threshold * current.ready


def quiet_window(
    ready: int,
    trend: Sequence[tuple[float, float]] | None,
    slo_miss_ratio: float | None,
    queued_peak: float | None,
    spec: AutoscalingSpec,
) -> tuple[int, str | None]:
    """The scale-down window, and why the fleet (or a role: `roles.py`) counts as quiet when it is the shorter quiet
    one (else None). `trend` is the stable load's series, `queued_peak` the most queued at once over the lookback.

    The full window keeps capacity through the gaps between bursts that hurt and through the troughs of periodic
    traffic. A fleet is quiet when, over the last `quietLookbackSeconds`, it met its SLO (at most `slo.quietMissRatio`
    of the requests admitted waited longer than `slo.queueSeconds`: capacity was not short) and its stable rate did
    not rise by more than `quietMaxRise` (the traffic is not coming back); its surplus then goes after the shorter
    quiet window, so a declining day pays less. Without an SLO reading the queue gauge stands in (no queue beyond
    `queuePerReplica` during the lookback); with neither (or nothing ready to report) the full window applies.
    """
    windows = spec.windows
    full, lookback = windows.scale_down_stabilization_seconds, windows.quiet_lookback_seconds
    quiet = min(full, windows.quiet_scale_down_seconds)
    if ready == 0 or largest_rise(trend, lookback) > windows.quiet_max_rise:
        return full, None
    slo = spec.slo
    if slo.enabled and slo_miss_ratio is not None and usable(slo_miss_ratio):
        if slo_miss_ratio <= slo.quiet_miss_ratio:
            return quiet, f"{100 * slo_miss_ratio:.3g}% of requests waited over {slo.queue_seconds:g}s in {lookback}s"
        return full, None
    if queued_peak is not None and usable(queued_peak) and queued_peak <= spec.targets.queue_per_replica * ready:
        return quiet, f"no queue in {lookback}s"
    return full, None


def largest_rise(trend: Sequence[tuple[float, float]] | None, lookback: float) -> float:
    """The largest rise of the rate within the last `lookback` seconds of the series: the most any reading exceeds
    the lowest one before it, as a fraction of that one (inf from zero; 0 when it only fell, or without a series).

    A decline never rises; periodic traffic rises within every period, wherever the lookback starts.
    """
    if not trend:
        return 0.0
    since = trend[-1][0] - lookback
    lowest, rise = math.inf, 0.0
    for time, rate in trend:
        if time < since:
            continue
        if rate > lowest:
            rise = max(rise, math.inf if lowest <= 0 else rate / lowest - 1.0)
        lowest = min(lowest, rate)
    return rise


def stabilise(
    desired: int,
    recommendation: int,
    memory: Sequence[Recommendation],
    spec: AutoscalingSpec,
    now: float,
    mode: Mode,
    in_flight: int,
    window: int,
) -> tuple[int, str]:
    """Apply the scale-up bound/window and the `window`-second scale-down window; returns the target and how.

    The window remembers steady recommendations only: replicas asked for a queue backlog leave as the backlog does.
    Scaling down never goes below the replicas the running requests occupy right now.
    """
    if recommendation > desired:
        up_window = spec.windows.scale_up_stabilization_seconds
        target = recommendation
        if up_window > 0:
            lowest = min(r.replicas for r in memory if now - r.time < up_window or r.time == now)
            target = max(desired, min(target, lowest))
        if mode != "panic":
            target = min(target, max(2 * desired, desired + spec.max_scale_up_step))
        if target == desired:
            return desired, f"holding {desired} (scale-up stabilisation)"
        verb = "panic: scaling up" if mode == "panic" else "scaling up"
        return target, f"{verb} {desired} -> {target}"
    highest = max([r.replicas for r in memory if now - r.time < window] + [recommendation, in_flight])
    if highest < desired:
        return highest, f"scaling down {desired} -> {highest}"
    if recommendation < desired:
        return desired, f"holding {desired} (recommending {recommendation}, {window}s scale-down window)"
    return desired, f"holding {desired}"


def _observed(samples: Samples | None, now: float, parts: dict[str, float]) -> dict[str, float]:
    out: dict[str, float] = {}
    if samples is not None:
        fields = {
            "qps": samples.qps,
            "qpsBurst": samples.qps_burst,
            "qpsPeak": samples.qps_peak,
            "slotSeconds": samples.slot_seconds,
            "running": samples.running,
            "queued": samples.queued,
            "queuedPeak": samples.queued_peak,
            "gpuUtilization": samples.gpu_utilization,
            "burstyQps": samples.bursty_qps,
            "burstyQpsPeak": samples.bursty_qps_peak,
            "sloMissRatio": samples.slo_miss_ratio,
        }
        out.update({k: float(v) for k, v in fields.items() if v is not None and math.isfinite(v)})
        if samples.age_seconds is not None:
            out["ageSeconds"] = samples.age_seconds + max(0.0, now - samples.collected_at)
    out.update(parts)
    return out
