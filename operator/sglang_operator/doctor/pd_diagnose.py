"""The diagnoses of a disaggregated fleet: what breaks the KV handoff between a prefill and a decode server.

Pure functions of the observations, like `diagnose`: each returns its candidates, or None when its inputs are
unknown (its findings are then held), and [] in a colocated fleet, which has none of these.

- `BootstrapUnreachable`: a ready prefill whose bootstrap server does not answer `GET /health` (decode servers fetch
  its KV through it; smg only counts a closed port and keeps routing to it).
- `RendezvousFailures`: smg's `smg_pd_rendezvous_failures_total` rose over the window on a router pod.
- `RoleSkew`: a prefill and a decode pod that a router pairs were launched with another page size, KV-cache dtype,
  transfer backend or SGLang version (SGLang refuses the transfer at the first request).
- `RoleUnavailable`: one role has no ready replica while the other has: smg answers 503 to every request.
- `HandoffStuck`: a decode's prealloc queue grows (or never empties) over the window while every prefill idles.
"""

import math
from collections.abc import Iterable, Mapping
from urllib.parse import urlsplit

from ..api.diagnostics import DiagnosticThresholds
from .model import BootstrapProbe, Candidate, FindingType, FleetFacts, LaunchFacts, PerPod, PodFacts, ReplicaMetrics

ROLES = ("prefill", "decode")
IDLE_REQUESTS = 0.1
"""A prefill idles while its mean running requests and its mean bootstrap queue over the window stay below this."""
MIN_FAILURES = 0.5
"""`increase` extrapolates to the window's edges, so one failure reads 0.9 or 1.1: below a half, none happened."""
MAX_NAMED = 5
"""Pods named in one piece of evidence; the rest are counted."""
UNKNOWN_WITHOUT_METRICS: dict[str, str] = {
    "BootstrapUnreachable": "not every ready prefill's bootstrap server was probed within the evaluation's deadline",
    "RoleSkew": "no router's worker list could be read (which pods it pairs is unknown)",
}
"""Why the diagnoses that read no Prometheus are unknown."""
SKEW_ATTRIBUTES = (
    ("page_size", "page size (--page-size)"),
    ("kv_cache_dtype", "KV-cache dtype (--kv-cache-dtype)"),
    ("transfer_backend", "transfer backend (--disaggregation-transfer-backend)"),
    ("version", "SGLang version (image)"),
)


def pd_diagnoses(
    metrics: ReplicaMetrics | None, facts: FleetFacts, th: DiagnosticThresholds
) -> dict[FindingType, list[Candidate] | None]:
    """Every PD diagnosis over one evaluation (each [] in a colocated fleet)."""
    return {
        "BootstrapUnreachable": bootstrap_unreachable(facts),
        "RendezvousFailures": rendezvous_failures(metrics, facts),
        "RoleSkew": role_skew(facts),
        "RoleUnavailable": role_unavailable(facts),
        "HandoffStuck": handoff_stuck(metrics, facts, th),
    }


# -- helpers -------------------------------------------------------------------------------------------------------
def _serving(facts: FleetFacts) -> dict[str, PodFacts]:
    """Ready, serving rank-0 pods by name (as `diagnose.serving`)."""
    return {p.name: p for p in facts.pods if p.rank == 0 and p.ready and p.serving}


def _names(names: Iterable[str]) -> str:
    ordered = sorted(names)
    more = f" and {len(ordered) - MAX_NAMED} more" if len(ordered) > MAX_NAMED else ""
    return ", ".join(ordered[:MAX_NAMED]) + more


def _listed_by(facts: FleetFacts, name: str) -> list[str]:
    """The router pods whose worker list has the replica."""
    url = facts.pod_urls.get(name)
    return [r.router for r in facts.routers if url is not None and r.workers is not None and url in r.workers]


