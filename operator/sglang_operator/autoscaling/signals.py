"""Typed values that flow through the autoscaler: what Prometheus said, what the fleet looks like, what was decided.

Plain frozen dataclasses so the policy stays a pure function that tests can drive with literals, and so the policy's
memory round-trips through `status.autoscaler.state` as JSON.
"""

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Literal

from ..api.limits import MAX_DEMAND_REPLICAS, MAX_READING
from ..prometheus.roles import RoleSamples
from ..prometheus.samples import Samples as Samples  # what Prometheus said: defined where it is read

Mode = Literal["normal", "panic", "hold"]


@dataclass(frozen=True)
class FleetState:
    """The fleet as the operator sees it when deciding. `desired` counts serving replicas, ready or starting."""

    desired: int
    ready: int
    starting: int = 0
    warm: int = 0
    """Warm replicas that are ready but not registered with the router (promotable at once)."""
    gpus_per_replica: int = 1
    concurrency_per_replica: int = 1
    """C: requests one replica serves at once (see `capacity.concurrency_per_replica`)."""


@dataclass(frozen=True)
class Recommendation:
    """One past recommendation: the policy's memory for stabilisation windows."""

    time: float
    replicas: int
    """What the steady signals asked for (the queue backlog's share is not remembered)."""


@dataclass(frozen=True)
class Block:
    """A few minutes of the burst envelope's memory (see `policy.update_envelope`): the busiest short-window request
    rate seen in them, and the stable rates read in them (their sum and count, for the long mean rate)."""

    start: float
    peak_qps: float
    qps_sum: float
    readings: int


@dataclass(frozen=True)
class Decision:
    replicas: int
    """Serving replicas to run (ready + starting)."""
    reason: str
    """One short sentence for `status.autoscaler.reason`."""
    mode: Mode
    recommendation: int
    """What the signals alone ask for, before tolerance, stabilisation, step limits and bounds."""
    metrics_available: bool
    observed: Mapping[str, float] = field(default_factory=dict)
    """The signals behind the decision (camelCase keys), for `status.autoscaler.observed`."""
    warm_replicas: int = 0
    """Warm replicas to keep started and unregistered."""
    promote: int = 0
    """Warm replicas to register now (part of the scale-up, not on top of it)."""
    history: tuple[Recommendation, ...] = ()
    """The policy's memory to pass to the next `decide` (see `history_to_state`)."""
    envelope: tuple[Block, ...] = ()
    """The burst envelope's memory to pass to the next `decide` (see `history_to_state`)."""


def history_to_state(history: Sequence[Recommendation], envelope: Sequence[Block] = ()) -> dict[str, Any]:
    """The policy memory as JSON for `status.autoscaler.state`."""
    state: dict[str, Any] = {"recommendations": [[round(r.time, 3), r.replicas] for r in history]}
    if envelope:
        state["envelope"] = [
            [round(b.start, 3), round(b.peak_qps, 4), round(b.qps_sum, 4), b.readings] for b in envelope
        ]
    return state


def envelope_from_state(state: Mapping[str, Any] | None) -> tuple[Block, ...]:
    """Parse the envelope `history_to_state` wrote; anything malformed is dropped (the memory is advisory)."""
    raw = (state or {}).get("envelope")
    if not isinstance(raw, list):
        return ()
    out: list[Block] = []
    for item in raw:
        if not isinstance(item, list | tuple) or len(item) != 4:
            continue
        start, peak, total, readings = item
        numbers = (start, peak, total)
        if not all(isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) for x in numbers):
            continue
        if isinstance(readings, int) and not isinstance(readings, bool) and readings > 0 and peak >= 0 <= total:
            out.append(Block(float(start), float(peak), float(total), readings))
    return tuple(sorted(out, key=lambda b: b.start))


def history_from_state(state: Mapping[str, Any] | None) -> tuple[Recommendation, ...]:
    """Parse what `history_to_state` wrote; anything malformed is dropped (the memory is advisory)."""
    if not state:
        return ()
    raw = state.get("recommendations")
    if not isinstance(raw, list):
        return ()
    out: list[Recommendation] = []
    for item in raw:
        if not isinstance(item, list | tuple) or len(item) < 2:
            continue
        time, replicas = item[0], item[1]
        if isinstance(time, int | float) and math.isfinite(time) and isinstance(replicas, int) and replicas >= 0:
            out.append(Recommendation(float(time), replicas))
    return tuple(sorted(out, key=lambda r: r.time))


def usable(value: float | None) -> bool:
    """A reading the policy may act on: present, finite and not negative."""
    return value is not None and math.isfinite(value) and value >= 0


def _camel(name: str) -> str:
    return re.sub(r"_([a-z])", lambda m: m.group(1).upper(), name)


def unreadable(samples: Samples | RoleSamples) -> str | None:
    """Which reading no real fleet gives, or None: a number past MAX_READING (an infinity included), or a point of
    a series whose time or value is not a finite number within it. Such a reading is unknown, never computed on:
    the decision holds and names it (NaN and negative readings are missing, as `usable` reads them)."""
    for item in fields(samples):
        value = getattr(samples, item.name)
        if isinstance(value, int | float) and value > MAX_READING:
            return f"{_camel(item.name)} reads {value:g}, past {MAX_READING:g}: unknown"
        if isinstance(value, tuple):
            for point in value:
                if not all(math.isfinite(x) and abs(x) <= MAX_READING for x in point):
                    return f"{_camel(item.name)} has a point {point!r} that is no reading: unknown"
    return None


def unknown_demand(terms: Mapping[str, float]) -> str | None:
    """Which term of a demand cannot be computed on, or None: one that is not finite, or asks for more than
    MAX_DEMAND_REPLICAS (a target that divides a reading into an overflow, a reading that multiplies one). The
    decision then holds and says so, as it does for a missing metric; `math.ceil` never sees it."""
    for name, value in terms.items():
        if not (math.isfinite(value) and abs(value) <= MAX_DEMAND_REPLICAS):
            return (
                f"demand unknown: {name} asks for {value:.3g} replicas (at most {MAX_DEMAND_REPLICAS:g} is computed on)"
            )
    return None
