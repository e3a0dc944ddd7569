"""The autoscaler of a prefill/decode fleet: one decision per role, from that role's own signals, each split across
the role's groups as `fleet_split` splits a colocated fleet. Pure.

A role decides in units of its first group's replica, within its groups' bounds summed (`unit_bounds`), with the
colocated policy's tolerance, scale-up step, panic, and its rules over the role's own measure and history
(`policy.select_rule`: bursty traffic, a sustained rise, a steady decline; `policy.quiet_window`: the quiet
scale-down window), and its own memory:

- **prefill**: uncached prompt tokens per second (prompt minus cached tokens, summed over the prefill servers) over
  what one replica prefills per second: `targets.prefillTokensPerSecondPerGPU` x its GPUs, else measured, C x
  uncached tokens per request / the time a request holds a prefill slot (the capacity rule in tokens: Q x T / C).
  The stable rate carries `targets.headroom`, the busiest short-window rate (the latest one included)
  `targets.burstHeadroom`. Raised by the router's mean time to first token above
  `targets.timeToFirstTokenSeconds` (ready x TTFT / target), and by its queue and its persisted bootstrap queue
  beyond `targets.queuePerReplica` per ready replica: extra replicas that prefill them within one start-up delay.
- **decode**: running requests (the mean over the rate window with headroom, the most of the lookback or now with
  burst headroom) over C, raised by KV-cache usage (ready x `sglang:token_usage` / `targets.decodeTokenUsage`), by
  the mean inter-token latency above `targets.interTokenLatencySeconds` (ready x latency / target), and by its
  persisted prealloc queue and its waiting queue beyond `targets.queuePerReplica` per ready replica (each holds a
  slot for the time a request stays, running requests / finished requests per second, at most a start-up delay's
  worth).

A handshake queue (prefill's bootstrap, decode's prealloc) raises its role only by what persisted over the last
`burstSeconds` (`RoleSamples.*_persisted`): the first handshakes of a burst hold requests there for milliseconds,
and one scrape that catches them is not a shortage.

Each role's measure (uncached tokens/s, running requests) takes the place of the colocated fleet's request rate in
the policy's rules: read over the bursty rule's windows it switches the role to that rule's constants; its series
(`RoleSamples.trend`) is projected along a sustained rise, read for a steady decline, and, with the role's SLO
reading and queue peak, decides whether the role is quiet (then its surplus goes after `quietScaleDownSeconds`).

A role whose signals are missing or stale holds its count; the other still moves. Then the GPU split: each role's
units become replicas per group (`split_capacity`; decode first within `maxGPUs`, prefill in what is left), and a
prefill share of the GPUs outside `prefillGPUShare` is brought inside by growing the role below its share, or, where
its bounds or the budget stop that, shrinking the other; the reason says so.
"""

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from ..api.groups import WorkerGroup
from ..api.limits import MAX_REPLICAS
from ..api.spec import AutoscalingSpec, PrefillGPUShare, Role
from ..capacity import ceil_replicas
from ..prometheus.roles import ROLES, RoleSamples
from ..topology import topology
from .fleet_split import GroupShape, Split, shapes, split_capacity, unit_bounds
from .policy import Load, Rule, clamp_count, project, prune_history, quiet_window, select_rule, stabilise, tolerate
from .signals import FleetState, Mode, Recommendation, unknown_demand, unreadable, usable

HOLD = "hold"
BOUNDS = "bounds"
GPU_SHARE = "prefillGPUShare"


@dataclass(frozen=True)
class RoleFleet:
    """One role of the fleet as the autoscaler sees it."""

    role: Role
    shapes: tuple[GroupShape, ...]
    """The role's groups; `concurrency` is a replica's capacity in the role's measure (`role_shapes`)."""
    current: FleetState
    """The role in units of its first group's replica (`fleet_split.group_fleet_state`)."""
    concurrency: int
    """Requests one unit runs at once (C)."""
    prefill_rate: float | None = None
    """Prefill: uncached tokens one unit prefills per second, from the spec; None: measured."""


