"""The API server enforces exactly the rules `sglang-operator validate` does: every table case, both ways."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from localcluster.fleet import install_crd
from tests.support.api.pd_cases import pd
from tests.unit.api.test_validation import CASES, with_model
from tests.unit.api.test_worker_groups import FLEET_CASES, GROUP_CASES, expected_error


def _dry_run(api_client: client.ApiClient, namespace: str, spec: dict[str, Any]) -> str | None:
    body = {"apiVersion": "sglang.ai/v1alpha1", "kind": "SGLangDeployment", "metadata": {"name": "probe"},
            "spec": spec}  # fmt: skip
    try:
        client.CustomObjectsApi(api_client).create_namespaced_custom_object(
            "sglang.ai", "v1alpha1", namespace, "sglangdeployments", body, dry_run="All"
        )
    except ApiException as exc:
        return str(exc.body)
    return None


def test_every_rule_is_enforced_at_admission(api_client: client.ApiClient, namespace: str) -> None:
    install_crd(api_client)
    mismatches = []
    for field, fragment, failing, passing in CASES:
        rejected = _dry_run(api_client, namespace, with_model(failing))
        if rejected is None or field not in rejected or fragment not in rejected:
            mismatches.append(f"{field}/{fragment}: failing spec answered {rejected!r}")
        accepted = _dry_run(api_client, namespace, with_model(passing))
        if accepted is not None:
            mismatches.append(f"{field}/{fragment}: passing spec rejected: {accepted}")
    assert not mismatches, "\n".join(mismatches)


@pytest.mark.parametrize("name", ["x" * 41])
def test_long_names_are_rejected(api_client: client.ApiClient, namespace: str, name: str) -> None:
    install_crd(api_client)
    body = {"apiVersion": "sglang.ai/v1alpha1", "kind": "SGLangDeployment", "metadata": {"name": name},
            "spec": {"model": {"path": "m"}}}  # fmt: skip
    with pytest.raises(ApiException) as caught:
        client.CustomObjectsApi(api_client).create_namespaced_custom_object(
            "sglang.ai", "v1alpha1", namespace, "sglangdeployments", body, dry_run="All"
        )
    assert "at most 40 characters" in str(caught.value.body)


def test_every_rule_is_enforced_for_every_worker_group_at_admission(
    api_client: client.ApiClient, namespace: str
) -> None:
    """The CEL that `groups.group_variants` derives, on the real API server: each rule for each group, naming the
    field `validate` names (`spec.workerGroups[0].engine.args` for a rule on the group's item, `spec.workerGroups`
    and the group's name in the message for one over the groups), and the fleet's own group rules."""
    install_crd(api_client)
    mismatches = []
    cases = [(f"{field}: ", message, failing, passing) for rule, failing, passing in GROUP_CASES
             for field, message in [expected_error(rule)]]  # fmt: skip
    cases += [("", fragment, with_model(failing), with_model(passing)) for fragment, failing, passing in FLEET_CASES]
    for field, message, failing, passing in cases:
        rejected = _dry_run(api_client, namespace, failing)
        said = json.loads(rejected).get("message", "") if rejected is not None else ""
        if rejected is None or message not in said or f"{field}" not in said:
            mismatches.append(f"{field}{message[:60]}: failing spec answered {rejected!r}")
        accepted = _dry_run(api_client, namespace, passing)
        if accepted is not None:
            mismatches.append(f"{field}{message[:60]}: passing spec rejected: {accepted}")
    assert not mismatches, "\n".join(mismatches)


def test_a_version_alone_is_admitted_and_stored_without_an_image(api_client: client.ApiClient, namespace: str) -> None:
    """Issue 29: `engine.version: "0.5.9"` alone was refused as contradicting the default image's tag. Now the CRD
    writes no default image into the CR, and the operator derives that release's image (tests/render)."""
    install_crd(api_client)
    body = {"apiVersion": "sglang.ai/v1alpha1", "kind": "SGLangDeployment", "metadata": {"name": "version-alone"},
            "spec": {"model": {"path": "m"}, "engine": {"version": "0.5.9"}}}  # fmt: skip
    stored = client.CustomObjectsApi(api_client).create_namespaced_custom_object(
        "sglang.ai", "v1alpha1", namespace, "sglangdeployments", body, dry_run="All"
    )
    assert stored["spec"]["engine"]["version"] == "0.5.9" and "image" not in stored["spec"]["engine"]
    refused = _dry_run(
        api_client,
        namespace,
        {"model": {"path": "m"}, "engine": {"image": "lmsysorg/sglang:v0.5.21", "version": "0.5.9"}},
    )
    assert refused is not None and "spec.engine.version" in refused and "which is given too" in refused


def test_a_fleet_cannot_switch_between_colocated_and_pd(api_client: client.ApiClient, namespace: str) -> None:
    """Issue 31: the `oldSelf` rule, on update only: the router's mode is fixed when it starts; anything else may
    change, the KV contract too (the operator cuts the fleet over whole)."""
    install_crd(api_client)
    api = client.CustomObjectsApi(api_client)
    crs = ("sglang.ai", "v1alpha1", namespace, "sglangdeployments")

    def create(name: str, spec: dict[str, Any]) -> None:
        body = {"apiVersion": "sglang.ai/v1alpha1", "kind": "SGLangDeployment", "metadata": {"name": name},
                "spec": with_model(spec)}  # fmt: skip
        api.create_namespaced_custom_object(*crs, body)

    create("colocated", {})
    create("disaggregated", pd())
    for name, patch in (("colocated", pd()), ("disaggregated", {"disaggregation": None, "workerGroups": None})):
        with pytest.raises(ApiException) as refused:
            api.patch_namespaced_custom_object(*crs, name, {"spec": patch})
        assert "spec.disaggregation" in str(refused.value.body)
        assert "cannot be added to or removed from an existing fleet" in str(refused.value.body)
    api.patch_namespaced_custom_object(*crs, "disaggregated", {"spec": {"disaggregation": {"pageSize": 32}}})
    api.patch_namespaced_custom_object(*crs, "disaggregated", {"spec": {"router": {"decodePolicy": "least_load"}}})
    for name in ("colocated", "disaggregated"):
        api.delete_namespaced_custom_object(*crs, name)
