"""The chart's ValidatingAdmissionPolicy refuses, at admission and with the operator's own message, what the
operator's settings refuse at reconcile (issue 29): a `model.cache.hostPath` outside `podPolicy.allowedHostPaths`,
an `autoscaling.prometheusURL` outside `allowedPrometheusURLs`, and a prefill/decode fleet whose KV moves over RDMA
where `podPolicy.rdmaResource` names no RDMA device.

The chart is installed with helm (as in `test_helm_install.py`), paused (`replicas=0`: what is checked is
admission, not the operator) and scoped to the test's namespace (`watchNamespaces`), so that a policy installed for
a moment never refuses another test's CRs; a CR in another namespace is admitted, as it is no concern of this
operator. With the chart's default (empty) settings all three are refused whatever they hold; with the lists of
`tests/support/hostile/cases_urls.py` the policy's CEL and `settings.py` agree on every URL and path of its
tables, and on every transfer backend with the RDMA resource unset, malformed and set. Requests are server-side
dry runs: nothing is stored.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from localcluster.cluster import ClusterInfo
from localcluster.fleet import create_namespace, install_crd
from localcluster.helm import CHART_DIR, ensure_helm
from localcluster.procs import wait_for
from sglang_operator.api.constants import API_VERSION, CRD_NAME, GROUP, KIND, PLURAL, VERSION
from sglang_operator.api.validation import check_pod_policy, parse_spec
from sglang_operator.settings import OperatorSettings, PodPolicy, load_settings, operator_environment
from tests.support.api.pd_cases import pd
from tests.support.hostile.cases_urls import ALLOWED_HOST_PATHS, ALLOWED_URLS, HOST_PATHS, URLS

POLICY_ACTIVE_TIMEOUT_S = 30.0
HELM_TIMEOUT_S = 120.0
URL_FIELD = "spec.autoscaling.prometheusURL"
RDMA_RESOURCE = "rdma/rdma_shared_device_a"
# podPolicy.rdmaResource: unset, not an extended resource name (the operator reads it as none), set
RDMA_RESOURCES = ("", "rdma", RDMA_RESOURCE)
# every transfer backend the CRD admits for a fleet (None: left to the CRD's default, mooncake)
TRANSFER_BACKENDS = (None, "mooncake", "nixl", "mori", "mooncake_tcp", "ascend")


def helm(cluster: ClusterInfo, home: Path, *args: str) -> None:
    """The helm CLI against the local cluster, its cache and config under `home` (as in test_helm_install)."""
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig)}
    env.update({f"HELM_{kind}_HOME": str(home / kind.lower()) for kind in ("CACHE", "CONFIG", "DATA")})
    proc = subprocess.run([str(ensure_helm()), *args], env=env, capture_output=True, text=True, timeout=HELM_TIMEOUT_S)
    assert proc.returncode == 0, f"helm {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}"


def _cr(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": name},
        "spec": {"model": {"path": "m"}, **spec},
    }


def _host_path(path: str) -> dict[str, Any]:
    return {"model": {"path": "m", "cache": {"type": "hostPath", "hostPath": path}}}


def _url(url: str) -> dict[str, Any]:
    return {"autoscaling": {"prometheusURL": url}}


def _pd(backend: str | None) -> dict[str, Any]:
    """A small prefill/decode fleet (tests/support/api/pd_cases.py) whose KV moves over `backend`."""
    return pd({} if backend is None else {"transferBackend": backend})


def _rdma_as_gpu(resource: str) -> dict[str, dict[str, Any]]:
    """A colocated fleet whose GPUs are named as `resource`, and a fleet of groups whose second group names it."""
    groups = [{"name": "a", "parallelism": {"tp": 1}}, {"name": "b", "parallelism": {"tp": 1}, "replicas": 1,
                                                          "resources": {"gpuResourceName": resource}}]  # fmt: skip
    return {"spec.resources": {"resources": {"gpuResourceName": resource}},
            "spec.workerGroups[1].resources": {"workerGroups": groups}}  # fmt: skip


def dry_run(custom: client.CustomObjectsApi, namespace: str, spec: dict[str, Any]) -> str | None:
    """None where the API server admits the CR (server-side dry run), else its message."""
    try:
        custom.create_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, _cr(f"p-{uuid.uuid4().hex[:6]}", spec), dry_run="All"
        )
    except ApiException as err:
        assert err.status in (400, 403, 422), err
        return str(err.body)
    return None


def operator_message(spec: dict[str, Any], settings: OperatorSettings) -> str:
    """What `validate` (and the operator) say about the spec under `settings`: `field: message`."""
    parsed, errors = parse_spec({"model": {"path": "m"}, **spec}, strict=True)
    assert parsed is not None, errors
    found = check_pod_policy(parsed, settings.pod_policy)
    if not found:
        allowed = ", ".join(settings.allowed_prometheus_urls) or "none"
        return (
            f"{URL_FIELD}: is not a Prometheus the operator allows (allowed: {allowed}): it sends that URL no query "
            "and reads no prometheusAuth Secret for it, so the fleet does not autoscale; omit prometheusURL to use the "
            "operator's default Prometheus, or ask the cluster admin to allow it (--allow-prometheus-url)."
        )
    return str(found[0])


@pytest.fixture
def installed(
    cluster: ClusterInfo, api_client: client.ApiClient, core: client.CoreV1Api, tmp_path: Path
) -> Iterator[Any]:
    """install(namespace, *helm args): the chart, paused and scoped to `namespace`; uninstalled afterwards."""
    # The policy reads fields any CRD with spec.disaggregation has: an installed one (any checkout's) serves.
    try:
        crd = client.ApiextensionsV1Api(api_client).read_custom_resource_definition(CRD_NAME)
    except ApiException as err:
        if err.status != 404:
            raise
        install_crd(api_client)
    else:
        if not all(
            "disaggregation" in v.schema.open_apiv3_schema.properties["spec"].properties for v in crd.spec.versions
        ):
            install_crd(api_client)
    releases: list[tuple[str, str]] = []

    def install(watched: str, *args: str) -> None:
        suffix = uuid.uuid4().hex[:5]
        name, namespace = f"sgo-vap-{suffix}", f"e2e-vap-operator-{suffix}"
        releases.append((name, namespace))
        helm(
            cluster, tmp_path, "install", name, str(CHART_DIR), "--namespace", namespace, "--create-namespace",
            "--skip-crds",
            "--set", "replicas=0", "--set-json", f'watchNamespaces=["{watched}"]', *args,
        )  # fmt: skip

    yield install
    for name, namespace in releases:
        helm(cluster, tmp_path, "uninstall", name, "--namespace", namespace, "--ignore-not-found")
        try:
            core.delete_namespace(namespace, propagation_policy="Background")
        except ApiException as err:
            if err.status != 404:
                raise


def _wait_active(custom: client.CustomObjectsApi, namespace: str, refused_spec: dict[str, Any]) -> None:
    """A new policy and its parameters reach the API server's admission within a second or two: wait until a spec
    it must refuse is refused."""
    wait_for(
        lambda: dry_run(custom, namespace, refused_spec) is not None,
        POLICY_ACTIVE_TIMEOUT_S,
        "the chart's ValidatingAdmissionPolicy refusing a hostPath",
    )


def test_default_settings_refuse_host_paths_prometheus_urls_and_rdma_at_admission(
    installed: Any, namespace: str, api_client: client.ApiClient, core: client.CoreV1Api
) -> None:
    custom = client.CustomObjectsApi(api_client)
    elsewhere = f"e2e-vap-elsewhere-{uuid.uuid4().hex[:5]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=elsewhere)))
    try:
        installed(namespace)
        _wait_active(custom, namespace, _host_path("/models"))
        defaults = OperatorSettings()
        for spec in (_host_path("/models/hf-cache"), _url("http://prometheus-operated.monitoring.svc:9090"), _pd(None)):
            message = dry_run(custom, namespace, spec)
            assert message is not None and operator_message(spec, defaults) in message, message
            assert dry_run(custom, elsewhere, spec) is None, "refused outside the watched namespaces"
        assert dry_run(custom, namespace, {"model": {"path": "m", "cache": {"type": "emptyDir"}}}) is None
    finally:
        core.delete_namespace(elsewhere, propagation_policy="Background")


def test_the_policy_and_the_operators_settings_agree_on_every_url_and_path(
    installed: Any, namespace: str, api_client: client.ApiClient
) -> None:
    custom = client.CustomObjectsApi(api_client)
    installed(
        namespace,
        "--set-json", f"allowedPrometheusURLs={list(ALLOWED_URLS)!r}".replace("'", '"'),
        "--set-json", f"podPolicy.allowedHostPaths={list(ALLOWED_HOST_PATHS)!r}".replace("'", '"'),
    )  # fmt: skip
    _wait_active(custom, namespace, _host_path("/models2"))
    settings = OperatorSettings(
        pod_policy=PodPolicy(allowed_host_paths=ALLOWED_HOST_PATHS), allowed_prometheus_urls=ALLOWED_URLS
    )
    disagree = []
    for value, allowed, why in [*((u, a, w) for u, a, w in URLS), *((p, a, w) for p, a, w in HOST_PATHS)]:
        spec = _url(value) if value in {u for u, _, _ in URLS} else _host_path(value)
        message = dry_run(custom, namespace, spec)
        if (message is None) != allowed:
            disagree.append(f"{value} ({why}): settings {'allow' if allowed else 'refuse'}, API server: {message}")
        # refused by the policy (not the CRD): with the operator's message
        elif message is not None and parse_spec({"model": {"path": "m"}, **spec}, strict=True)[1] == []:
            assert operator_message(spec, settings) in message, message
    assert not disagree, "\n".join(disagree)


def test_the_policy_and_the_operator_agree_on_rdma_backends(
    installed: Any, namespace: str, api_client: client.ApiClient, core: client.CoreV1Api
) -> None:
    """One release per `podPolicy.rdmaResource`, each watching its own namespace; the operator judges with what
    its `--rdma-resource` flag becomes (`load_settings`)."""
    custom = client.CustomObjectsApi(api_client)
    namespaces = [namespace]
    for _ in RDMA_RESOURCES[1:]:
        namespaces.append(f"e2e-vap-rdma-{uuid.uuid4().hex[:5]}")
        create_namespace(core, namespaces[-1], {"e2e": "true"})
    try:
        for watched, resource in zip(namespaces, RDMA_RESOURCES, strict=True):
            installed(watched, *(("--set", f"podPolicy.rdmaResource={resource}") if resource else ()))
        for watched in namespaces:
            _wait_active(custom, watched, _host_path("/models"))
        refused: set[tuple[str, str | None]] = set()
        disagree: list[str] = []
        for watched, resource in zip(namespaces, RDMA_RESOURCES, strict=True):
            policy = load_settings(operator_environment(rdma_resource=resource)).pod_policy
            # every transfer backend, and (issue 37) the RDMA device named as the GPUs' at the fleet and at a group
            cases: dict[str | None, dict[str, Any]] = {backend: _pd(backend) for backend in TRANSFER_BACKENDS}
            cases |= _rdma_as_gpu(RDMA_RESOURCE)
            for case, spec in cases.items():
                parsed, errors = parse_spec({"model": {"path": "m"}, **spec}, strict=True)
                assert parsed is not None, errors
                expected = check_pod_policy(parsed, policy)
                message = dry_run(custom, watched, spec)
                if (message is None) != (not expected):
                    disagree.append(f"{case} with {resource!r}: operator {expected}, API server: {message}")
                elif expected:
                    assert str(expected[0]) in message, message
                    refused.add((resource, case))
        assert not disagree, "\n".join(disagree)
        # the table is not vacuous: RDMA backends need the resource, TCP and Ascend's fabric do not; the RDMA resource
        # as the GPUs' is refused where it is the RDMA resource, at the fleet's resources and at a group's
        assert refused == {(r, b) for r in ("", "rdma") for b in (None, "mooncake", "nixl", "mori")} | {
            (RDMA_RESOURCE, "spec.resources"),
            (RDMA_RESOURCE, "spec.workerGroups[1].resources"),
        }
    finally:
        for extra in namespaces[1:]:
            core.delete_namespace(extra, propagation_policy="Background")