@dataclass(frozen=True)
class RoleDemand:
    steady: float
    """Units the role's load asks for."""
    backlog: float
    """Extra units for its queues (not remembered)."""
    in_flight: int
    """Units the running requests occupy now: a floor for scaling down."""
    signal: str
    """The signal that set `steady`."""
    backlog_signal: str
    why: str
    parts: dict[str, float]
    rule: Rule
    """The policy's rule the role's measure chose (`role_rule`): its constants size and stabilise the role."""


@dataclass(frozen=True)
class RoleDecision:
    role: Role
    units: int
    """The role's size in units (its first group's replica)."""
    recommendation: int
    signal: str
    """The signal that decided: one of the demand's, `hold`, `bounds` or `prefillGPUShare`."""
    reason: str
    mode: Mode
    metrics_available: bool
    observed: Mapping[str, float]
    history: tuple[Recommendation, ...]


@dataclass(frozen=True)
class PdDecision:
    roles: dict[Role, RoleDecision]
    groups: dict[str, int]
    """Replicas per group, both roles."""
    replicas: dict[Role, int]
    """Replicas per role (its groups' together)."""
    prefill_share: float | None
    """Prefill GPUs / all GPUs of the split (None: no GPUs)."""


def role_shapes(groups: Sequence[WorkerGroup], spec: AutoscalingSpec) -> tuple[tuple[GroupShape, ...], float | None]:
    """The groups' shapes in the role's measure, and a unit's prefill rate when the spec gives one. A prefill role
    with `prefillTokensPerSecondPerGPU` measures capacity in GPUs (tokens/s scale with them); otherwise, as a
    colocated fleet, in concurrent requests."""
    per_gpu = spec.targets.prefill_tokens_per_second_per_gpu
    if groups and groups[0].role == "prefill" and per_gpu is not None:
        gpu_shapes = tuple(
            GroupShape(g.name, max(1, topology(g.spec).gpus_per_replica), topology(g.spec).gpus_per_replica,
                       g.min_replicas, g.max_replicas)
            for g in groups
        )  # fmt: skip
        return gpu_shapes, float(per_gpu * gpu_shapes[0].concurrency)
    return tuple(shapes(groups)), None


def decide_pd(
    fleets: Mapping[Role, RoleFleet],
    samples: Mapping[Role, RoleSamples | None],
    spec: AutoscalingSpec,
    memory: Mapping[Role, Sequence[Recommendation]],
    now: float,
) -> PdDecision:
    """Both roles' decisions, split into groups within the GPU budget and the prefill GPU share."""
    decisions = {role: decide_role(fleets[role], samples.get(role), spec, memory.get(role, ()), now) for role in ROLES}
    return keep_share(fleets, decisions, spec)