# -- bootstrap -------------------------------------------------------------------------------------------------------
def bootstrap_unreachable(facts: FleetFacts) -> list[Candidate] | None:
    """Each ready prefill replica whose bootstrap server did not answer this evaluation's probe."""
    if not facts.disaggregated:
        return []
    if facts.bootstrap is None:
        return None
    pods = {p.name: p for p in facts.pods}
    found = []
    for probe in facts.bootstrap:
        if probe.answered:
            continue
        pod = pods.get(probe.pod)
        routers = _listed_by(facts, probe.pod)
        listed = (
            f"router pod(s) {', '.join(routers)} list it, so every request they pair with it fails"
            if routers
            else "no router lists it"
        )
        found.append(
            Candidate(
                "BootstrapUnreachable",
                probe.pod,
                f"its bootstrap server did not answer this evaluation's probe ({probe.why}); the replica is Ready and "
                f"{listed}",
                _bootstrap_action(probe, pod),
                pod.replica if pod else "",
                pod.node if pod else "",
            )
        )
    return found


def _bootstrap_action(probe: BootstrapProbe, pod: PodFacts | None) -> str:
    port = urlsplit(probe.url).port
    backend = pod.launch.transfer_backend if pod is not None and pod.launch.transfer_backend else "its"
    # mooncake_tcp moves KV over TCP: no RDMA device to check (an unknown backend may be either).
    device = "" if backend == "mooncake_tcp" else " (RDMA device, --disaggregation-ib-device)"
    return (
        f"decode servers fetch this prefill's KV through its bootstrap server (--disaggregation-bootstrap-port "
        f"{port}), which the server starts with the {backend} transfer backend: check the pod's log for the "
        f"bootstrap server and the transfer backend{device} and that nothing else holds the port; delete pod "
        f"{probe.pod} to restart it"
    )


# -- rendezvous failures ---------------------------------------------------------------------------------------------
_PHASE_ACTIONS = {
    "probe": "phase probe: a prefill's bootstrap port refused smg's registration probe, and smg routes to it "
    "anyway: see BootstrapUnreachable and that prefill's bootstrap server",
    "bootstrap": "phase bootstrap: the prefill and decode legs never met: check that decode pods reach the prefills' "
    "bootstrap port (NetworkPolicy, pod network) and the prefills' bootstrap queue",
    "transfer": "phase transfer: the KV handoff failed after the legs met: check the transfer backend and RDMA "
    "devices (--disaggregation-ib-device) on both roles, and RoleSkew",
}


def rendezvous_failures(metrics: ReplicaMetrics | None, facts: FleetFacts) -> list[Candidate] | None:
    """Each router pod whose `smg_pd_rendezvous_failures_total` rose over the window, by leg and phase."""
    if not facts.disaggregated:
        return []
    if metrics is None or metrics.rendezvous_failures is None:
        return None
    by_router: dict[str, dict[tuple[str, str], float]] = {}
    for (router, leg, phase), value in metrics.rendezvous_failures.items():
        if value > 0:
            by_router.setdefault(router, {})[(leg, phase)] = value
    found = []
    for router, counts in sorted(by_router.items()):
        total = sum(counts.values())
        if total < MIN_FAILURES:
            continue
        parts = ", ".join(
            f"{_times(v)} in phase {phase or '?'} ({leg or '?'} leg)" for (leg, phase), v in sorted(counts.items())
        )
        phases = sorted({phase for _, phase in counts})
        action = "; ".join(
            _PHASE_ACTIONS.get(p, f"phase {p or '?'}: see the router pod's log for the failed rendezvous")
            for p in phases
        )
        found.append(
            Candidate(
                "RendezvousFailures",
                router,
                f"smg_pd_rendezvous_failures_total rose by {_times(total)} over {metrics.window_seconds}s on "
                f"router pod {router}: {parts}; {_failure_meaning(phases)}",
                action,
            )
        )
    return found


def _times(value: float) -> str:
    """How many failures an `increase` of `value` is: at least 1, rounded; a sum that overflowed as it reads
    (round() would raise on it)."""
    return str(max(1, round(value))) if math.isfinite(value) else f"{value:g}"


def _failure_meaning(phases: list[str]) -> str:
    """What the counted failures are: a probe failure is a registration whose bootstrap port refused smg's probe
    (no request involved); any other phase is a request whose legs did not complete the KV handoff."""
    if phases == ["probe"]:
        return "each failure is a registration whose bootstrap port refused smg's probe, not a request"
    meaning = "each failure in another phase is a request whose prefill and decode did not complete the KV handoff"
    return meaning if "probe" in phases else meaning.replace(" in another phase", "")


