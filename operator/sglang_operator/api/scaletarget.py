"""`SGLangWorkerGroup`: the scale target of one worker group, so an HPA or a KEDA ScaledObject can size one group of
an SGLangDeployment on its own (the SGLangDeployment's own `/scale` sizes its elastic group).

A user (or GitOps) creates it next to the SGLangDeployment, naming the deployment and the group; `spec.replicas`,
written through its `/scale` subresource, is then that group's replica count, and the operator writes its status
(the group's serving replicas and pod selector, which the HPA reads). It is an adapter, not a child: the operator
never creates, changes or deletes its spec. When the built-in autoscaler owns the fleet, the adapters are ignored
and their status says so.
"""

from typing import Final

from pydantic import Field

from .base import SpecModel
from .limits import MAX_REPLICAS
from .spec import GROUP_NAME

SCALE_KIND: Final = "SGLangWorkerGroup"
SCALE_LIST_KIND: Final = "SGLangWorkerGroupList"
SCALE_PLURAL: Final = "sglangworkergroups"
SCALE_SINGULAR: Final = "sglangworkergroup"
SCALE_SHORT_NAMES: Final = ("sgwg",)
DEPLOYMENT_NAME = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"


class WorkerGroupScaleSpec(SpecModel):
    deployment: str = Field(
        min_length=1, max_length=40, pattern=DEPLOYMENT_NAME, description="The SGLangDeployment of this namespace."
    )
    group: str = Field(
        min_length=1, max_length=15, pattern=GROUP_NAME, description="The name of one of its spec.workerGroups."
    )
    replicas: int = Field(default=1, ge=0, le=MAX_REPLICAS, description="The group's replica count (/scale).")


class WorkerGroupScaleStatus(SpecModel):
    replicas: int = Field(default=0, description="The group's serving replicas (/scale).")
    selector: str = Field(default="", description="The group's worker pods (/scale's label selector).")
    observed_generation: int | None = None
    in_effect: bool = Field(default=False, description="Whether spec.replicas sizes the group now.")
    message: str = Field(default="", description="Why it is or is not in effect.")
