"""`spec.inferencePool`: an InferencePool (Gateway API Inference Extension, `inference.networking.k8s.io/v1`) for
the fleet's workers, so a Gateway with an Endpoint Picker (EPP) can route to them beside, or instead of, the router.

The pool selects worker pods by a label the operator owns (`LABEL_INFERENCE_POOL`): set on a replica's rank-0 pod
once every router lists it (with the router off: once it is ready), removed before its drain starts. The pool
therefore never offers a replica the routers do not, and a Gateway stops picking a replica no later than the router.

The Endpoint Picker is not deployed by the operator (it is the gateway implementation's, with its own image and
configuration); `endpointPickerRef` names it, field for field as the v1 CRD spells it.
"""

from typing import Literal

from pydantic import Field

from .base import SpecModel
from .constants import GROUP
from .podtypes import DNS_SUBDOMAIN

API_GROUP = "inference.networking.k8s.io"
API_VERSION = f"{API_GROUP}/v1"
KIND = "InferencePool"

LABEL_INFERENCE_POOL = f"{GROUP}/inference-pool"
"""On a rank-0 worker pod while the pool may send it requests; the pool's selector matches it."""
POOL_MEMBER = "member"

DEFAULT_EPP_PORT = 9002
"""The Endpoint Picker's ext-proc (gRPC) port in the Inference Extension's own manifests."""

_KIND_PATTERN = r"^[a-zA-Z]([-a-zA-Z0-9]*[a-zA-Z0-9])?$"
_GROUP_PATTERN = r"^$|" + DNS_SUBDOMAIN


class EndpointPickerRef(SpecModel):
    """The InferencePool's `spec.endpointPickerRef`: the Endpoint Picker extension the Gateway asks which pod of
    the pool serves a request."""

    name: str | None = Field(
        default=None,
        min_length=1,
        max_length=253,
        pattern=DNS_SUBDOMAIN,
        description="The Endpoint Picker's object (a Service by default) in the CR's namespace; required when "
        "inferencePool.enabled.",
    )
    kind: str = Field(default="Service", min_length=1, max_length=63, pattern=_KIND_PATTERN)
    group: str = Field(default="", max_length=253, pattern=_GROUP_PATTERN, description='"" is the core API group.')
    port: int = Field(
        default=DEFAULT_EPP_PORT, ge=1, le=65535, description="The Endpoint Picker Service's port (not its target)."
    )
    failure_mode: Literal["FailOpen", "FailClose"] = Field(
        default="FailClose", description="What the Gateway does while the Endpoint Picker does not answer."
    )


class InferencePoolSpec(SpecModel):
    enabled: bool = Field(default=False, description="Render an InferencePool selecting the registered workers.")
    endpoint_picker_ref: EndpointPickerRef = Field(default_factory=EndpointPickerRef)
    app_protocol: Literal["http", "kubernetes.io/h2c"] = Field(
        default="http", description="The workers' protocol on the engine port, as the Gateway speaks it."
    )
