"""The API server enforces exactly the rules `sglang-operator validate` does: every table case, both ways."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from localcluster.fleet import install_crd
from tests.test_validation import CASES, with_model


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
