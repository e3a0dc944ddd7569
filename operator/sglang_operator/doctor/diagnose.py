"""The diagnoses: pure functions from what was observed over the window to candidate findings.

Each diagnosis returns its candidates, or None when its inputs are unknown (then the previous findings of that type
are held, neither raised nor cleared). No candidate without evidence: every comparison needs readings of at least
two serving replicas, latencies and hit rates need `minRequests` finished requests, and each candidate's evidence
names the numbers, the window and what they were compared with.

Replicas are compared with the median of the *other* replicas, so that in a fleet of two the slow one is measured
against the healthy one, not against a median it pulls up itself.
"""

import itertools
import math
import statistics
from collections.abc import Mapping
from datetime import UTC, datetime

from ..api.diagnostics import DiagnosticsSpec, DiagnosticThresholds
from .model import Candidate, Diagnosis, FindingType, FleetFacts, PodFacts, ReplicaMetrics, ScaleUp
from .pd_diagnose import UNKNOWN_WITHOUT_METRICS, pd_diagnoses

LOAD_POLICIES = frozenset({"power_of_two", "least_load"})
"""Policies that route by the replicas' load: they should keep load even by themselves."""
PREFIX_POLICIES = frozenset({"cache_aware", "consistent_hashing", "prefix_hash"})
"""Policies that keep requests with one prefix (or key) on one replica."""


def diagnose(
    metrics: ReplicaMetrics | None, facts: FleetFacts, spec: DiagnosticsSpec, why: str | None = None
) -> Diagnosis:
    """Every diagnosis over one evaluation's observations (a disaggregated fleet's too, `pd_diagnose`). `metrics`
    None: Prometheus could not be read at all (`why` says why)."""
    th, window = spec.thresholds, spec.window_seconds
    if metrics is not None and metrics.errors:
        why = "; ".join(metrics.errors)
    why = why or "no Prometheus reading"
    results: dict[FindingType, list[Candidate] | None] = {
        "LoadImbalance": load_imbalance(metrics, facts, th),
        "SlowReplica": slow_replicas(metrics, facts, th),
        "CacheHitSpread": cache_hit_spread(metrics, facts, th),
        "SlowStart": slow_starts(facts, th, window),
        "SlowScaleUp": slow_scale_up(facts, th, window),
        **pd_diagnoses(metrics, facts, th),
    }
    candidates = tuple(c for found in results.values() if found is not None for c in found)
    unknown: dict[str, str] = {
        kind: UNKNOWN_WITHOUT_METRICS.get(kind, why) for kind, found in results.items() if found is None
    }
    return Diagnosis(candidates, unknown)


# -- helpers -------------------------------------------------------------------------------------------------------
def serving(facts: FleetFacts) -> dict[str, PodFacts]:
    """The replicas that should receive requests: Ready, serving rank-0 pods, by pod name."""
    return {p.name: p for p in facts.pods if p.rank == 0 and p.ready and p.serving}


def _others_median(values: Mapping[str, float], name: str, replicas: Mapping[str, PodFacts]) -> float | None:
    """The median of the other replicas of the same worker group (same shape) that have a reading; None without."""
    group = replicas[name].group
    others = [v for k, v in values.items() if k != name and k in replicas and replicas[k].group == group]
    return statistics.median(others) if others else None


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.3g} ms" if seconds < 1 else f"{seconds:.3g} s"


def _num(value: float) -> str:
    return f"{value:.3g}"


def _whole(value: float) -> str:
    """A count as a whole number; one that is not finite as it reads (int() would raise on it)."""
    return str(int(value)) if math.isfinite(value) else f"{value:g}"


def _pct(value: float) -> str:
    return f"{value * 100:.0f}%"


def _policy(facts: FleetFacts) -> str:
    sticky = "on" if facts.sticky_sessions else "off"
    return f"router policy {facts.policy}, sticky sessions {sticky}"


def _where(pod: PodFacts, gpu: Mapping[str, str] | None) -> str:
    model = (gpu or {}).get(pod.name)
    return f"node {pod.node or 'unknown'}" + (f", GPU {model}" if model else "")


