"""The registration benchmark's pure parts: the discovery routers' manifests, and the timeline statistics.

Kept apart from `registration.py` (which records against the live cluster) so they are unit-tested without one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from sglang_operator.api.spec import SGLangDeploymentSpec
from sglang_operator.render.router import router_command

NAME = "quick"
WORKER_SELECTOR = f"sglang.ai/deployment={NAME},sglang.ai/component=worker"
WORKER_PORT = 30000
DISCOVERY = "smg-discovery"
MAX_DT_S = 1.0  # a sample stands for at most this long when integrating (a stalled poller adds nothing)
GROUPS = ("operator", "discovery")


# ----------------------------------------------------------------
@dataclass(frozen=True)
class PodObs:
    t: float  # seconds since recording began
    uid: str
    name: str
    url: str | None
    serving: bool  # Ready=True and not terminating (a DELETED event is serving=False)
    ready_ltt: str | None = None  # the Ready condition's lastTransitionTime
    initial: bool = False  # from the first listing, not a transition seen live


@dataclass(frozen=True)
class RouterSample:
    t: float
    group: str
    router: str
    routable: frozenset[str]  # listed, healthy and status ready
    listed: frozenset[str]  # listed in any state (pending, draining, unhealthy)


@dataclass(frozen=True)
class Episode:
    uid: str
    name: str
    url: str
    start: float
    end: float | None
    ready_ltt: str | None
    initial: bool


def ready_episodes(observations: Sequence[PodObs]) -> list[Episode]:
    """Each stretch during which a pod serves (Ready, not terminating), in order of start."""
    open_: dict[str, Episode] = {}
    done: list[Episode] = []
    for obs in sorted(observations, key=lambda o: o.t):
        current = open_.get(obs.uid)
        if obs.serving and obs.url and current is None:
            open_[obs.uid] = Episode(obs.uid, obs.name, obs.url, obs.t, None, obs.ready_ltt, obs.initial)
        elif not obs.serving and current is not None:
            done.append(replace(current, end=obs.t))
            del open_[obs.uid]
    return sorted(done + list(open_.values()), key=lambda e: e.start)


@dataclass(frozen=True)
class ChurnEvent:
    t: float
    kind: str  # "kill" (SIGKILL, the container restarts in place) | "delete" (the pod is replaced)
    pod: str
    url: str


def registration_time(
    episode: Episode, by_router: Mapping[str, Sequence[RouterSample]], listed: bool = False
) -> float | None:
    """Seconds from Ready to the URL routable (or just listed) on every router; None if not while it served."""
    end = math.inf if episode.end is None else episode.end
    times = []
    for samples in by_router.values():
        seen = ((s.t, s.listed if listed else s.routable) for s in samples if episode.start <= s.t <= end)
        hit = next((t for t, urls in seen if episode.url in urls), None)
        if hit is None:
            return None
        times.append(hit)
    return max(times) - episode.start if times else None


def removal_time(
    event: ChurnEvent, episodes: Sequence[Episode], by_router: Mapping[str, Sequence[RouterSample]]
) -> float | None:
    """Seconds from a fault to its URL routable on no router; None if it stayed routable until it served again."""
    back = min((e.start for e in episodes if e.url == event.url and e.start > event.t), default=math.inf)
    times = []
    for samples in by_router.values():
        hit = next((s.t for s in samples if event.t <= s.t <= back and event.url not in s.routable), None)
        if hit is None:
            return None
        times.append(hit)
    return max(times) - event.t if times else None


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolated percentile (numpy's default), None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = q / 100 * (len(ordered) - 1)
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass(frozen=True)
class Exposure:
    samples: int
    stale_mean: float  # per sample, summed over the group's routers
    stale_max: int
    stale_s: float  # stale routable entry-seconds
    listed_stale_s: float  # stale entry-seconds counting entries in any state
    missing_s: float  # Ready pods not routable, entry-seconds


def exposure(observations: Sequence[PodObs], samples: Sequence[RouterSample]) -> Exposure:
    """Replay pod states and router samples in time order; integrate stale and missing entries per router."""
    events: list[tuple[float, int, PodObs | RouterSample]] = [(o.t, 0, o) for o in observations]
    events += [(s.t, 1, s) for s in samples]
    serving: dict[str, str] = {}
    last_t: dict[str, float] = {}
    counts: list[int] = []
    stale_s = listed_s = missing_s = 0.0
    for _, _, item in sorted(events, key=lambda e: (e[0], e[1])):
        if isinstance(item, PodObs):
            if item.serving and item.url:
                serving[item.uid] = item.url
            else:
                serving.pop(item.uid, None)
            continue
        urls = set(serving.values())
        dt = min(item.t - last_t[item.router], MAX_DT_S) if item.router in last_t else 0.0
        last_t[item.router] = item.t
        stale = len(item.routable - urls)
        counts.append(stale)
        stale_s += stale * dt
        listed_s += len(item.listed - urls) * dt
        missing_s += len(urls - item.routable) * dt
    routers = max(len(last_t), 1)
    mean = sum(counts) / len(counts) * routers if counts else 0.0
    return Exposure(len(counts), mean, max(counts, default=0), stale_s, listed_s, missing_s)


@dataclass(frozen=True)
class GroupResult:
    group: str
    routers: int
    transitions: int  # Ready transitions seen live (initial listing excluded)
    latencies: list[float]  # Ready -> routable on every router of the group
    listed_latencies: list[float]  # Ready -> listed in any state on every router (membership reaction alone)
    removals: dict[str, list[float | None]]  # fault kind -> seconds to routable nowhere (None: kept throughout)
    exposure: Exposure
    sent: int
    failed: int


def summarize(
    group: str,
    observations: Sequence[PodObs],
    samples: Sequence[RouterSample],
    events: Sequence[ChurnEvent],
    sent: int,
    failed: int,
) -> GroupResult:
    mine = [s for s in samples if s.group == group]
    by_router: dict[str, list[RouterSample]] = {}
    for s in sorted(mine, key=lambda s: s.t):
        by_router.setdefault(s.router, []).append(s)
    episodes = ready_episodes(observations)
    live = [e for e in episodes if not e.initial]
    latencies = [t for t in (registration_time(e, by_router) for e in live) if t is not None]
    listed = [t for t in (registration_time(e, by_router, listed=True) for e in live) if t is not None]
    removals: dict[str, list[float | None]] = {}
    for event in events:
        removals.setdefault(event.kind, []).append(removal_time(event, episodes, by_router))
    seen = exposure(observations, mine)
    return GroupResult(group, len(by_router), len(live), latencies, listed, removals, seen, sent, failed)


def _removal(r: GroupResult, kind: str) -> str:
    done = [t for t in r.removals.get(kind, []) if t is not None]
    kept = len(r.removals.get(kind, [])) - len(done)
    return f"{_fmt(percentile(done, 50))} / {_fmt(max(done, default=None))}" + (f" ({kept} kept)" if kept else "")


def _fmt(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.2f}s"


def render_table(results: Sequence[GroupResult], header: str) -> str:
    """Metrics as rows, operator and service discovery side by side."""
    rows: list[tuple[str, ...]] = [("", *(r.group for r in results))]

    def row(label: str, fn: Any) -> None:
        rows.append((label, *(fn(r) for r in results)))

    row("routers", lambda r: str(r.routers))
    row("Ready transitions / registered", lambda r: f"{r.transitions} / {len(r.latencies)}")
    row(
        "listed (any state) p50 / max",
        lambda r: f"{_fmt(percentile(r.listed_latencies, 50))} / {_fmt(max(r.listed_latencies, default=None))}",
    )
    row("registration (routable) p50", lambda r: _fmt(percentile(r.latencies, 50)))
    row("registration (routable) p99", lambda r: _fmt(percentile(r.latencies, 99)))
    row("registration (routable) max", lambda r: _fmt(max(r.latencies, default=None)))
    for kind in sorted({k for r in results for k in r.removals}):
        row(f"unroutable after {kind} p50 / max", lambda r, kind=kind: _removal(r, kind))
    row("stale routable entries mean/max", lambda r: f"{r.exposure.stale_mean:.3f} / {r.exposure.stale_max}")
    row("stale routable entry-seconds", lambda r: _fmt(r.exposure.stale_s))
    row("stale listed (any state) entry-s", lambda r: _fmt(r.exposure.listed_stale_s))
    row("Ready but not routable entry-s", lambda r: _fmt(r.exposure.missing_s))
    row("router samples", lambda r: str(r.exposure.samples))
    row("requests sent / failed", lambda r: f"{r.sent} / {r.failed}")
    widths = [max(len(cells[i]) for cells in rows) for i in range(len(rows[0]))]
    lines = ["  ".join([cells[0].ljust(widths[0]), *(c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True))])
             for cells in rows]  # fmt: skip
    return "\n".join([header, *lines])


def discovery_routers(namespace: str, spec: SGLangDeploymentSpec, count: int) -> list[dict[str, Any]]:
    """ServiceAccount, Role, RoleBinding and `count` router pods: the operator router's flags plus discovery."""
    meta = {"name": DISCOVERY, "namespace": namespace}
    command = [*router_command(spec), "--service-discovery", "--selector", *WORKER_SELECTOR.split(","),
               "--service-discovery-port", str(WORKER_PORT), "--service-discovery-namespace", namespace]  # fmt: skip
    port = spec.router.port
    container = {
        "name": "smg",
        "image": spec.router.image,
        "command": command,
        "ports": [{"name": "http", "containerPort": port}],
        "readinessProbe": {"httpGet": {"path": "/health", "port": port}, "periodSeconds": 2, "timeoutSeconds": 5},
    }
    rule = {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}
    rbac: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta, "rules": [rule]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": meta,
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": DISCOVERY},
         "subjects": [{"kind": "ServiceAccount", "name": DISCOVERY, "namespace": namespace}]},
    ]  # fmt: skip
    return rbac + [
        {"apiVersion": "v1", "kind": "Pod",
         "metadata": {"name": f"{DISCOVERY}-{i}", "namespace": namespace, "labels": {"app": DISCOVERY}},
         "spec": {"serviceAccountName": DISCOVERY, "containers": [container], "terminationGracePeriodSeconds": 5}}
        for i in range(count)
    ]  # fmt: skip


def routable_urls(workers: Sequence[Mapping[str, Any]]) -> tuple[frozenset[str], frozenset[str]]:
    """(routable, listed) URLs of a `GET /workers` answer."""
    listed = frozenset(str(w["url"]) for w in workers)
    ok = frozenset(str(w["url"]) for w in workers if w.get("is_healthy") and w.get("status", "ready") == "ready")
    return ok, listed
