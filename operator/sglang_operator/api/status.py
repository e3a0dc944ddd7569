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


class SGLangDeploymentStatus(SpecModel):
    observed_generation: int | None = None
    replicas: int = 0
    ready_replicas: int = 0
    updated_replicas: int = 0
    ready: str = Field(default="0/0", description="ready/desired replicas, for the READY printer column.")
    registered_workers: int = 0
    gpus_per_replica: int = Field(default=0, alias="gpusPerReplica")
    total_gpus: int = Field(default=0, alias="totalGPUs")
    selector: str = ""
    endpoint: str = ""
    revision: str = ""
    qps: str = Field(default="", description="Requests/s through the fleet, for the QPS printer column.")
    conditions: list[Condition] = Field(default_factory=list)
    autoscaler: AutoscalerStatus | None = None