def decide_role(
    fleet: RoleFleet, samples: RoleSamples | None, spec: AutoscalingSpec, history: Sequence[Recommendation], now: float
) -> RoleDecision:
    """One role's units for the next interval (the colocated policy's steps over the role's demand)."""
    current, bounds = fleet.current, unit_bounds(spec, fleet.shapes)
    low, high = bounds.min_replicas, bounds.max_replicas
    memory = prune_history(history, now, spec) or (Recommendation(now, current.desired),)
    demand: RoleDemand | str | None = _problem(fleet.role, samples, spec, now)
    if demand is None and samples is not None:
        demand = (
            prefill_demand(fleet, samples, spec) if fleet.role == "prefill" else decode_demand(fleet, samples, spec)
        )
    if not isinstance(demand, RoleDemand) or samples is None:
        held = clamp_count(current.desired, low, high)
        why = f"holding {fleet.role} at {held}: {demand or 'no metrics'}"
        return RoleDecision(
            fleet.role, held, current.desired, HOLD, why, "hold", False, _observed(samples, now), memory
        )
    rule = demand.rule.spec
    steady = tolerate(demand.steady, current.desired, rule)
    recommendation = max(steady, tolerate(demand.steady + demand.backlog, current.desired, rule))
    memory = prune_history((*memory, Recommendation(now, steady)), now, spec)
    wanted = demand.steady + demand.backlog
    panic = current.ready == 0 or wanted >= spec.panic_threshold * current.ready
    mode: Mode = "panic" if panic and recommendation > current.desired else "normal"
    window, quiet = quiet_window(current.ready, samples.trend, samples.slo_miss_ratio, samples.queued_peak, rule)
    target, how = stabilise(current.desired, recommendation, memory, rule, now, mode, demand.in_flight, window)
    if quiet and target < current.desired:
        how += f" ({quiet}: {window}s window)"
    if current.ready == 0 and target < current.desired:
        target, how = current.desired, f"holding {current.desired} until the first replica is ready"
    signal = demand.backlog_signal if recommendation > steady else demand.signal
    units = clamp_count(target, low, high)
    if units != target:
        how, signal = f"{how}, bounded to {units} (min {low}, max {high})", BOUNDS
    observed = {**_observed(samples, now), **demand.parts}
    why = demand.why if demand.rule.bursty is None else f"{demand.rule.bursty}; {demand.why}"
    return RoleDecision(fleet.role, units, recommendation, signal, f"{how}: {why}", mode, True, observed, memory)


def _problem(role: Role, samples: RoleSamples | None, spec: AutoscalingSpec, now: float) -> str | None:
    """Why the role's reading cannot be trusted, or None."""
    if samples is None:
        return f"{role} metrics unavailable"
    if samples.age_seconds is None:
        return f"no scrape of the {role} servers"
    age = samples.age_seconds + max(0.0, now - samples.collected_at)
    if not math.isfinite(age):
        return f"the {role} metrics' age reads {age:g}: unknown"
    if age > spec.windows.metrics_max_age_seconds:
        return f"{role} metrics are {age:.0f}s old (max {spec.windows.metrics_max_age_seconds}s)"
    if (unknown := unreadable(samples)) is not None:
        return f"{role} {unknown}"
    return None


def _fmt(value: float) -> str:
    return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"


def _number(value: float | None) -> float:
    return max(0.0, value) if value is not None and usable(value) else 0.0


def prefill_rate(fleet: RoleFleet, samples: RoleSamples) -> tuple[float | None, float | None]:
    """(uncached tokens one unit prefills per second, uncached tokens per request): the spec's rate, else the
    capacity rule in tokens, C x tokens per request / the time a request holds a prefill slot. None: unknown."""
    tokens, requests, slot = _number(samples.uncached_tokens), _number(samples.requests), _number(samples.slot_seconds)
    per_request = tokens / requests if requests > 0 and tokens > 0 else None
    if fleet.prefill_rate is not None:
        return fleet.prefill_rate, per_request
    if per_request is None or slot <= 0:
        return None, per_request
    return fleet.concurrency * per_request / slot, per_request


MEASURES: dict[Role, tuple[str, str]] = {
    "prefill": ("uncached tokens/s", "UncachedTokensPerSecond"),
    "decode": ("running", "Running"),
}
"""Each role's measure: its unit in reasons, its name in `observed` keys."""


def role_rule(role: Role, samples: RoleSamples, spec: AutoscalingSpec) -> tuple[Rule, str, dict[str, float]]:
    """The policy's rule over the role's measure (`policy.select_rule`), with the stable load projected along a
    sustained rise: (the rule, a sentence on the stable load, its parts for status). The reason says why the traffic
    is bursty (`Rule.bursty`) in front of the demand's sentence (`decide_role`).

    The measure's newest reading counts in its peak: prefill's latest `burstSeconds` rate, decode's running requests
    now (the peak's subquery ends at a step boundary, up to a step before the newest scrape)."""
    unit, key = MEASURES[role]
    if role == "prefill":
        load = Load(samples.uncached_tokens, samples.uncached_tokens_burst, samples.uncached_tokens_peak)
    else:
        load = Load(samples.running_mean, samples.running, samples.running_peak)
    bursty = Load(samples.bursty_mean, samples.bursty_burst, samples.bursty_peak)
    rule = select_rule(spec, load, bursty, samples.trend, unit)
    stable = _number(rule.load.stable)
    why, parts = f"{_fmt(stable)} {unit}", {}
    if rule.falling is not None:
        why = f"{why} falling {_fmt(-60 * rule.falling)} {unit} per minute"
        parts[f"falling{key}PerMinute"] = -60 * rule.falling
    if rule.rising is not None:
        projected, lead = project(stable, rule.rising, spec)
        why = f"{why} rising {_fmt(60 * rule.rising)} {unit} per minute, {_fmt(projected)} {unit} in {lead:.0f}s"
        parts[f"projected{key}"] = projected
        rule = replace(rule, load=replace(rule.load, stable=projected))
    return rule, why, parts


