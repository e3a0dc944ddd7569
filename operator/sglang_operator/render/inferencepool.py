"""An optional InferencePool (Gateway API Inference Extension v1) over the fleet's registered workers.

The selector matches the fleet's deployment label and `sglang.ai/inference-pool: member`, which the reconciler keeps
on registered rank-0 worker pods only (`controller/inferencepool.py`): ranks >= 1 of a multi-node replica answer no
requests, and a replica stops being a member before its drain starts. The pool's one target port is the engine's
HTTP port; the Endpoint Picker is named as `spec.inferencePool.endpointPickerRef` says, with every field the v1 CRD
defaults written out, so what the API server stores is what was rendered.
"""

from typing import Any

from .. import names
from ..api.constants import COMPONENT_WORKER, LABEL_DEPLOYMENT
from ..api.inferencepool import API_VERSION, KIND, LABEL_INFERENCE_POOL, POOL_MEMBER
from ..api.spec import SGLangDeploymentSpec
from .meta import Owner, child_labels, object_meta


def pool_selector(owner: Owner) -> dict[str, str]:
    """The labels an InferencePool member carries: the fleet's, and the membership label the operator owns."""
    return {LABEL_DEPLOYMENT: owner.name, LABEL_INFERENCE_POOL: POOL_MEMBER}


def inference_pool(spec: SGLangDeploymentSpec, owner: Owner) -> dict[str, Any]:
    ref = spec.inference_pool.endpoint_picker_ref
    if ref.name is None:  # validation refuses it; a render never emits an object the API server would refuse
        raise ValueError("spec.inferencePool.endpointPickerRef.name is required when the InferencePool is enabled")
    picker: dict[str, Any] = {"group": ref.group, "kind": ref.kind, "name": ref.name, "failureMode": ref.failure_mode}
    picker["port"] = {"number": ref.port}
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": object_meta(owner, names.inference_pool(owner.name), child_labels(owner, COMPONENT_WORKER)),
        "spec": {
            "selector": {"matchLabels": pool_selector(owner)},
            "targetPorts": [{"number": spec.engine.port}],
            "appProtocol": spec.inference_pool.app_protocol,
            "endpointPickerRef": picker,
        },
    }
