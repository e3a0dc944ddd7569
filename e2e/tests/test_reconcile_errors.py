"""Errors where users look, and server-side apply, on the real API server.

- `monitoring.podMonitor: true` on a cluster without prometheus-operator's CRD: `Degraded` says so
  (ChildKindUnavailable) with exactly one Warning event, however many passes run; installing the CRD clears it and
  the PodMonitor is created.
- Children are server-side applied by the field manager `sglang-operator`: a field the render drops (the router's
  API key env when `router.apiKeySecretRef` is removed) disappears from the live Deployment, while fields another
  manager set (a policy engine's label, an injector's pod-template annotation) stay.
"""

from __future__ import annotations

import base64
import socket
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from localcluster.cluster import ClusterInfo
from localcluster.fleet import Fleet, OperatorProcess, install_crd, simulated_example
from localcluster.procs import log_tail, wait_for
from sglang_operator.controller.reconcile import describe_failure
from sglang_operator.runtime.writer import Writer

PODMONITOR_CRD = "podmonitors.monitoring.coreos.com"
RESYNC_S = 5  # the operator's default resync period


@pytest.fixture
def operator(cluster: ClusterInfo, api_client: client.ApiClient, namespace: str) -> Iterator[OperatorProcess]:
    install_crd(api_client)
    log = cluster.state_dir / "logs" / f"operator-{namespace}.log"
    proc = OperatorProcess(cluster.kubeconfig, [namespace], log, metrics_port=free_port())
    proc.start()
    wait_for(lambda: passes(proc.metrics_url) is not None, 60, "the operator's /metrics",
             on_timeout=lambda: log_tail(log))  # fmt: skip
    yield proc
    proc.stop()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def passes(metrics_url: str) -> float | None:
    """Reconcile passes the operator has run (all results), from its /metrics; None while it does not answer."""
    try:
        text = requests.get(metrics_url, timeout=2).text
    except requests.RequestException:
        return None
    return sum(
        float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
        if line.startswith("sglang_operator_reconcile_duration_seconds_count")
    )  # fmt: skip