def _peak(load: Load) -> float:
    """The busiest short-window reading, the newest one included (a peak's subquery may not reach it yet)."""
    return max(_number(load.stable), _number(load.peak), _number(load.burst))


def prefill_demand(fleet: RoleFleet, samples: RoleSamples, spec: AutoscalingSpec) -> RoleDemand | str:
    """Units the prefill role needs: uncached tokens per second over a unit's rate, plus its queues; or why that is
    unknown (no rate, or a term that is not finite or past MAX_DEMAND_REPLICAS: `unknown_demand`)."""
    rule, why, parts = role_rule("prefill", samples, spec)
    targets, current = rule.spec.targets, fleet.current
    rate, per_request = prefill_rate(fleet, samples)
    queued, bootstrap = _number(samples.queued), _number(samples.bootstrap_queued_persisted)
    running = _number(samples.running)
    parts["uncachedTokensPerSecond"] = _number(samples.uncached_tokens)
    steady, signal = 0.0, "uncachedTokens"
    if rate is None and _number(rule.load.stable) > 0:
        return "no prefill rate: no slot time from the prefill servers (set targets.prefillTokensPerSecondPerGPU)"
    if rate is not None and not (math.isfinite(rate) and rate > 0):
        return f"prefill rate unknown: {rate:g} tokens/s per replica (from {_fmt(per_request or 0.0)} tokens/request)"
    if rate is not None:
        steady, why = _tokens_term(rule, rate, why)
        parts["prefillTokensPerSecondPerReplica"] = rate
    ttft, ttft_target = samples.time_to_first_token, targets.time_to_first_token_seconds
    by_ttft = _latency_term(current.ready, ttft, ttft_target)
    if by_ttft is not None:
        parts["timeToFirstTokenReplicas"] = by_ttft
        if by_ttft > steady:
            steady, signal = by_ttft, "timeToFirstToken"
            why = f"router TTFT {ttft:.3g}s vs target {ttft_target:g}s on {current.ready} ready = {by_ttft:.2f} ({why})"
    if max(_number(rule.load.stable), running, queued, _number(samples.bootstrap_queued)) > 0 and steady < 1.0:
        steady, why = 1.0, f"{why}, 1 while requests run"
    excess = max(0.0, queued + bootstrap - targets.queue_per_replica * current.ready)
    if rate is not None and per_request is not None:
        backlog = excess * per_request / (rate * max(1.0, float(spec.startup_seconds)))
    else:
        backlog = excess / fleet.concurrency
    terms = {signal: steady, "timeToFirstToken": by_ttft or 0.0, "the queues": backlog,
             "the running requests": running / fleet.concurrency}  # fmt: skip
    if (unknown := unknown_demand(terms)) is not None:
        return f"prefill {unknown}"
    if backlog > 0:
        why += f" + {queued:.0f} queued, {bootstrap:.0f} in bootstrap ({backlog:.2f})"
        parts["backlogReplicas"] = backlog
    parts["demandReplicas"] = steady + backlog
    backlog_signal = "bootstrapQueue" if bootstrap > queued else "queue"
    in_flight = ceil_replicas(running / fleet.concurrency)
    return RoleDemand(steady, backlog, in_flight, signal, backlog_signal, why, parts, rule)


