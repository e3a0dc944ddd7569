"""`helm install` of the chart runs an operator that serves the quickstart under nothing but the chart's RBAC.

The node agent runs the chart's image as this checkout's `sglang-operator`, with the pod's service-account
token and the in-cluster API address, so every call the operator (and kopf) makes is authorised by the chart's
ClusterRoles and bindings: the quickstart reaching Ready and being deleted cleanly, with no RBAC denial in the
operators' logs, proves they are sufficient. Clusterwide (the default) and `watchNamespaces` are both installed.
The chart runs two replicas with leader election: both pods run, exactly one holds the Lease (its Role's
permissions suffice), and neither restarts.
The clusterwide operator also sees SGLangDeployments other tests left behind, so, like every operator test, this
one must not run at the same time as another operator on the same cluster (pytest runs the suite serially).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from localcluster.cluster import ClusterInfo
from localcluster.fleet import Fleet, install_crd
from localcluster.helm import CHART_DIR, ensure_helm
from localcluster.nodeagent.layout import Layout
from localcluster.paths import REPO_ROOT, StateLayout
from localcluster.procs import wait_for
from sglang_operator.api.constants import CRD_NAME, GROUP, PLURAL, VERSION
from sglang_operator.api.crdgen import render_crd_yaml

HELM_TIMEOUT_S = 120.0
OPERATOR_READY_TIMEOUT_S = 90.0
FLEET_READY_TIMEOUT_S = 180.0
DELETE_TIMEOUT_S = 60.0
QUICKSTART = REPO_ROOT / "examples" / "quickstart.yaml"
# An RBAC denial names the service account and what it may not do ("pods is forbidden: User
# \"system:serviceaccount:ns:sa\" cannot list resource ..."); kopf only warns when it may not watch CRDs or
# namespaces. Other 403s (e.g. creating a pod in a namespace being deleted, as a clusterwide operator may try for
# CRs earlier tests left behind) are not about RBAC.
RBAC_DENIAL = re.compile(r'User \\?"system:serviceaccount:[^"\\]*\\?" cannot |Not enough permissions')


class Helm:
    """The helm CLI against the local cluster, with its cache and config kept out of $HOME."""

    def __init__(self, binary: Path, kubeconfig: Path, home: Path) -> None:
        self.binary = binary
        self.env = {
            **os.environ,
            "KUBECONFIG": str(kubeconfig),
            **{f"HELM_{kind}_HOME": str(home / kind.lower()) for kind in ("CACHE", "CONFIG", "DATA")},
        }

    def __call__(self, *args: str) -> str:
        proc = subprocess.run(
            [str(self.binary), *args], env=self.env, capture_output=True, text=True, timeout=HELM_TIMEOUT_S
        )
        assert proc.returncode == 0, f"helm {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}"
        return proc.stdout


@pytest.fixture(scope="module")
def helm_binary() -> Path:
    return ensure_helm()


@pytest.fixture
def helm(helm_binary: Path, cluster: ClusterInfo, tmp_path: Path) -> Helm:
    return Helm(helm_binary, cluster.kubeconfig, tmp_path / "helm")


@pytest.fixture
def release(helm: Helm, core: client.CoreV1Api) -> Iterator[tuple[str, str]]:
    """(release, namespace) for one install; uninstalled and deleted afterwards, even when the test failed."""
    suffix = uuid.uuid4().hex[:5]
    name, namespace = f"sgo-{suffix}", f"e2e-helm-operator-{suffix}"
    yield name, namespace
    helm("uninstall", name, "--namespace", namespace, "--ignore-not-found")
    try:
        core.delete_namespace(namespace, propagation_policy="Background")
    except ApiException as err:
        if err.status != 404:
            raise


@pytest.fixture
def app_namespace(namespace: str, api_client: client.ApiClient) -> Iterator[str]:
    """The test namespace; afterwards no SGLangDeployment in it may wait on a finalizer of a removed operator."""
    yield namespace
    custom = client.CustomObjectsApi(api_client)
    try:
        items = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)["items"]
    except ApiException as err:
        if err.status != 404:  # 404: the CRD was never installed
            raise
        items = []
    for item in items:
        name = item["metadata"]["name"]
        try:
            custom.patch_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, name, {"metadata": {"finalizers": None}}
            )
            custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
        except ApiException as err:
            if err.status != 404:
                raise


def operator_pods(core: client.CoreV1Api, release: str, namespace: str) -> list[Any]:
    selector = f"app.kubernetes.io/instance={release},app.kubernetes.io/name=sglang-operator"
    return list(core.list_namespaced_pod(namespace, label_selector=selector).items)


def ready_operator_pod(core: client.CoreV1Api, release: str, namespace: str) -> Any | None:
    for pod in operator_pods(core, release, namespace):
        conditions = {c.type: c.status for c in pod.status.conditions or []}
        if pod.status.phase == "Running" and conditions.get("Ready") == "True" and not pod.metadata.deletion_timestamp:
            return pod
    return None


def operator_log(cluster: ClusterInfo, pod: Any) -> str:
    agent = Layout(StateLayout(cluster.state_dir).nodeagent_dir)
    meta = pod.metadata
    return agent.log_file(meta.namespace, meta.name, meta.uid, "operator", 0).read_text(errors="replace")


def kubectl(cluster: ClusterInfo, *args: str) -> str:
    command = [str(Path(sys.executable).parent / "kubectl"), "--kubeconfig", str(cluster.kubeconfig), *args]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"kubectl {' '.join(args)} failed:\n{proc.stderr}"
    return proc.stdout


@pytest.mark.parametrize("scope", ["clusterwide", "watch-namespaces"])
def test_helm_installed_operator_runs_the_quickstart(
    scope: str,
    helm: Helm,
    release: tuple[str, str],
    app_namespace: str,
    cluster: ClusterInfo,
    api_client: client.ApiClient,
    core: client.CoreV1Api,
) -> None:
    name, operator_namespace = release
    scoped = ["--set-json", f'watchNamespaces=["{app_namespace}"]'] if scope == "watch-namespaces" else []
    # A reused cluster may hold the CRD of an older checkout. Helm 4 server-side-applies the chart's CRD and
    # refuses to change fields another manager set, so first bring it to the generator's version: helm's apply
    # of the (identical) chart copy then succeeds, as it does on a fresh cluster.
    chart_crd = (CHART_DIR / "crds" / "sglang.ai_sglangdeployments.yaml").read_text()
    assert chart_crd == render_crd_yaml(), (
        "the chart's CRD is stale: run `make crds` (tests/unit/api/test_crd.py agrees)"
    )
    install_crd(api_client)
    helm("install", name, str(CHART_DIR), "--namespace", operator_namespace, "--create-namespace", *scoped)

    pod = wait_for(
        lambda: ready_operator_pod(core, name, operator_namespace), OPERATOR_READY_TIMEOUT_S,
        f"operator pod of release {name} Running and Ready",
        on_timeout=lambda: f"; pods={[p.status for p in operator_pods(core, name, operator_namespace)]}",
    )  # fmt: skip
    wait_for(
        lambda: len([p for p in operator_pods(core, name, operator_namespace) if p.status.phase == "Running"]) == 2,
        OPERATOR_READY_TIMEOUT_S, f"both operator pods of release {name} Running",
    )  # fmt: skip
    container = pod.spec.containers[0]
    assert (container.image, container.command) == (
        "ghcr.io/sglang-operator/sglang-operator:0.1.0",
        ["sglang-operator"],
    )
    assert pod.spec.service_account_name == f"{name}-sglang-operator"

    kubectl(cluster, "apply", "--namespace", app_namespace, "-f", str(QUICKSTART))
    fleet = Fleet(api_client, app_namespace, "quickstart")
    fleet.wait_ready(1, timeout=FLEET_READY_TIMEOUT_S)
    status = fleet.status()
    assert status["readyReplicas"] == 1
    assert (fleet.condition("Ready") or {}).get("status") == "True"

    # Deleting the CR needs the operator's finalizer handling (a patch under the chart's RBAC) to finish.
    kubectl(cluster, "delete", "--namespace", app_namespace, "-f", str(QUICKSTART), "--wait=false")
    custom = client.CustomObjectsApi(api_client)

    def cr_gone() -> bool:
        try:
            custom.get_namespaced_custom_object(GROUP, VERSION, app_namespace, PLURAL, "quickstart")
        except ApiException as err:
            if err.status == 404:
                return True
            raise
        return False

    wait_for(cr_gone, DELETE_TIMEOUT_S, "quickstart deleted (operator finalizer removed)")

    pods = operator_pods(core, name, operator_namespace)
    assert len(pods) == 2
    holder = (
        client.CoordinationV1Api(api_client)
        .read_namespaced_lease(f"{name}-sglang-operator-leader", operator_namespace)
        .spec.holder_identity
    )
    assert [p.metadata.name for p in pods if holder.startswith(f"{p.metadata.name}_")], f"no pod holds it: {holder}"
    for current in pods:
        log = operator_log(cluster, current)
        denied = [line for line in log.splitlines() if RBAC_DENIAL.search(line)]
        assert not denied, f"{current.metadata.name} was refused API calls:\n" + "\n".join(denied[:20])
        assert sum(cs.restart_count for cs in current.status.container_statuses or []) == 0

    helm("uninstall", name, "--namespace", operator_namespace)
    wait_for(lambda: not operator_pods(core, name, operator_namespace), DELETE_TIMEOUT_S, "operator pods removed")
    rbac = client.RbacAuthorizationV1Api(api_client)
    assert not [r for r in rbac.list_cluster_role().items if r.metadata.name.startswith(name)]
    # Helm never deletes CRDs: existing SGLangDeployments elsewhere survive an uninstall.
    assert client.ApiextensionsV1Api(api_client).read_custom_resource_definition(CRD_NAME)