def minimal_podmonitor_crd() -> dict[str, Any]:
    """prometheus-operator's PodMonitor kind, reduced to what the API server needs to serve it."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": PODMONITOR_CRD},
        "spec": {
            "group": "monitoring.coreos.com", "scope": "Namespaced",
            "names": {"kind": "PodMonitor", "plural": "podmonitors", "singular": "podmonitor",
                      "listKind": "PodMonitorList"},
            "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}],
        },
    }  # fmt: skip


def crd_absent(ext: client.ApiextensionsV1Api) -> bool:
    try:
        ext.read_custom_resource_definition(PODMONITOR_CRD)
    except ApiException as exc:
        if exc.status == 404:
            return True
        raise
    return False


def events(core: client.CoreV1Api, namespace: str, name: str, reason: str) -> list[Any]:
    return [
        e for e in core.list_namespaced_event(namespace).items
        if e.involved_object.name == name and e.involved_object.kind == "SGLangDeployment" and e.reason == reason
    ]  # fmt: skip


def degraded(fleet: Fleet) -> tuple[str, str, str]:
    cond = fleet.condition("Degraded") or {}
    return cond.get("status", ""), cond.get("reason", ""), cond.get("message", "")


def test_a_missing_podmonitor_crd_is_one_condition_and_one_event_until_the_crd_appears(
    api_client: client.ApiClient, core: client.CoreV1Api, namespace: str, operator: OperatorProcess
) -> None:
    ext = client.ApiextensionsV1Api(api_client)
    if not crd_absent(ext):  # left by an interrupted run of this test: nothing else installs it
        ext.delete_custom_resource_definition(PODMONITOR_CRD)
        wait_for(lambda: crd_absent(ext), 60, f"CRD {PODMONITOR_CRD} deleted")
    fleet = Fleet(api_client, namespace, "monitored")
    fleet.apply(simulated_example("quickstart.yaml", replicas=1, router={"enabled": False},
                                  monitoring={"podMonitor": True}))  # fmt: skip
    wait_for(lambda: degraded(fleet)[:2] == ("True", "ChildKindUnavailable"), 60,
             "Degraded=True ChildKindUnavailable", on_timeout=lambda: f"; {degraded(fleet)}"
             + log_tail(operator.log_path))  # fmt: skip
    assert "PodMonitor monitored not created" in degraded(fleet)[2]
    wait_for(lambda: fleet.status().get("readyReplicas") == 1, 120, "the worker ready (the rest of the pass goes on)",
             on_timeout=lambda: f"; {fleet.status()}")  # fmt: skip

    # Three passes more (counted by the operator's own metrics): still exactly one event for the one problem.
    wait_for(lambda: len(events(core, namespace, "monitored", "ChildKindUnavailable")) >= 1, 30, "the event")
    start = passes(operator.metrics_url)
    wait_for(lambda: passes(operator.metrics_url) >= start + 3, 10 * RESYNC_S, "three more reconcile passes")
    assert len(events(core, namespace, "monitored", "ChildKindUnavailable")) == 1
    assert degraded(fleet)[:2] == ("True", "ChildKindUnavailable")

    ext.create_custom_resource_definition(minimal_podmonitor_crd())
    try:
        wait_for(lambda: degraded(fleet)[0] == "False", 90, "Degraded cleared once the CRD is served",
                 on_timeout=lambda: f"; {degraded(fleet)}" + log_tail(operator.log_path))  # fmt: skip
        custom = client.CustomObjectsApi(api_client)
        monitor = custom.get_namespaced_custom_object("monitoring.coreos.com", "v1", namespace, "podmonitors",
                                                      "monitored")  # fmt: skip
        managers = {m["manager"]: m["operation"] for m in monitor["metadata"]["managedFields"]}
        assert managers.get("sglang-operator") == "Apply", managers
        assert len(events(core, namespace, "monitored", "ChildKindUnavailable")) == 1
    finally:
        ext.delete_custom_resource_definition(PODMONITOR_CRD)
        wait_for(lambda: crd_absent(ext), 60, f"CRD {PODMONITOR_CRD} deleted")


def router_deployment(apps: client.AppsV1Api, namespace: str, name: str) -> Any:
    try:
        return apps.read_namespaced_deployment(f"{name}-router", namespace)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def test_server_side_apply_drops_removed_fields_and_keeps_other_managers_fields(
    api_client: client.ApiClient, core: client.CoreV1Api, namespace: str, operator: OperatorProcess
) -> None:
    apps = client.AppsV1Api(api_client)
    key = base64.b64encode(b"router-secret").decode()
    core.create_namespaced_secret(namespace, {"metadata": {"name": "router-key"}, "data": {"key": key}})
    fleet = Fleet(api_client, namespace, "applied")
    fleet.apply(simulated_example("quickstart.yaml", replicas=0,
                                  router={"apiKeySecretRef": {"name": "router-key", "key": "key"}}))  # fmt: skip

    def container_env() -> list[Any] | None:
        deployment = router_deployment(apps, namespace, "applied")
        return None if deployment is None else deployment.spec.template.spec.containers[0].env

    wait_for(lambda: container_env(), 60, "the router Deployment with the API key env",
             on_timeout=lambda: log_tail(operator.log_path))  # fmt: skip

    # Another manager (a policy engine, an injector) adds its own fields.
    apps.patch_namespaced_deployment(
        "applied-router", namespace,
        {"metadata": {"labels": {"policy.example.com/team": "a"}},
         "spec": {"template": {"metadata": {"annotations": {"injector.example.com/injected": "true"}}}}},
        field_manager="policy-engine",
    )  # fmt: skip

    fleet.patch_spec({"router": {"apiKeySecretRef": None}})
    wait_for(lambda: container_env() is None, 60, "the env dropped from the render removed from the Deployment",
             on_timeout=lambda: f"; env={container_env()}" + log_tail(operator.log_path))  # fmt: skip
    deployment = router_deployment(apps, namespace, "applied")
    assert deployment.metadata.labels.get("policy.example.com/team") == "a"
    assert (deployment.spec.template.metadata.annotations or {}).get("injector.example.com/injected") == "true"
    managers = {(m.manager, m.operation) for m in deployment.metadata.managed_fields}
    assert ("sglang-operator", "Apply") in managers and ("policy-engine", "Update") in managers, managers


def test_a_child_the_api_server_refuses_is_reported_with_its_fields(
    api_client: client.ApiClient, namespace: str
) -> None:
    """A pod the API server refuses (422) gives status the fields it named, from the real `Status.details.causes`,
    and not the values the tenant wrote: what a CR accepted by an older operator, or a rule admission does not know,
    would show in `Degraded` instead of "422 Unprocessable Entity" alone."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "refused", "namespace": namespace},
        "spec": {
            "initContainers": [{"name": "sglang", "image": "busybox:1.36"}],
            "containers": [
                {
                    "name": "sglang",
                    "image": "busybox:1.36",
                    "volumeMounts": [{"name": "cache", "mountPath": "/c", "subPath": "../secret-dir"}],
                }
            ],
            "volumes": [{"name": "cache", "emptyDir": {}}],
        },
    }
    with pytest.raises(ApiException) as refused:
        Writer(api_client).create_pod(pod)
    message = describe_failure("applying the replica plan", refused.value)
    assert message.startswith(
        "applying the replica plan: the API server answered 422 Unprocessable Entity: Pod refused: "
    )
    assert (
        "spec.containers[0].volumeMounts.subPath: Invalid value: must not contain '..' (FieldValueInvalid)" in message
    )
    assert "spec.initContainers[0].name" in message
    assert "secret-dir" not in message