def _tokens_term(rule: Rule, rate: float, why: str) -> tuple[float, str]:
    """Units the uncached tokens ask for at `rate` tokens/s per unit: the stable rate with headroom or the busiest
    short-window rate with burst headroom, whichever is more; and the sentence, from the stable load's (`why`)."""
    targets, tokens, peak = rule.spec.targets, _number(rule.load.stable), _peak(rule.load)
    load = max(tokens * (1.0 + targets.headroom), peak * (1.0 + targets.burst_headroom))
    steady = load / rate
    if load != tokens * (1.0 + targets.headroom):
        why = f"{_fmt(peak)} uncached tokens/s peak" + (f" ({why})" if rule.falling is not None else "")
    return steady, f"{why} / {_fmt(rate)} tokens/s per replica = {steady:.2f}"


def _latency_term(ready: int, latency: float | None, target: float | None) -> float | None:
    """Ready x latency / target while a latency reading is above its target (a target above 0), else None."""
    if not target or target <= 0 or latency is None or not usable(latency) or latency <= target or ready <= 0:
        return None
    return ready * latency / target


def decode_demand(fleet: RoleFleet, samples: RoleSamples, spec: AutoscalingSpec) -> RoleDemand | str:
    """Units the decode role needs: the largest of its concurrency, KV usage and latency terms, plus its queues; or
    why that is unknown (a term that is not finite or past MAX_DEMAND_REPLICAS: `unknown_demand`)."""
    rule, text, parts = role_rule("decode", samples, spec)
    targets, current, c = rule.spec.targets, fleet.current, fleet.concurrency
    mean, peak, running = _number(rule.load.stable), _peak(rule.load), _number(samples.running)
    queued, prealloc = _number(samples.queued), _number(samples.prealloc_queued_persisted)
    terms = {"concurrency": max(mean * (1.0 + targets.headroom), peak * (1.0 + targets.burst_headroom)) / c}
    why = {
        "concurrency": f"{text} x {1 + targets.headroom:g} (peak {peak:.3g} x {1 + targets.burst_headroom:g}) / C {c}"
        f" = {terms['concurrency']:.2f}"
    }
    usage, usage_target = samples.token_usage, targets.decode_token_usage
    if usage is not None and usable(usage) and current.ready > 0 and usage_target > 0:
        terms["tokenUsage"] = current.ready * usage / usage_target
        why["tokenUsage"] = f"KV usage {usage:.2f} vs target {targets.decode_token_usage:g} on {current.ready} ready"
    latency, target = samples.inter_token_latency, targets.inter_token_latency_seconds
    if (by_latency := _latency_term(current.ready, latency, target)) is not None:
        terms["interTokenLatency"] = by_latency
        why["interTokenLatency"] = f"inter-token latency {latency:.3g}s vs target {target:g}s on {current.ready} ready"
    if (unknown := unknown_demand(terms)) is not None:
        return f"decode {unknown}"
    signal = max(terms, key=lambda name: terms[name])
    steady = terms[signal]
    text = why[signal]
    if max(_number(samples.running_mean), running, queued, _number(samples.prealloc_queued)) > 0 and steady < 1.0:
        steady, text = 1.0, f"{text}, 1 while requests run"
    parts.update({f"{name}Replicas": value for name, value in terms.items()})
    excess = max(0.0, queued + prealloc - targets.queue_per_replica * current.ready)
    requests, measured = _number(samples.requests), _number(samples.running_mean)
    stay = measured / requests if requests > 0 and measured > 0 else None  # Little's law: seconds a request stays
    backlog = excess * (min(1.0, stay / max(1.0, float(spec.startup_seconds))) if stay else 1.0) / c
    if (unknown := unknown_demand({"the queues": backlog, "the running requests": running / c})) is not None:
        return f"decode {unknown}"
    if backlog > 0:
        text += f" + {prealloc:.0f} awaiting KV, {queued:.0f} queued ({backlog:.2f})"
        parts["backlogReplicas"] = backlog
    parts["demandReplicas"] = steady + backlog
    backlog_signal = "preallocQueue" if prealloc >= queued else "queue"
    return RoleDemand(steady, backlog, ceil_replicas(running / c), signal, backlog_signal, text, parts, rule)