def _stamp(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# -- load imbalance --------------------------------------------------------------------------------------------------
def load_imbalance(
    metrics: ReplicaMetrics | None, facts: FleetFacts, th: DiagnosticThresholds
) -> list[Candidate] | None:
    """A replica holding many more requests than the others, beyond what the routing policy allows; or a Ready
    replica a router does not list or lists as unhealthy (it gets no requests from that router)."""
    replicas = serving(facts)
    found: list[Candidate] = []
    if facts.router_enabled:
        found += _unrouted(replicas, facts)
    if metrics is None or metrics.load is None:
        return found if found else None
    loads = {name: metrics.load[name] for name in replicas if name in metrics.load}
    flagged = {c.subject for c in found}
    for name, load in sorted(loads.items()):
        median = _others_median(loads, name, replicas)
        if median is None or name in flagged or load - median < th.min_load or load <= th.load_imbalance_ratio * median:
            continue
        lowest = min(v for k, v in loads.items() if replicas[k].group == replicas[name].group)
        if facts.policy == "cache_aware" and not _beyond_balance(load, lowest, facts):
            continue  # cache_aware keeps prefixes together until its own thresholds: this spread is by design
        pod = replicas[name]
        ratio = f" ({load / median:.1f}x)" if median > 0 else ""
        found.append(
            Candidate(
                "LoadImbalance",
                name,
                f"{_num(load)} requests running + queued on average over {metrics.window_seconds}s vs a median of "
                f"{_num(median)} on the other replicas{ratio}; {_policy(facts)}; {_where(pod, metrics.gpu_model)}",
                _imbalance_action(facts),
                pod.replica,
                pod.node,
            )
        )
    return found


def _beyond_balance(load: float, lowest: float, facts: FleetFacts) -> bool:
    """smg's cache_aware switches to the shortest queue once max - min > abs AND max > rel x min."""
    return load - lowest > facts.balance_abs_threshold and load > facts.balance_rel_threshold * lowest


def _imbalance_action(facts: FleetFacts) -> str:
    if facts.policy in LOAD_POLICIES:
        action = (
            f"{facts.policy} already routes by load, so this replica is slow or its load reports are stale: check "
            "its latency (SlowReplica) and its health checks"
        )
    elif facts.policy == "cache_aware":
        action = (
            "cache_aware keeps prefixes on one replica until the spread passes --balance-abs-threshold "
            f"{facts.balance_abs_threshold:g} and --balance-rel-threshold {facts.balance_rel_threshold:g}, and it "
            "has: one prefix may dominate the traffic, or the replica is slow; lower the thresholds in router.args, "
            "or check the replica's latency (SlowReplica)"
        )
    else:
        action = (
            f"{facts.policy} gives every replica the same share whatever its load, so a replica that serves slower "
            "holds more requests: check this replica's latency (SlowReplica) and health, or route by load with "
            "router.policy: least_load or cache_aware"
        )
    if facts.sticky_sessions:
        action += "; sticky sessions pin each session to one replica, so a few heavy sessions load one replica"
    return action


def _unrouted(replicas: Mapping[str, PodFacts], facts: FleetFacts) -> list[Candidate]:
    # A prefill whose bootstrap server does not answer is left unrouted on purpose: BootstrapUnreachable says why.
    closed = {probe.pod for probe in facts.bootstrap or () if not probe.answered}
    found = []
    for name, pod in sorted(replicas.items()):
        url = facts.pod_urls.get(name)
        if url is None or name in closed:
            continue
        missing = [r.router for r in facts.routers if r.workers is not None and url not in r.workers]
        unhealthy = [r.router for r in facts.routers if r.workers is not None and r.workers.get(url) is False]
        if not missing and not unhealthy:
            continue
        what = []
        if missing:
            what.append(f"not listed by router pod(s) {', '.join(missing)}")
        if unhealthy:
            what.append(f"marked unhealthy by router pod(s) {', '.join(unhealthy)}")
        found.append(
            Candidate(
                "LoadImbalance",
                name,
                f"Ready but {' and '.join(what)}: it gets no requests from them; {_policy(facts)}",
                "check the replica's health endpoint (the router's health checks failed) and the RouterSynced "
                "condition; the operator registers every Ready replica on every router pod",
                pod.replica,
                pod.node,
            )
        )
    return found


# -- slow replicas -------------------------------------------------------------------------------------------------
def _eligible(metrics: ReplicaMetrics, replicas: Mapping[str, PodFacts], th: DiagnosticThresholds) -> set[str]:
    requests = metrics.requests or {}
    return {name for name in replicas if requests.get(name, 0.0) >= th.min_requests}


def _cold(
    metrics: ReplicaMetrics, eligible: set[str], replicas: Mapping[str, PodFacts], th: DiagnosticThresholds
) -> set[str]:
    """Replicas whose hit rate is `cacheHitSpread` below the others' median (CacheHitSpread reports them)."""
    hits = {n: v for n, v in (metrics.cache_hit_rate or {}).items() if n in eligible}
    cold = set()
    for name, value in hits.items():
        median = _others_median(hits, name, replicas)
        if median is not None and value < median - th.cache_hit_spread:
            cold.add(name)
    return cold


def slow_replicas(
    metrics: ReplicaMetrics | None, facts: FleetFacts, th: DiagnosticThresholds
) -> list[Candidate] | None:
    """A replica whose inter-token latency (or time to first token) is `slowReplicaRatio` x the other replicas'
    median, and `slowReplicaMinSeconds` above it. A slow first token that a cold cache explains is left to
    CacheHitSpread: prefill of uncached tokens is the cache's problem, not the GPU's."""
    if metrics is None or metrics.requests is None or (metrics.itl is None and metrics.ttft is None):
        return None
    replicas = serving(facts)
    eligible = _eligible(metrics, replicas, th)
    cold = _cold(metrics, eligible, replicas, th)
    found = []
    for name in sorted(eligible):
        parts = []
        checks = (("inter-token latency", metrics.itl, False), ("time to first token", metrics.ttft, name in cold))
        for label, values, skip in checks:
            readings = {n: v for n, v in (values or {}).items() if n in eligible}
            median = _others_median(readings, name, replicas) if name in readings else None
            if median is None or skip:
                continue
            value = readings[name]
            if value > th.slow_replica_ratio * median and value - median >= th.slow_replica_min_seconds:
                ratio = f" ({value / median:.1f}x)" if median > 0 else ""
                parts.append(f"{label} {_ms(value)} vs {_ms(median)} median of the other replicas{ratio}")
        if not parts:
            continue
        pod = replicas[name]
        count = _whole((metrics.requests or {}).get(name, 0.0))
        found.append(
            Candidate(
                "SlowReplica",
                name,
                f"{'; '.join(parts)} over {metrics.window_seconds}s, {count} requests; "
                f"{_where(pod, metrics.gpu_model)}",
                _slow_action(pod, metrics.gpu_model, replicas),
                pod.replica,
                pod.node,
            )
        )
    return found


def _slow_action(pod: PodFacts, gpu: Mapping[str, str] | None, replicas: Mapping[str, PodFacts]) -> str:
    gpu = gpu or {}
    mine = gpu.get(pod.name)
    others = sorted({gpu[n] for n in replicas if n != pod.name and n in gpu})
    if mine and others and mine not in others:
        return (
            f"it runs on a different GPU model ({mine}; the others: {', '.join(others)}): keep the fleet on one GPU "
            "model with template.spec.nodeSelector (or give that GPU its own worker group)"
        )
    return (
        f"check the GPU of node {pod.node or 'unknown'} (DCGM: clocks, temperature, power, XID and ECC errors) and "
        f"the replica's own load; delete pod {pod.name} to re-create it, away from that node if it is degraded"
    )


# -- cache-hit spread ------------------------------------------------------------------------------------------------
def cache_hit_spread(
    metrics: ReplicaMetrics | None, facts: FleetFacts, th: DiagnosticThresholds
) -> list[Candidate] | None:
    """A replica whose prefix-cache hit rate is `cacheHitSpread` below the other replicas' median."""
    if metrics is None or metrics.cache_hit_rate is None or metrics.requests is None:
        return None
    replicas = serving(facts)
    eligible = _eligible(metrics, replicas, th)
    hits = {n: v for n, v in metrics.cache_hit_rate.items() if n in eligible}
    found = []
    for name in sorted(_cold(metrics, eligible, replicas, th)):
        pod, median = replicas[name], _others_median(hits, name, replicas) or 0.0
        found.append(
            Candidate(
                "CacheHitSpread",
                name,
                f"prefix-cache hit rate {_pct(hits[name])} vs {_pct(median)} median of the "
                f"other replicas over {metrics.window_seconds}s; {_policy(facts)}",
                _cache_action(facts),
                pod.replica,
                pod.node,
            )
        )
    return found


def _cache_action(facts: FleetFacts) -> str:
    action = (
        "this replica's cache is cold, smaller or disabled: check its flags (--disable-radix-cache, "
        "--mem-fraction-static, --max-total-tokens) and whether it restarted recently"
    )
    if facts.policy not in PREFIX_POLICIES:
        action += (
            f"; {facts.policy} ignores prefixes, so every replica must hold every prefix: router.policy: "
            "cache_aware keeps a prefix on the replica that already holds it"
        )
    elif not facts.sticky_sessions:
        action += "; for multi-turn sessions, router.stickySessions keeps a session on the replica with its cache"
    return action


# -- slow starts -----------------------------------------------------------------------------------------------------
def slow_starts(facts: FleetFacts, th: DiagnosticThresholds, window: int) -> list[Candidate]:
    """A replica that took more than `slowStartSeconds` from pod creation to Ready (reported for `windowSeconds`
    after it became Ready), or is still not Ready after that long; the time split into scheduling, image pull and
    container start, and weight load + warm-up (SGLang exports no signal between those two)."""
    found = []
    for pod in sorted(facts.pods, key=lambda p: p.name):
        if pod.rank != 0 or not pod.serving or pod.created is None:
            continue
        begin = pod.started if pod.restarts > 0 and pod.started is not None else pod.created
        if pod.ready:
            if pod.ready_since is None or facts.now - pod.ready_since > window:
                continue
            end, state = pod.ready_since, "became Ready after"
        else:
            end, state = facts.now, "not Ready after"
        total = end - begin
        if total <= th.slow_start_seconds:
            continue
        phases = _phases(pod, end)
        longest = max(phases, key=lambda kv: kv[1])[0] if phases else ""
        split = ", ".join(f"{label} {seconds:.0f}s" for label, seconds in phases) or "no phase timestamps"
        since = "its last restart" if begin != pod.created else "pod creation"
        found.append(
            Candidate(
                "SlowStart",
                pod.name,
                f"{state} {total:.0f}s from {since} (threshold {th.slow_start_seconds}s): {split}; model cache "
                f"{facts.cache_type}; node {pod.node or 'unknown'}",
                _start_action(longest, facts.cache_type),
                pod.replica,
                pod.node,
            )
        )
    return found


def _phases(pod: PodFacts, end: float) -> list[tuple[str, float]]:
    """(label, seconds) of the start-up phases the pod's timestamps allow."""
    if pod.restarts > 0:
        return [("weight load + warm-up", end - pod.started)] if pod.started is not None else []
    out = []
    if pod.created is not None and pod.scheduled is not None:
        out.append(("scheduling", max(pod.scheduled - pod.created, 0.0)))
    if pod.scheduled is not None and pod.started is not None:
        out.append(("image pull + container start", max(pod.started - pod.scheduled, 0.0)))
    if pod.started is not None:
        out.append(("weight load + warm-up", max(end - pod.started, 0.0)))
    return out


def _start_action(longest: str, cache_type: str) -> str:
    if longest == "scheduling":
        return (
            "the pod waited for a node with free GPUs: add GPU capacity, or check template.spec placement "
            "(nodeSelector, affinity, tolerations) and quotas"
        )
    if longest == "image pull + container start":
        return "the image took long to pull: pre-pull it on the GPU nodes, or use a registry mirror near the cluster"
    if cache_type == "emptyDir":
        return (
            "the weights are downloaded at every start (model.cache is an emptyDir): use model.cache.type "
            "persistentVolumeClaim or hostPath holding the weights, and autoscaling.warmReplicas for scale-ups"
        )
    return (
        f"weight load and warm-up (CUDA graph capture) are slow with the {cache_type} model cache: check the volume's "
        "read throughput, and keep autoscaling.warmReplicas so scale-ups do not wait for it"
    )


# -- slow scale-up ---------------------------------------------------------------------------------------------------
def slow_scale_up(facts: FleetFacts, th: DiagnosticThresholds, window: int) -> list[Candidate]:
    """The latest scale-up decision: its new replicas took more than `slowScaleUpSeconds` to become Ready (reported
    for `windowSeconds` after they did), or are still not Ready after that long. A later, fast scale-up clears it."""
    if not facts.scale_ups:
        return []
    latest = facts.scale_ups[-1]
    wanted = latest.after - latest.before
    new = sorted(
        (p for p in facts.pods if p.rank == 0 and p.created is not None and p.created >= latest.time - 1.0),
        key=lambda p: (p.created or 0.0, p.name),
    )[:wanted]
    done = len(new) == wanted and all(p.ready and p.ready_since is not None for p in new)
    if done:
        finished = max(p.ready_since or 0.0 for p in new)
        took = finished - latest.time
        if took <= th.slow_scale_up_seconds or facts.now - finished > window:
            return []
        state = f"its {wanted} new replica(s) were Ready {took:.0f}s after the decision"
    elif facts.ready_replicas >= latest.after and len(new) < wanted:
        return []  # warm replicas were promoted: the scale-up did not wait for a start
    else:
        took = facts.now - latest.time
        if took <= th.slow_scale_up_seconds:
            return []
        ready = sum(1 for p in new if p.ready)
        state = f"{ready} of its {wanted} new replica(s) Ready {took:.0f}s after the decision"
    created = max((p.created or latest.time) - latest.time for p in new) if new else None
    starts = [(p.ready_since if p.ready and p.ready_since else facts.now) - (p.created or 0.0) for p in new]
    detail = f"; pods created up to {created:.0f}s after the decision" if created is not None else "; no pod created"
    if starts:
        detail += f", the slowest took {max(starts):.0f}s from creation to Ready"
    return [
        Candidate(
            "SlowScaleUp",
            "",
            f"scale-up {latest.before} -> {latest.after} replicas decided at {_stamp(latest.time)}: {state} "
            f"(threshold {th.slow_scale_up_seconds}s){detail}; model cache {facts.cache_type}",
            _scale_up_action(created, max(starts) if starts else None),
        )
    ]


def _scale_up_action(created: float | None, slowest: float | None) -> str:
    if created is not None and slowest is not None and created > slowest:
        return (
            "the pods were created long after the decision: check the operator (its workqueue wait and reconcile "
            "errors) and the GPU budget (autoscaling.maxGPUs)"
        )
    seconds = f"{slowest:.0f}s" if slowest is not None else "the start-up time"
    return (
        f"a new replica takes {seconds} to start (model load plus CUDA graph capture): keep autoscaling.warmReplicas "
        "ready replicas that are promoted at once, use a local model cache (model.cache), and set "
        f"autoscaling.startupSeconds to about {seconds} so the autoscaler plans with it"
    )


def scale_ups(history: object, recommend_only: bool) -> tuple[ScaleUp, ...]:
    """The scale-ups in `status.autoscaler.history` (entries `{time, replicas}`), oldest first; none when the
    autoscaler only recommends (its decisions start nothing). Malformed entries are skipped."""
    if recommend_only or not isinstance(history, list):
        return ()
    points: list[tuple[float, int]] = []
    for entry in history:
        if not isinstance(entry, dict):
            continue
        stamp, replicas = entry.get("time"), entry.get("replicas")
        if not isinstance(stamp, str) or not isinstance(replicas, int) or isinstance(replicas, bool):
            continue
        try:
            when = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
        except ValueError:
            continue
        points.append((when, replicas))
    points.sort()
    return tuple(
        ScaleUp(when, before, after) for (_, before), (when, after) in itertools.pairwise(points) if after > before
    )
