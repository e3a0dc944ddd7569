"""The optional InferencePool (Gateway API Inference Extension v1): it selects only the pods carrying the operator's
membership label, targets the engine port, and names the Endpoint Picker with every field the v1 CRD defaults.
The e2e test (e2e/tests/test_inferencepool.py) sends the same render to a real API server with the CRD installed."""

from typing import Any

import pytest

from sglang_operator.api.spec import SGLangDeploymentSpec
from sglang_operator.api.validation import parse_spec
from sglang_operator.render import Owner, render_all, shared_children
from sglang_operator.render.workers import revision_hash

OWNER = Owner(name="demo", namespace="team-a", uid="7f0c2a4e-0000-4000-8000-000000000001")
EPP = {"name": "demo-epp"}


def spec_of(pool: dict[str, Any], **more: Any) -> SGLangDeploymentSpec:
    return SGLangDeploymentSpec.model_validate({"model": {"path": "m"}, "inferencePool": pool, **more})


def pool_of(spec: SGLangDeploymentSpec) -> dict[str, Any]:
    (found,) = [o for o in shared_children(spec, OWNER) if o["kind"] == "InferencePool"]
    return found


def test_off_by_default() -> None:
    spec = SGLangDeploymentSpec.model_validate({"model": {"path": "m"}})
    assert all(o["kind"] != "InferencePool" for o in render_all(spec, OWNER))


def test_selects_the_membership_label_on_the_engine_port() -> None:
    pool = pool_of(spec_of({"enabled": True, "endpointPickerRef": EPP}, engine={"port": 31000}))
    assert pool["apiVersion"] == "inference.networking.k8s.io/v1" and pool["kind"] == "InferencePool"
    assert pool["metadata"]["name"] == "demo" and pool["metadata"]["namespace"] == "team-a"
    assert pool["metadata"]["ownerReferences"][0]["uid"] == OWNER.uid
    assert pool["metadata"]["labels"]["sglang.ai/deployment"] == "demo"
    assert pool["spec"]["selector"] == {
        "matchLabels": {"sglang.ai/deployment": "demo", "sglang.ai/inference-pool": "member"}
    }
    assert pool["spec"]["targetPorts"] == [{"number": 31000}]
    assert pool["spec"]["appProtocol"] == "http"
    # Every field the CRD would default is written out, so the stored object is the rendered one.
    assert pool["spec"]["endpointPickerRef"] == {
        "group": "", "kind": "Service", "name": "demo-epp", "port": {"number": 9002}, "failureMode": "FailClose",
    }  # fmt: skip


def test_the_endpoint_picker_is_configurable() -> None:
    ref = {"name": "gw-epp", "port": 9102, "failureMode": "FailOpen", "group": "example.com", "kind": "Picker"}
    pool = pool_of(spec_of({"enabled": True, "endpointPickerRef": ref, "appProtocol": "kubernetes.io/h2c"}))
    assert pool["spec"]["endpointPickerRef"] == {
        "group": "example.com", "kind": "Picker", "name": "gw-epp", "port": {"number": 9102}, "failureMode": "FailOpen",
    }  # fmt: skip
    assert pool["spec"]["appProtocol"] == "kubernetes.io/h2c"


def test_enabled_without_an_endpoint_picker_is_refused_with_the_crd_rule() -> None:
    spec, errors = parse_spec({"model": {"path": "m"}, "inferencePool": {"enabled": True}})
    assert spec is None
    assert [e.field for e in errors] == ["spec.inferencePool.endpointPickerRef.name"]
    assert "Endpoint Picker" in errors[0].message


@pytest.mark.parametrize(
    "ref",
    [{"name": "Bad_Name"}, {"name": "epp", "port": 0}, {"name": "epp", "port": 65536},
     {"name": "epp", "failureMode": "Sometimes"}, {"name": "epp", "kind": "1x"}],
)  # fmt: skip
def test_values_the_crd_refuses_are_refused(ref: dict[str, Any]) -> None:
    spec, errors = parse_spec({"model": {"path": "m"}, "inferencePool": {"enabled": True, "endpointPickerRef": ref}})
    assert spec is None and errors


def test_toggling_the_pool_restarts_no_worker() -> None:
    off = SGLangDeploymentSpec.model_validate({"model": {"path": "m"}})
    on = spec_of({"enabled": True, "endpointPickerRef": EPP})
    assert revision_hash(off) == revision_hash(on)