def _observed(samples: RoleSamples | None, now: float) -> dict[str, float]:
    if samples is None:
        return {}
    fields = {
        "uncachedTokensPerSecond": samples.uncached_tokens,
        "uncachedTokensPerSecondBurst": samples.uncached_tokens_burst,
        "uncachedTokensPerSecondPeak": samples.uncached_tokens_peak,
        "requestsPerSecond": samples.requests,
        "slotSeconds": samples.slot_seconds,
        "running": samples.running,
        "runningMean": samples.running_mean,
        "runningPeak": samples.running_peak,
        "queued": samples.queued,
        "bootstrapQueued": samples.bootstrap_queued,
        "bootstrapQueuedPersisted": samples.bootstrap_queued_persisted,
        "preallocQueued": samples.prealloc_queued,
        "preallocQueuedPersisted": samples.prealloc_queued_persisted,
        "queuedPeak": samples.queued_peak,
        "tokenUsage": samples.token_usage,
        "interTokenLatencySeconds": samples.inter_token_latency,
        "timeToFirstTokenSeconds": samples.time_to_first_token,
        "burstyMean": samples.bursty_mean,
        "burstyPeak": samples.bursty_peak,
        "sloMissRatio": samples.slo_miss_ratio,
    }
    out = {key: float(value) for key, value in fields.items() if value is not None and math.isfinite(value)}
    if samples.age_seconds is not None:
        out["ageSeconds"] = samples.age_seconds + max(0.0, now - samples.collected_at)
    return out


# -- the split, the GPU budget and the prefill share -----------------------------------------------------------------


def split_roles(fleets: Mapping[Role, RoleFleet], units: Mapping[Role, int], max_gpus: int | None) -> dict[Role, Split]:
    """Each role's units as replicas per group: decode first within the budget less prefill's minimum GPUs (its
    running requests are the ones a shortfall would cut), prefill within what decode leaves; the same for the fleet's
    bound on replicas (`MAX_REPLICAS`, both roles together)."""
    prefill, decode = fleets["prefill"], fleets["decode"]
    prefill_floor = sum(g.gpus * g.min_replicas for g in prefill.shapes)
    room = MAX_REPLICAS - sum(g.min_replicas for g in prefill.shapes)
    d = split_capacity(units["decode"] * decode.shapes[0].concurrency, decode.shapes,
                       None if max_gpus is None else max_gpus - prefill_floor, room)  # fmt: skip
    left = None if max_gpus is None else max_gpus - gpus(decode.shapes, d)
    p = split_capacity(units["prefill"] * prefill.shapes[0].concurrency, prefill.shapes, left,
                       MAX_REPLICAS - sum(d.replicas.values()))  # fmt: skip
    return {"prefill": p, "decode": d}


def gpus(groups: Sequence[GroupShape], split: Split) -> int:
    return sum(g.gpus * split.replicas.get(g.name, 0) for g in groups)


def prefill_share(fleets: Mapping[Role, RoleFleet], splits: Mapping[Role, Split]) -> float | None:
    p, d = (gpus(fleets[role].shapes, splits[role]) for role in ROLES)
    return p / (p + d) if p + d > 0 else None


