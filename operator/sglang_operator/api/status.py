"""Status of an `SGLangDeployment`: what the operator observed, in the standard Kubernetes shapes.

The controller computes it with a pure function of the observed children; these models only give it a schema
(for the CRD) and a typed view (for readers such as the autoscaler and the CLI).
"""

from typing import Any, Literal

from pydantic import Field

from .base import SpecModel

ConditionType = Literal["Ready", "Progressing", "Degraded", "RouterSynced", "MetricsAvailable"]


class Condition(SpecModel):
    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str = ""
    message: str = ""
    observed_generation: int | None = None
    last_transition_time: str | None = None


class AutoscalerDecisionRecord(SpecModel):
    time: str
    replicas: int
    reason: str
    mode: str = "normal"


class AutoscalerRoleStatus(SpecModel):
    """One role's decision in a disaggregated fleet (prefill or decode)."""

    desired_replicas: int = Field(default=0, description="Replicas of the role's groups together.")
    signal: str = Field(default="", description="The signal that decided (e.g. uncachedTokens, concurrency, hold).")
    reason: str = ""
    mode: str = "normal"
    observed: dict[str, str] = Field(default_factory=dict, description="The role's signals, as display strings.")


class AutoscalerStatus(SpecModel):
    desired_replicas: int | None = None
    recommend_only: bool = Field(
        default=False, description="True when desiredReplicas is only a recommendation (spec.replicas sets the count)."
    )
    warm_replicas: int | None = None
    last_scale_time: str | None = None
    reason: str | None = None
    mode: str | None = None
    observed: dict[str, str] = Field(default_factory=dict, description="Last signals, as display strings.")
    history: list[AutoscalerDecisionRecord] = Field(default_factory=list, description="The last 20 decisions.")
    state: dict[str, Any] = Field(default_factory=dict, description="Policy memory (recommendations over time).")
    groups: dict[str, int] = Field(
        default_factory=dict, description="With worker groups: the decision split into replicas per group."
    )
    roles: dict[str, AutoscalerRoleStatus] = Field(
        default_factory=dict, description="A disaggregated fleet: the decision per role (prefill, decode)."
    )


DiagnosticType = Literal[
    "LoadImbalance",
    "SlowReplica",
    "CacheHitSpread",
    "SlowStart",
    "SlowScaleUp",
    "BootstrapUnreachable",
    "RendezvousFailures",
    "RoleSkew",
    "RoleUnavailable",
    "HandoffStuck",
]
"""The fleet doctor's finding types (`doctor.model.FINDING_TYPES` is this list); the last five only in a
disaggregated fleet."""


class DiagnosticFinding(SpecModel):
    """One reported finding of the fleet doctor (`sglang_operator.doctor`)."""

    type: DiagnosticType
    replica: str = Field(default="", description="The replica's index (sglang.ai/replica); empty for the fleet.")
    pod: str = Field(
        default="", description="The pod it is about (a replica's rank-0 pod, or a router pod); empty for the fleet."
    )
    node: str = Field(default="", description="The node the pod runs on.")
    evidence: str = Field(description="What was measured, over which window, against what.")
    action: str = Field(description="What to do about it.")
    since: str = Field(description="When the finding was first reported.")


class DiagnosticTrack(SpecModel):
    """The doctor's hysteresis memory for one (type, subject): consecutive evaluations with and without it."""

    type: DiagnosticType
    subject: str = Field(default="", description="The pod the reading is about; empty for the fleet.")
    seen: int = 0
    missed: int = 0


class DiagnosticsStatus(SpecModel):
    """Written by the fleet doctor only (one merge patch of this field)."""

    findings: list[DiagnosticFinding] = Field(default_factory=list, description="Findings reported now.")
    tracking: list[DiagnosticTrack] = Field(
        default_factory=list, description="Hysteresis memory: readings not yet reported, or reported and fading."
    )
    unknown: list[str] = Field(
        default_factory=list, description="Signals the last evaluation could not read (their findings are held)."
    )


class WorkerGroupStatus(SpecModel):
    """One worker group's replicas (spec.workerGroups), counted as the fleet's are."""

    name: str
    role: str | None = Field(default=None, description="prefill or decode in a disaggregated fleet.")
    desired_replicas: int = 0
    replicas: int = 0
    ready_replicas: int = 0
    updated_replicas: int = 0
    registered_workers: int = Field(default=0, description="Its replicas listed by every router pod.")
    gpus_per_replica: int = Field(default=0, alias="gpusPerReplica")
    revision: str = ""


class SGLangDeploymentStatus(SpecModel):
    observed_generation: int | None = None
    replicas: int = Field(
        default=0,
        description="Serving replicas of what /scale sizes: the fleet, or with worker groups the group that follows "
        "spec.replicas (the fleet when no group does).",
    )
    ready_replicas: int = 0
    updated_replicas: int = 0
    ready: str = Field(default="0/0", description="ready/desired replicas, for the READY printer column.")
    shape: str = Field(
        default="", description="Each replica's parallelism, per worker group with its role, for the SHAPE column."
    )
    registered_workers: int = 0
    gpus_per_replica: int = Field(default=0, alias="gpusPerReplica")
    total_gpus: int = Field(default=0, alias="totalGPUs")
    selector: str = ""
    endpoint: str = ""
    revision: str = ""
    qps: str = Field(default="", description="Requests/s through the fleet, for the QPS printer column.")
    conditions: list[Condition] = Field(default_factory=list)
    autoscaler: AutoscalerStatus | None = None
    groups: list[WorkerGroupStatus] = Field(default_factory=list, description="Per worker group, when there are any.")
    diagnostics: DiagnosticsStatus | None = None
