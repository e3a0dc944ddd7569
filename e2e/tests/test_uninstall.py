"""Uninstall as docs/operations.md ("Uninstall") says, with the kubectl and helm commands it gives.

- In the documented order (delete the SGLangDeployments, `helm uninstall`, delete the operator's namespace, delete
  the CRD) nothing is left: no CR, no child of one, no object or cluster-scoped RBAC of the release, no CRD.
- With the operator removed first, a deleted SGLangDeployment stays on its finalizer (`sglang.ai/operator`) with its
  pods and router running; removing the finalizer as documented lets it go, and the garbage collector deletes its
  children.

Deleting the CRD deletes every SGLangDeployment of the cluster: the first test refuses to run (skips) while
SGLangDeployments of other live namespaces exist, and installs the CRD again when it is done. On a cluster shared
with other runs, give it one of its own:
`LOCALCLUSTER_STATE_DIR=/tmp/sgo-uninstall LOCALCLUSTER_NO_PROMETHEUS=1 pytest e2e/tests/test_uninstall.py`.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
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
from localcluster.paths import REPO_ROOT
from localcluster.procs import wait_for
from sglang_operator import names
from sglang_operator.api.constants import CRD_NAME, GROUP, LABEL_DEPLOYMENT, PLURAL, VERSION

QUICKSTART = REPO_ROOT / "examples" / "quickstart.yaml"
FINALIZER = f"{GROUP}/operator"
HELM_TIMEOUT_S = 120.0
OPERATOR_READY_TIMEOUT_S = 90.0
FLEET_READY_TIMEOUT_S = 180.0
GONE_TIMEOUT_S = 120.0
STUCK_OBSERVATION_S = 10.0  # how long a deletion without an operator is watched not to finish


class Cli:
    """helm and kubectl against the local cluster, as the docs run them."""

    def __init__(self, cluster: ClusterInfo, home: Path) -> None:
        self.kubeconfig = cluster.kubeconfig
        self.env = {
            **os.environ,
            "KUBECONFIG": str(cluster.kubeconfig),
            **{f"HELM_{kind}_HOME": str(home / kind.lower()) for kind in ("CACHE", "CONFIG", "DATA")},
        }

    def helm(self, *args: str) -> str:
        return self._run([str(ensure_helm()), *args])

    def kubectl(self, *args: str) -> str:
        return self._run([str(Path(sys.executable).parent / "kubectl"), "--kubeconfig", str(self.kubeconfig), *args])

    def _run(self, command: list[str]) -> str:
        proc = subprocess.run(command, env=self.env, capture_output=True, text=True, timeout=HELM_TIMEOUT_S)
        assert proc.returncode == 0, f"{' '.join(command)} failed ({proc.returncode}):\n{proc.stderr}"
        return proc.stdout


@pytest.fixture
def cli(cluster: ClusterInfo, tmp_path: Path) -> Cli:
    return Cli(cluster, tmp_path / "helm")


@pytest.fixture
def release(
    cli: Cli, core: client.CoreV1Api, api_client: client.ApiClient, namespace: str
) -> Iterator[tuple[str, str]]:
    """A release watching the test's namespace; whatever a failed test left is removed afterwards."""
    suffix = uuid.uuid4().hex[:5]
    name, operator_namespace = f"sgo-{suffix}", f"e2e-uninstall-operator-{suffix}"
    yield name, operator_namespace
    custom = client.CustomObjectsApi(api_client)
    try:
        for item in custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)["items"]:
            patch = {"metadata": {"finalizers": None}}
            custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, item["metadata"]["name"], patch)
    except ApiException as err:
        if err.status != 404:
            raise
    cli.helm("uninstall", name, "--namespace", operator_namespace, "--ignore-not-found")
    try:
        core.delete_namespace(operator_namespace, propagation_policy="Background")
    except ApiException as err:
        if err.status != 404:
            raise