# -- skew between the roles ------------------------------------------------------------------------------------------
Skew = dict[str, dict[str, dict[str, set[str]]]]
"""attribute -> role -> value -> pods."""


def _skew_among(listed: list[PodFacts], skew: Skew) -> bool:
    """Adds the attributes on which pods one router pairs differ; True when there is one."""
    found = False
    for attribute, _ in SKEW_ATTRIBUTES:
        if len({getattr(p.launch, attribute) for p in listed}) < 2:
            continue
        found = True
        for p in listed:
            values = skew.setdefault(attribute, {}).setdefault(p.role, {})
            values.setdefault(getattr(p.launch, attribute), set()).add(p.name)
    return found


def role_skew(facts: FleetFacts) -> list[Candidate] | None:
    """Prefill and decode pods a router lists together whose launch flags or SGLang versions differ: the pairs the
    router makes of them fail. Pods no router lists never pair; without any router's list it is unknown."""
    if not facts.disaggregated:
        return []
    views = [r for r in facts.routers if r.workers is not None]
    if not views:
        return None
    replicas = _serving(facts)
    skew: Skew = {}
    routers = []
    for view in views:
        workers = view.workers or {}
        listed = [p for n, p in replicas.items() if p.role in ROLES and facts.pod_urls.get(n) in workers]
        if {p.role for p in listed} == set(ROLES) and _skew_among(listed, skew):
            routers.append(view.router)
    if not skew:
        return []
    labels = dict(SKEW_ATTRIBUTES)
    parts = [
        f"{labels[attribute]}: " + "; ".join(f"{role} {_values(by_role.get(role, {}))}" for role in ROLES)
        for attribute, by_role in skew.items()
    ]
    return [
        Candidate(
            "RoleSkew",
            "",
            f"{' | '.join(parts)}; listed together by router pod(s) {', '.join(sorted(routers))}, as the pods run now",
            _skew_action(skew, facts.launch),
        )
    ]


def _shown(value: str) -> str:
    return value or "SGLang's default"


def _values(values: Mapping[str, set[str]]) -> str:
    return ", ".join(f"{_shown(v)} ({_names(pods)})" for v, pods in sorted(values.items()))


def _skew_action(skew: Skew, spec: LaunchFacts) -> str:
    wanted = ", ".join(f"{dict(SKEW_ATTRIBUTES)[a].split(' (')[0]} {_shown(getattr(spec, a))}" for a in skew)
    leftover = {
        pod
        for attribute, by_role in skew.items()
        for values in by_role.values()
        for value, pods in values.items()
        if value != getattr(spec, attribute)
        for pod in pods
    }
    return (
        "SGLang refuses a KV transfer between servers of another page size or KV-cache dtype, and the two roles need "
        "one transfer backend and one release, so every request the router pairs across these pods fails: the pods "
        f"not launched as the spec says now ({wanted}) are {_names(leftover)}; let the rollout finish, or delete "
        "them so the operator re-creates them from the spec"
    )


# -- a role without a ready replica ----------------------------------------------------------------------------------
def role_unavailable(facts: FleetFacts) -> list[Candidate]:
    """A role with no ready replica while the other role has one (a fleet with none at all is starting or down:
    its Ready condition and SlowStart say so)."""
    if not facts.disaggregated:
        return []
    replicas = _serving(facts)
    ready = {role: [n for n, p in replicas.items() if p.role == role] for role in ROLES}
    found = []
    for role, other in (ROLES, ROLES[::-1]):
        if ready[role] or not ready[other]:
            continue
        pods = sorted((p for p in facts.pods if p.rank == 0 and p.role == role), key=lambda p: p.name)
        states = ", ".join(f"{p.name} {_state(p, facts.now)}" for p in pods[:MAX_NAMED]) or "none"
        wanted = facts.role_replicas.get(role, 0)
        found.append(
            Candidate(
                "RoleUnavailable",
                "",
                f"no Ready {role} replica while {len(ready[other])} {other} replica(s) are, so the router answers 503 "
                f"to every request; {role} replicas now: {states}; the spec asks for {wanted}",
                _unavailable_action(role, bool(pods), wanted),
            )
        )
    return found


def _state(pod: PodFacts, now: float) -> str:
    if not pod.serving:
        return "leaving (draining or deleted)"
    if pod.created is None:
        return "not Ready"
    return f"not Ready {now - pod.created:.0f}s after creation"


