"""What the doctor observes about one fleet, and what it finds. Plain frozen values, so the diagnoses are pure
functions that tests drive with literals.

A per-replica metric is a mapping from the replica's rank-0 pod name to the value over the window; a signal that
could not be read at all is None (unknown), which is not the same as an empty mapping (read, no series).
"""

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import get_args

from ..api.status import DiagnosticType

FindingType = DiagnosticType
"""One list of finding types: the CRD's enum of `status.diagnostics.findings[].type`."""
FINDING_TYPES: tuple[FindingType, ...] = get_args(DiagnosticType)
PD_FINDING_TYPES: tuple[FindingType, ...] = (
    "BootstrapUnreachable",
    "RendezvousFailures",
    "RoleSkew",
    "RoleUnavailable",
    "HandoffStuck",
)
"""Only a disaggregated fleet has them (`pd_diagnose`)."""

PerPod = Mapping[str, float]


@dataclass(frozen=True)
class ReplicaMetrics:
    """Per-replica readings from Prometheus over the window, keyed by rank-0 pod name; None: unknown."""

    window_seconds: int
    load: PerPod | None = None
    """Mean running + queued requests."""
    requests: PerPod | None = None
    """Requests finished in the window."""
    ttft: PerPod | None = None
    """Mean time to first token, seconds."""
    itl: PerPod | None = None
    """Mean inter-token latency, seconds."""
    cache_hit_rate: PerPod | None = None
    """Mean of `sglang:cache_hit_rate` (0..1)."""
    gpu_model: Mapping[str, str] | None = None
    """The GPU model of each pod (DCGM's `modelName` label)."""
    # A disaggregated fleet's, read only there (`pd_observe.pd_promql`):
    rendezvous_failures: Mapping[tuple[str, str, str], float] | None = None
    """(router pod, leg, phase) -> how much smg's `smg_pd_rendezvous_failures_total` rose over the window."""
    prealloc_queue: PerPod | None = None
    """`sglang:num_decode_prealloc_queue_reqs` now."""
    prealloc_growth: PerPod | None = None
    """How much it changed over the window (`delta`)."""
    prealloc_lowest: PerPod | None = None
    """Its lowest reading in the window (a queue that never emptied)."""
    running_mean: PerPod | None = None
    """Mean `sglang:num_running_reqs` over the window."""
    bootstrap_queue_mean: PerPod | None = None
    """Mean of a prefill's bootstrap queue over the window (`num_prefill_bootstrap_queue_reqs`, before 0.5.12
    `num_prefill_prealloc_queue_reqs`)."""
    errors: tuple[str, ...] = ()
    """Why signals are unknown, one line each."""


@dataclass(frozen=True)
class LaunchFacts:
    """What a KV handoff depends on, as one pod was launched: its command's flags ("" where the command leaves
    SGLang's default) and its image's SGLang version (the image itself where the tag names none)."""

    page_size: str = ""
    kv_cache_dtype: str = ""
    transfer_backend: str = ""
    version: str = ""


@dataclass(frozen=True)
class PodFacts:
    """What the doctor needs of one worker pod (read from its metadata and status)."""

    name: str
    replica: str
    rank: int
    node: str
    created: float | None
    """Creation time, seconds since the epoch."""
    scheduled: float | None = None
    """PodScheduled condition's transition time."""
    started: float | None = None
    """The main container's last start (`state.running.startedAt`)."""
    ready: bool = False
    ready_since: float | None = None
    """Ready condition's transition time (while Ready)."""
    restarts: int = 0
    serving: bool = True
    """Neither draining, deleted nor warm: the router should send it requests."""
    group: str = ""
    """Its worker group (`sglang.ai/group`): replicas are compared only with replicas of the same shape."""
    role: str = ""
    """prefill or decode (its command's `--disaggregation-mode`, else its group's role); "" in a colocated fleet."""
    launch: LaunchFacts = LaunchFacts()


@dataclass(frozen=True)
class RouterView:
    """One router pod's worker list: URL -> healthy. None when the router could not be read."""

    router: str
    workers: Mapping[str, bool] | None


@dataclass(frozen=True)
class ScaleUp:
    """One scale-up the autoscaler decided: at `time` (epoch seconds), from `before` to `after` replicas."""

    time: float
    before: int
    after: int


@dataclass(frozen=True)
class BootstrapProbe:
    """`GET /health` of one ready prefill replica's bootstrap server (on its rank-0 pod)."""

    pod: str
    url: str
    why: str = ""
    """Why it did not answer (refused, timed out, another status than 200); "" when it answered 200."""

    @property
    def answered(self) -> bool:
        return not self.why


@dataclass(frozen=True)
class FleetFacts:
    """Everything the diagnoses read besides metrics."""

    now: float
    pods: tuple[PodFacts, ...]
    policy: str
    """The router policy in effect (`spec.router.policy`)."""
    sticky_sessions: bool = False
    router_enabled: bool = True
    balance_abs_threshold: float = 64.0
    balance_rel_threshold: float = 1.5
    """cache_aware's balance thresholds as the router runs them (smg's defaults unless router.args set them)."""
    cache_type: str = "emptyDir"
    """`spec.model.cache.type`."""
    routers: tuple[RouterView, ...] = ()
    pod_urls: Mapping[str, str] = field(default_factory=dict)
    """Rank-0 pod name -> the worker URL the routers list."""
    scale_ups: tuple[ScaleUp, ...] = ()
    """The autoscaler's scale-up decisions, oldest first (empty when it does not own the count)."""
    ready_replicas: int = 0
    disaggregated: bool = False
    """Prefill/decode (`spec.disaggregation`): the PD diagnoses run only then."""
    bootstrap: tuple[BootstrapProbe, ...] | None = None
    """Each ready prefill replica's bootstrap probe; None when not every one could be probed (unknown)."""
    role_replicas: Mapping[str, int] = field(default_factory=dict)
    """Role -> the replicas the spec asks of that role's groups together."""
    launch: LaunchFacts = LaunchFacts()
    """What the spec launches every pod with (what a leftover pod differs from)."""


@dataclass(frozen=True)
class Candidate:
    """A finding as one evaluation sees it (before hysteresis)."""

    type: FindingType
    subject: str
    """The rank-0 pod it is about; "" for the fleet."""
    evidence: str
    action: str
    replica: str = ""
    node: str = ""

    @property
    def key(self) -> tuple[str, str]:
        return (self.type, self.subject)


@dataclass(frozen=True)
class Diagnosis:
    """One evaluation: the candidates, and the finding types whose inputs were unknown (their findings are held)."""

    candidates: tuple[Candidate, ...]
    unknown: Mapping[str, str] = field(default_factory=dict)
    """Finding type -> why its inputs could not be read."""