def install(
    cli: Cli, api_client: client.ApiClient, core: client.CoreV1Api, release: tuple[str, str], app: str
) -> Fleet:
    """The chart for namespace `app`, then the quickstart in it, Ready."""
    name, operator_namespace = release
    install_crd(api_client)
    cli.helm("install", name, str(CHART_DIR), "--namespace", operator_namespace, "--create-namespace",
             "--set-json", f'watchNamespaces=["{app}"]')  # fmt: skip
    wait_for(lambda: any(_ready(p) for p in operator_pods(core, name, operator_namespace)), OPERATOR_READY_TIMEOUT_S,
             f"an operator pod of {name} ready")  # fmt: skip
    cli.kubectl("apply", "--namespace", app, "-f", str(QUICKSTART))
    fleet = Fleet(api_client, app, "quickstart")
    fleet.wait_ready(1, timeout=FLEET_READY_TIMEOUT_S)
    return fleet


def _ready(pod: Any) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def operator_pods(core: client.CoreV1Api, release: str, namespace: str) -> list[Any]:
    selector = f"app.kubernetes.io/instance={release},app.kubernetes.io/name=sglang-operator"
    return list(core.list_namespaced_pod(namespace, label_selector=selector).items)


def children(api_client: client.ApiClient, namespace: str, name: str) -> list[str]:
    """The fleet's pods, Services and Deployments that exist (by label or by name)."""
    core, apps = client.CoreV1Api(api_client), client.AppsV1Api(api_client)
    selector = f"{LABEL_DEPLOYMENT}={name}"
    found = [f"Pod/{p.metadata.name}" for p in core.list_namespaced_pod(namespace, label_selector=selector).items]
    services = {s.metadata.name for s in core.list_namespaced_service(namespace).items}
    found += [f"Service/{s}" for s in sorted(services & {names.router(name), names.workers_service(name)})]
    deployments = {d.metadata.name for d in apps.list_namespaced_deployment(namespace).items}
    found += [f"Deployment/{d}" for d in sorted(deployments & {names.router(name)})]
    return found


def sgld(api_client: client.ApiClient, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        return dict(client.CustomObjectsApi(api_client).get_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, name))  # fmt: skip
    except ApiException as err:
        if err.status == 404:
            return None
        raise


def gone(read: Any) -> bool:
    try:
        read()
    except ApiException as err:
        if err.status == 404:
            return True
        raise
    return False


def fleets_elsewhere(api_client: client.ApiClient, mine: str) -> tuple[list[str], list[tuple[str, str]]]:
    """SGLangDeployments outside namespace `mine`: (in live namespaces, in namespaces being deleted)."""
    try:
        items = client.CustomObjectsApi(api_client).list_cluster_custom_object(GROUP, VERSION, PLURAL)["items"]
    except ApiException as err:
        if err.status == 404:
            return [], []
        raise
    terminating = {
        n.metadata.name for n in client.CoreV1Api(api_client).list_namespace().items if n.status.phase == "Terminating"
    }
    where = [(i["metadata"]["namespace"], i["metadata"]["name"]) for i in items if i["metadata"]["namespace"] != mine]
    return [f"{ns}/{n}" for ns, n in where if ns not in terminating], [(ns, n) for ns, n in where if ns in terminating]