def _unavailable_action(role: str, has_pods: bool, wanted: int) -> str:
    if wanted == 0:
        return (
            f"the spec asks for no {role} replica: give the {role} groups replicas (or autoscaling.minReplicas) of at "
            "least 1; a disaggregated fleet serves nothing without both roles"
        )
    if not has_pods:
        return f"the operator runs no {role} pod: see the SGLangDeployment's conditions (Degraded) and its events"
    return (
        f"see why the {role} pods are not Ready (kubectl describe pod, and the server's log: a {role} server checks "
        "its --disaggregation-* flags at start); SlowStart reports a slow start"
    )


# -- a stuck handoff -------------------------------------------------------------------------------------------------
def _pd_readings(metrics: ReplicaMetrics | None) -> tuple[PerPod, PerPod, PerPod, PerPod, PerPod] | None:
    if metrics is None:
        return None
    m = metrics
    readings = (m.prealloc_queue, m.prealloc_growth, m.prealloc_lowest, m.running_mean, m.bootstrap_queue_mean)
    if any(r is None for r in readings):
        return None
    queue, growth, lowest, running, bootstrap = readings
    assert queue is not None and growth is not None and lowest is not None
    assert running is not None and bootstrap is not None
    return queue, growth, lowest, running, bootstrap


def _idle(prefills: list[str], running: PerPod, bootstrap: PerPod) -> str | None:
    """The evidence that every prefill idled over the window, or None when one did not (or has no reading)."""
    means = [(running.get(n), bootstrap.get(n)) for n in prefills]
    if not prefills or any(r is None or b is None or r >= IDLE_REQUESTS or b >= IDLE_REQUESTS for r, b in means):
        return None
    most_running = max(r or 0.0 for r, _ in means)
    most_queued = max(b or 0.0 for _, b in means)
    return (
        f"at most {most_running:.2g} running and {most_queued:.2g} in the bootstrap queue on average on prefill "
        f"pod(s) {_names(prefills)}"
    )


def _stuck(name: str, queue: PerPod, growth: PerPod, lowest: PerPod, th: DiagnosticThresholds) -> str | None:
    now = queue.get(name)
    if now is None or now < 1:
        return None
    grew, least = growth.get(name, 0.0), lowest.get(name, 0.0)
    if grew >= th.prealloc_queue_growth:
        return f"its prealloc queue grew by {grew:.3g} to {now:.3g} requests"
    if least >= 1:
        return f"its prealloc queue never emptied (lowest {least:.3g}, now {now:.3g} requests)"
    return None


def handoff_stuck(
    metrics: ReplicaMetrics | None, facts: FleetFacts, th: DiagnosticThresholds
) -> list[Candidate] | None:
    """A decode replica whose prealloc queue grew by `preallocQueueGrowth` over the window, or never emptied, while
    every ready prefill replica idled (mean running requests and bootstrap queue about 0): the decode holds requests
    whose KV no prefill is computing."""
    if not facts.disaggregated:
        return []
    readings = _pd_readings(metrics)
    if metrics is None or readings is None:
        return None
    queue, growth, lowest, running, bootstrap = readings
    replicas = _serving(facts)
    idle = _idle(sorted(n for n, p in replicas.items() if p.role == "prefill"), running, bootstrap)
    if idle is None:
        return []
    found = []
    for name, pod in sorted(replicas.items()):
        stuck = _stuck(name, queue, growth, lowest, th) if pod.role == "decode" else None
        if stuck is None:
            continue
        found.append(
            Candidate(
                "HandoffStuck",
                name,
                f"{stuck} over {metrics.window_seconds}s while every prefill replica idled: {idle}",
                "this decode holds requests whose KV no prefill is computing: the router pairs them with a prefill "
                "that never gets them or cannot hand over (see RendezvousFailures and BootstrapUnreachable; each "
                "router lists every prefill with worker_type prefill and its bootstrap port), or the decode cannot "
                "reach the prefills' bootstrap port; its log names the rooms that time out "
                f"(SGLANG_DISAGGREGATION_WAITING_TIMEOUT); delete pod {name} if it alone is stuck",
                pod.replica,
                pod.node,
            )
        )
    return found