def keep_share(
    fleets: Mapping[Role, RoleFleet], decisions: dict[Role, RoleDecision], spec: AutoscalingSpec
) -> PdDecision:
    """Split both decisions; bring the prefill GPU share inside `prefillGPUShare` when it is outside."""
    units = {role: d.units for role, d in decisions.items()}
    splits = split_roles(fleets, units, spec.max_gpus)
    share, limits = prefill_share(fleets, splits), spec.prefill_gpu_share
    if limits is not None and share is not None and not limits.min <= share <= limits.max:
        units = _into_share(fleets, units, spec, limits, share > limits.max)
        splits = split_roles(fleets, units, spec.max_gpus)
        after = prefill_share(fleets, splits)
        side = f"above max {limits.max:g}" if share > limits.max else f"below min {limits.min:g}"
        for role in ROLES:
            if units[role] != decisions[role].units:
                decision = decisions[role]
                now_share = "" if after is None else f", now {after:.2f}"
                reason = (
                    f"prefill GPU share {share:.2f} {side}: {role} {decision.units} -> {units[role]} units"
                    f"{now_share}; before the share: {decision.reason}"
                )
                decisions[role] = replace(decision, units=units[role], signal=GPU_SHARE, reason=reason)
        share = after
    groups = {name: count for role in ROLES for name, count in splits[role].replicas.items()}
    replicas = {role: sum(splits[role].replicas.values()) for role in ROLES}
    return PdDecision(decisions, groups, replicas, share)


def _into_share(
    fleets: Mapping[Role, RoleFleet],
    units: dict[Role, int],
    spec: AutoscalingSpec,
    limits: PrefillGPUShare,
    too_much_prefill: bool,
) -> dict[Role, int]:
    """Units inside the share: the role below its share grows until the share is inside, its bounds or the budget
    stop it; then the other shrinks to its minimum at most."""
    grow: Role = "decode" if too_much_prefill else "prefill"
    shrink: Role = "prefill" if too_much_prefill else "decode"

    def outside(trial: Mapping[Role, int]) -> bool:
        share = prefill_share(fleets, split_roles(fleets, trial, spec.max_gpus))
        return share is not None and (share > limits.max if too_much_prefill else share < limits.min)

    units = _move_while(fleets, units, grow, +1, spec, outside)
    return _move_while(fleets, units, shrink, -1, spec, outside)


def _move_while(
    fleets: Mapping[Role, RoleFleet],
    units: dict[Role, int],
    role: Role,
    step: int,
    spec: AutoscalingSpec,
    outside: Callable[[Mapping[Role, int]], bool],
) -> dict[Role, int]:
    """`role` moved in the direction of `step`, within its bounds, by the fewest units that bring the share inside;
    where its bound comes first, by the fewest units that reach the replicas of its bound (units past the last
    change of the split add nothing but a count the groups do not run).

    Found by bisection, a split per probe (O(log units x groups)), not a unit at a time: moving one role one way
    moves the prefill share one way only. The split is monotone in demand and in the GPU budget (a larger one never
    takes a replica from a group, nor uses fewer GPUs), and the budget prefill gets is what decode leaves, so growing
    decode or shrinking prefill never raises the share, and growing prefill or shrinking decode never lowers it.
    Whether the share is inside, and whether the split has reached its bound's, each flip once along the way."""
    bounds = unit_bounds(spec, fleets[role].shapes)
    bound = bounds.max_replicas if step > 0 else bounds.min_replicas
    start = units[role]
    if not outside(units) or not bounds.min_replicas <= start + step <= bounds.max_replicas:
        return units

    def at(count: int) -> dict[Role, int]:
        return {**units, role: count}

    def replicas(count: int) -> dict[str, int]:
        return split_roles(fleets, at(count), spec.max_gpus)[role].replicas

    if not outside(at(bound)):
        return at(_first(start, bound, lambda n: not outside(at(n))))
    final = replicas(bound)
    return units if replicas(start) == final else at(_first(start, bound, lambda n: replicas(n) == final))


def _first(start: int, bound: int, reached: Callable[[int], bool]) -> int:
    """The count nearest `start` on the way to `bound` (`start` excluded, `bound` included) where `reached` holds,
    given that it holds at `bound` and, once it holds, holds from there to `bound`."""
    near, far = start, bound  # reached(far) holds; near is `start` or a count where it does not
    while abs(far - near) > 1:
        middle = (near + far) // 2
        if reached(middle):
            far = middle
        else:
            near = middle
    return far