def test_documented_uninstall_leaves_nothing(
    cli: Cli, api_client: client.ApiClient, core: client.CoreV1Api, namespace: str, release: tuple[str, str]
) -> None:
    live, orphans = fleets_elsewhere(api_client, namespace)
    if live:
        pytest.skip(
            f"deleting the CRD would delete SGLangDeployments of other tests: {live[:5]} (run it on a "
            "cluster of its own: LOCALCLUSTER_STATE_DIR=/tmp/sgo-uninstall LOCALCLUSTER_NO_PROMETHEUS=1)"
        )
    custom = client.CustomObjectsApi(api_client)
    for orphan_namespace, orphan in orphans:  # left by finished tests whose operator stopped first (see below)
        with contextlib.suppress(ApiException):
            custom.patch_namespaced_custom_object(GROUP, VERSION, orphan_namespace, PLURAL, orphan,
                                                  {"metadata": {"finalizers": None}})  # fmt: skip
    name, operator_namespace = release
    install(cli, api_client, core, release, namespace)
    rbac = client.RbacAuthorizationV1Api(api_client)
    ext = client.ApiextensionsV1Api(api_client)
    try:
        # 1. The fleets, while the operator runs: their finalizer goes, the garbage collector takes the children.
        cli.kubectl("delete", "sgld", "--all", "-n", namespace)  # the docs' `--all -A`, on this test's namespace
        wait_for(lambda: sgld(api_client, namespace, "quickstart") is None, GONE_TIMEOUT_S, "quickstart deleted")
        wait_for(lambda: not children(api_client, namespace, "quickstart"), GONE_TIMEOUT_S, "its children deleted",
                 on_timeout=lambda: f"; left: {children(api_client, namespace, 'quickstart')}")  # fmt: skip
        # 2. The operator, and its namespace (with the leader Lease).
        cli.helm("uninstall", name, "--namespace", operator_namespace)
        cli.kubectl("delete", "namespace", operator_namespace)
        # 3. The CRD.
        cli.kubectl("delete", "crd", CRD_NAME)

        assert gone(lambda: ext.read_custom_resource_definition(CRD_NAME))
        assert gone(lambda: core.read_namespace(operator_namespace))
        assert not [r.metadata.name for r in rbac.list_cluster_role().items if r.metadata.name.startswith(name)]
        bindings = rbac.list_cluster_role_binding().items
        assert not [b.metadata.name for b in bindings if b.metadata.name.startswith(name)]
        assert not [b.metadata.name for b in rbac.list_namespaced_role_binding(namespace).items]
        assert not children(api_client, namespace, "quickstart")
        leftovers = core.list_namespaced_pod(namespace).items + core.list_namespaced_service(namespace).items
        assert not [x.metadata.name for x in leftovers], "objects left in the fleet's namespace"
    finally:
        install_crd(api_client)  # for the tests that follow


def test_removing_the_operator_first_leaves_crs_on_the_finalizer_until_it_is_cleared(
    cli: Cli, api_client: client.ApiClient, core: client.CoreV1Api, namespace: str, release: tuple[str, str]
) -> None:
    name, operator_namespace = release
    install(cli, api_client, core, release, namespace)
    before = children(api_client, namespace, "quickstart")
    assert any(c.startswith("Pod/") for c in before) and f"Deployment/{names.router('quickstart')}" in before

    cli.helm("uninstall", name, "--namespace", operator_namespace)
    wait_for(lambda: not operator_pods(core, name, operator_namespace), GONE_TIMEOUT_S, "operator pods removed")
    cli.kubectl("delete", "sgld", "quickstart", "--namespace", namespace, "--wait=false")

    # The CR stays, marked for deletion, on the operator's finalizer; its pods and router keep running.
    wait_for(lambda: (sgld(api_client, namespace, "quickstart") or {}).get("metadata", {}).get("deletionTimestamp"),
             30, "the deletion requested")  # fmt: skip
    observed_until = time.monotonic() + STUCK_OBSERVATION_S

    def still_stuck() -> bool:
        cr = sgld(api_client, namespace, "quickstart")
        assert cr is not None, "the CR went away without an operator"
        assert cr["metadata"]["finalizers"] == [FINALIZER], cr["metadata"]
        assert children(api_client, namespace, "quickstart") == before
        return time.monotonic() >= observed_until

    wait_for(still_stuck, STUCK_OBSERVATION_S + 30, "the deletion staying on its finalizer", interval=1.0)
    running = [p for p in core.list_namespaced_pod(namespace, label_selector=f"{LABEL_DEPLOYMENT}=quickstart").items]
    assert running and all(p.status.phase == "Running" for p in running)

    # The documented way out: remove the finalizer; the CR goes and the garbage collector deletes its children.
    cli.kubectl("patch", "sgld", "quickstart", "-n", namespace, "--type", "merge",
                "-p", '{"metadata":{"finalizers":null}}')  # fmt: skip
    wait_for(lambda: sgld(api_client, namespace, "quickstart") is None, GONE_TIMEOUT_S, "the CR deleted")
    wait_for(lambda: not children(api_client, namespace, "quickstart"), GONE_TIMEOUT_S,
             "its pods, router and Services garbage-collected",
             on_timeout=lambda: f"; left: {children(api_client, namespace, 'quickstart')}")  # fmt: skip
