"""The pure half of `bench/scale.py`: metric parsing, latencies from timelines, targets, the table and the JSON.

Nothing here talks to a cluster, so every number the benchmark prints can be checked by hand in
`tests/unit/bench/test_scale_model.py`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

# Issue 17's targets. Each ratio below is measured / target: <= 1 meets the target.
TARGET_ALL_READY_S = 60.0  # every CR Ready within 60 s of its pods (N = 200)
TARGET_REGISTER_P99_S = 2.0  # p99 from worker Ready to listed on every router of its fleet
TARGET_API_PER_CR_PER_MIN = 1.0  # operator requests per CR per minute with nothing changing
TARGET_RSS_MIB = 300.0  # operator peak RSS
TARGET_HANDOVER_S = 15.0  # leader SIGKILLed -> the other replica acts

_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
JSON_KEYS = ("n", "all_ready_s", "register_p99_s", "api_requests_per_min", "rss_mib", "handover_s")


# ----- Prometheus text ------------------------------------------------------------------------------------------


def samples(text: str, name: str) -> Iterator[tuple[dict[str, str], float]]:
    """(labels, value) of every sample line of `name` in Prometheus text format.

    A line filter rather than a full parser: the API server's /metrics has ~40,000 lines and only a few matter
    (prometheus_client's parser takes seconds on them, during a measurement window on 2 cores).
    """
    for line in text.splitlines():
        if not line.startswith(name) or line[len(name) : len(name) + 1] not in ("{", " "):
            continue
        labels: dict[str, str] = {}
        rest = line[len(name) :]
        if rest.startswith("{"):
            close = rest.rindex("}")
            labels = {k: v.replace('\\"', '"').replace("\\\\", "\\") for k, v in _LABEL.findall(rest[1:close])}
            rest = rest[close + 1 :]
        fields = rest.split()
        if fields:
            yield labels, float(fields[0])


def metric_sum(text: str, name: str, match: Mapping[str, str] | None = None) -> float:
    """Sum of the samples of `name` (a counter's `_total` sample name) whose labels include `match`."""
    want = dict(match or {})
    return sum(value for labels, value in samples(text, name) if all(labels.get(k) == v for k, v in want.items()))


def metric_by_label(text: str, name: str, label: str) -> dict[str, float]:
    """`name`'s samples summed per value of `label` (e.g. the operator's requests per verb)."""
    out: dict[str, float] = {}
    for labels, value in samples(text, name):
        key = labels.get(label, "")
        out[key] = out.get(key, 0.0) + value
    return out


def metric_by_labels(text: str, name: str, labels: Sequence[str]) -> dict[tuple[str, ...], float]:
    """`name`'s samples summed per combination of the values of `labels`."""
    out: dict[tuple[str, ...], float] = {}
    for found, value in samples(text, name):
        key = tuple(found.get(label, "") for label in labels)
        out[key] = out.get(key, 0.0) + value
    return out


def top_rates(
    before: Mapping[tuple[str, ...], float], after: Mapping[tuple[str, ...], float], seconds: float, count: int
) -> list[tuple[tuple[str, ...], float]]:
    """The `count` series that grew fastest between two scrapes, per minute, largest first."""
    rates = [(key, (value - before.get(key, 0.0)) * 60.0 / seconds) for key, value in after.items()]
    return sorted((r for r in rates if r[1] > 0), key=lambda r: (-r[1], r[0]))[:count]


def per_minute(before: float, after: float, seconds: float) -> float:
    """A counter's rate over a window; a counter that went backwards (a restart) is not a rate."""
    if seconds <= 0 or after < before:
        raise ValueError(f"not a counter window: {before} -> {after} over {seconds} s")
    return (after - before) * 60.0 / seconds


# ----- timelines ------------------------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100.0
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


@dataclass(frozen=True)
class FleetTimes:
    """When (epoch seconds) the bench saw a fleet's last pod turn Ready, and its CR turn Ready."""

    name: str
    pods_ready: float | None
    cr_ready: float | None


def ready_lags(fleets: Iterable[FleetTimes]) -> list[float]:
    """Per fleet with both times: how long its CR took to say Ready after its last pod was Ready (>= 0: a CR
    whose Ready the bench saw first was Ready as soon as the pods, from the bench's point of view)."""
    return [max(0.0, f.cr_ready - f.pods_ready) for f in fleets if f.cr_ready is not None and f.pods_ready is not None]


def registration_latencies(
    worker_ready: Mapping[str, float], registered: Mapping[str, Sequence[float | None]]
) -> tuple[list[float], list[str]]:
    """(latencies, missing): for each Ready worker URL, from its Ready to the last of its routers listing it.

    `registered[url]` holds one time per router of the worker's fleet (None: that router does not list it).
    A router that listed the worker before the bench saw it Ready counts as 0 (the operator's watch was faster).
    """
    latencies, missing = [], []
    for url, ready in sorted(worker_ready.items()):
        times = registered.get(url) or []
        if not times or any(t is None for t in times):
            missing.append(url)
            continue
        latencies.append(max(0.0, max(t for t in times if t is not None) - ready))
    return latencies, missing


# ----- one run's result -----------------------------------------------------------------------------------------


@dataclass
class RunResult:
    n: int
    real: int
    light: int
    all_ready_s: float | None = None  # max over CRs: CR Ready - its pods Ready
    ready_p50_s: float | None = None
    ready_count: int = 0  # CRs that reached Ready
    total_ready_s: float | None = None  # first CR created -> last CR Ready
    register_p50_s: float | None = None
    register_p99_s: float | None = None
    register_after_routers_p50_s: float | None = None  # from the later of the worker's and its routers' Ready
    register_after_routers_p99_s: float | None = None
    register_running_p50_s: float | None = None  # new workers of fleets scaled 1 -> 2 once all are Ready
    register_running_p99_s: float | None = None
    registered: int = 0
    api_requests_per_min: float | None = None  # the operator's requests (its own FlowSchema), all CRs
    api_requests_per_cr_per_min: float | None = None
    api_per_cr_without_lease: float | None = None  # the same without the leader election's Lease calls
    api_operator_split_per_min: dict[str, float] = field(default_factory=dict)  # per operator: lease/watch/list/other
    api_all_clients_per_min: float | None = None  # every client of the API server (node agent, controllers, ...)
    api_by_verb_per_min: dict[str, float] = field(default_factory=dict)  # the operator's own counter, if exported
    api_by_flow_schema_per_min: dict[str, float] = field(default_factory=dict)  # every client, by FlowSchema
    quiet_s: float | None = None
    cpu_s: float | None = None  # operator CPU seconds from its start to the end of the quiet window
    cpu_quiet_pct: float | None = None  # operator CPU over the quiet window, % of one core
    rss_mib: float | None = None  # operator peak RSS (VmHWM)
    handover_s: float | None = None  # leader SIGKILLed -> the survivor created the pod of a scale made at the kill
    handover_lease_s: float | None = None  # leader SIGKILLed -> the Lease names the survivor
    standby_requests: dict[str, float] = field(default_factory=dict)  # the standby's, from its start to the SIGKILL
    notes: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        out = {key: getattr(self, key) for key in JSON_KEYS}
        out.update({k: v for k, v in asdict(self).items() if k not in out})
        return out


def ratios(run: RunResult) -> dict[str, float | None]:
    """measured / target for each target (None where not measured)."""

    def ratio(value: float | None, target: float) -> float | None:
        return None if value is None else value / target

    return {
        "all_ready": ratio(run.all_ready_s, TARGET_ALL_READY_S),
        "register_p99": ratio(run.register_p99_s, TARGET_REGISTER_P99_S),
        "register_running_p99": ratio(run.register_running_p99_s, TARGET_REGISTER_P99_S),
        "api_per_cr": ratio(run.api_requests_per_cr_per_min, TARGET_API_PER_CR_PER_MIN),
        "rss": ratio(run.rss_mib, TARGET_RSS_MIB),
        "handover": ratio(run.handover_s, TARGET_HANDOVER_S),
    }


def _num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}{'' if value <= 1.0 else ' !'}"


def render_table(runs: Sequence[RunResult]) -> str:
    """A Markdown table of the measurements, then one of the ratios against the targets ('!' marks a miss)."""
    head = (
        "| N | real/light | CRs Ready | all_ready_s (p50) | register p50/p99 s | register running p50/p99 s "
        "| API req/min (per CR; w/o Lease) | all clients/min | CPU s (quiet %) | RSS MiB | handover s (lease) |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in runs:
        lines.append(
            f"| {r.n} | {r.real}/{r.light} | {r.ready_count}/{r.n} | {_num(r.all_ready_s)} ({_num(r.ready_p50_s)}) "
            f"| {_num(r.register_p50_s, 2)}/{_num(r.register_p99_s, 2)} "
            f"| {_num(r.register_running_p50_s, 2)}/{_num(r.register_running_p99_s, 2)} "
            f"| {_num(r.api_requests_per_min)} ({_num(r.api_requests_per_cr_per_min, 2)}; "
            f"{_num(r.api_per_cr_without_lease, 2)}) "
            f"| {_num(r.api_all_clients_per_min)} | {_num(r.cpu_s)} ({_num(r.cpu_quiet_pct)}) "
            f"| {_num(r.rss_mib)} | {_num(r.handover_s)} ({_num(r.handover_lease_s)}) |"
        )
    lines += [
        "",
        f"Ratios to the targets (measured / target; <= 1 meets it): all Ready <= {TARGET_ALL_READY_S:g} s after the "
        f"pods, p99 registration <= {TARGET_REGISTER_P99_S:g} s (in the creation burst, and of workers added to the "
        f"running fleets), <= {TARGET_API_PER_CR_PER_MIN:g} request per CR "
        f"per minute, RSS <= {TARGET_RSS_MIB:g} MiB, handover <= {TARGET_HANDOVER_S:g} s.",
        "",
        "| N | all_ready | register_p99 | register_running_p99 | api_per_cr | rss | handover |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        q = ratios(r)
        lines.append(
            f"| {r.n} | {_ratio(q['all_ready'])} | {_ratio(q['register_p99'])} | {_ratio(q['register_running_p99'])} "
            f"| {_ratio(q['api_per_cr'])} "
            f"| {_ratio(q['rss'])} | {_ratio(q['handover'])} |"
        )
    notes = [f"- N={r.n}: {note}" for r in runs for note in r.notes]
    return "\n".join(lines + (["", *notes] if notes else []))
