"""The real HPA controller scales an SGLangDeployment through `/scale` from a Prometheus QPS metric served by
prometheus-adapter, and the operator drains the replicas the HPA removes without failing a request.

The pipeline is a production one, part for part: simulator workers export `sglang:num_requests_total`; Prometheus
(built from Go modules) scrapes them; prometheus-adapter (built from Go modules, `localcluster.adapter`) serves
their request rate as the external metric `sglang_requests_per_second` behind the API server's aggregator
(front-proxy certificates, an APIService); kube-controller-manager's horizontal-pod-autoscaler controller (15 s
sync, its default) reads it and writes `spec.replicas` through the CRD's scale subresource; the operator, with its
own autoscaler off, creates, registers and drains replicas.

It runs on a cluster of its own (one node, its own state dir, stopped at the end): the APIService is cluster-wide,
and the shared cluster may have been started before the API server had the aggregator's flags.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from localcluster import adapter, cluster
from localcluster.cluster import ClusterInfo
from localcluster.fleet import FAST_SIM_ENV, Fleet, OperatorProcess, create_namespace, install_crd, steady_load
from localcluster.paths import StateLayout
from localcluster.pki import Pki
from localcluster.procs import wait_for
from sglang_operator.api.constants import GROUP, KIND, VERSION

METRIC = "sglang_requests_per_second"
TARGET_PER_REPLICA = 1.0  # requests per second one replica should take: the HPA's AverageValue target
HIGH_QPS, LOW_QPS = 2.5, 0.4  # ceil(2.5 / 1) = 3 replicas (the maximum); ceil(0.4 / 1) = 1
RATE_WINDOW = "30s"  # six scrapes at the local Prometheus' 5 s interval
SCALE_TIMEOUT_S = 240.0  # rate window + an HPA sync or two + start-up, on a busy 2-core machine


@pytest.fixture(scope="module")
def own_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterInfo]:
    layout = StateLayout(tmp_path_factory.mktemp("hpa-cluster"))
    try:
        info = cluster.up(layout, agent=True, with_prometheus=True, nodes=1, gpus_per_node=8, log=False).info
        yield info
    finally:
        cluster.down(layout)


@pytest.fixture(scope="module")
def api(own_cluster: ClusterInfo) -> client.ApiClient:
    return config.new_client_from_config(str(own_cluster.kubeconfig))


@pytest.fixture(scope="module")
def metrics_api(own_cluster: ClusterInfo, api: client.ApiClient) -> Iterator[str]:
    """prometheus-adapter registered as external.metrics.k8s.io; yields the APIService's name."""
    assert own_cluster.prometheus_url, "the HPA cluster runs Prometheus"
    layout = StateLayout(own_cluster.state_dir)
    namespace = "metrics-adapter"
    core = client.CoreV1Api(api)
    create_namespace(core, namespace, {})
    rule = adapter.requests_rate_rule(METRIC, RATE_WINDOW)
    port = adapter.start(layout, own_cluster.prometheus_url, namespace, [rule])
    service, api_service = adapter.registration(namespace, port, Pki(layout.pki).ca_crt.read_bytes())
    core.create_namespaced_service(namespace, service)
    registration = client.ApiregistrationV1Api(api)
    registration.create_api_service(api_service)
    name = api_service["metadata"]["name"]

    def available() -> bool:
        conditions = registration.read_api_service(name).status.conditions or []
        return any(c.type == "Available" and c.status == "True" for c in conditions)

    wait_for(available, 120, f"APIService {name} Available", interval=1.0,
             on_timeout=lambda: f"; {registration.read_api_service(name).status}")  # fmt: skip
    try:
        yield name
    finally:
        registration.delete_api_service(name)
        adapter.stop(layout)


def deployment() -> dict[str, Any]:
    """One replica, autoscaler off (the HPA owns `/scale`), fast simulator workers."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "metadata": {"name": "chat"},
        "spec": {
            "model": {"path": "Qwen/Qwen2.5-0.5B-Instruct"},
            "engine": {"env": FAST_SIM_ENV},
            "replicas": 1,
            "updateStrategy": {"drainTimeoutSeconds": 60},
        },
    }  # fmt: skip


def hpa(name: str) -> dict[str, Any]:
    """The HPA of examples/hpa.yaml, with the scale-down window at 0 so the test need not wait five minutes."""
    return {
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": name},
        "spec": {
            "scaleTargetRef": {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "name": name},
            "minReplicas": 1, "maxReplicas": 3,
            "metrics": [{"type": "External", "external": {
                "metric": {"name": METRIC, "selector": {"matchLabels": {"sglang_deployment": name}}},
                "target": {"type": "AverageValue", "averageValue": str(TARGET_PER_REPLICA)},
            }}],
            "behavior": {
                "scaleUp": {"stabilizationWindowSeconds": 0},
                "scaleDown": {"stabilizationWindowSeconds": 0,
                              "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}]},
            },
        },
    }  # fmt: skip


def external_metric(api: client.ApiClient, namespace: str, name: str) -> float | None:
    """The metric as the HPA controller reads it: through the aggregator, from the adapter."""
    found = client.CustomObjectsApi(api).list_namespaced_custom_object(
        adapter.EXTERNAL_GROUP, adapter.EXTERNAL_VERSION, namespace, METRIC, label_selector=f"sglang_deployment={name}"
    )
    items = found.get("items") or []
    return _quantity(items[0]["value"]) if items else None


def _quantity(value: str) -> float:
    if value.endswith("m"):
        return float(value[:-1]) / 1000
    return float(value)


def test_hpa_scales_through_scale_and_the_operator_drains_what_it_removes(
    own_cluster: ClusterInfo, api: client.ApiClient, metrics_api: str, tmp_path: Path
) -> None:
    core = client.CoreV1Api(api)
    namespace = "hpa"
    create_namespace(core, namespace, {})
    install_crd(api)
    operator = OperatorProcess(own_cluster.kubeconfig, [namespace], tmp_path / "operator.log").start()
    autoscaling = client.AutoscalingV2Api(api)
    fleet = Fleet(api, namespace, "chat")
    try:
        fleet.apply(deployment())
        fleet.wait_ready(1, timeout=120)
        autoscaling.create_namespaced_horizontal_pod_autoscaler(namespace, hpa("chat"))
        router = fleet.router_urls()[0]

        def hpa_state() -> str:
            status = autoscaling.read_namespaced_horizontal_pod_autoscaler("chat", namespace).status
            conditions = [(c.type, c.status, c.reason, c.message) for c in status.conditions or []]
            return f"; hpa desired={status.desired_replicas} current={status.current_metrics} {conditions}"

        # Up: 2.5 requests/s at a target of 1 per replica -> the HPA writes 3 through /scale.
        with steady_load(router, HIGH_QPS, max_requests=700, max_seconds=SCALE_TIMEOUT_S + 60) as high:
            wait_for(lambda: (external_metric(api, namespace, "chat") or 0.0) > 1.5, SCALE_TIMEOUT_S,
                     "the adapter serving the fleet's request rate", interval=2.0, on_timeout=hpa_state)  # fmt: skip
            wait_for(lambda: fleet.get()["spec"]["replicas"] == 3, SCALE_TIMEOUT_S, "the HPA scaling to 3",
                     interval=2.0, on_timeout=hpa_state)  # fmt: skip
            fleet.wait_ready(3, timeout=120)
        assert high.failed == 0, high.errors[:5]
        scale = client.CustomObjectsApi(api).get_namespaced_custom_object_scale(GROUP, VERSION, namespace,
                                                                               "sglangdeployments", "chat")  # fmt: skip
        assert scale["spec"]["replicas"] == 3 and scale["status"]["replicas"] == 3

        # Down: 0.4 requests/s -> the HPA writes 1; the operator drains two replicas while requests keep coming.
        workers_before = {p.metadata.name for p in fleet.pods()}
        drained: set[str] = set()

        def scaled_down() -> bool:
            for pod in fleet.pods():
                if "sglang.ai/draining-since" in (pod.metadata.annotations or {}):
                    drained.add(pod.metadata.name)
            return fleet.get()["spec"]["replicas"] == 1 and len(fleet.pods()) == 1

        with steady_load(router, LOW_QPS, max_requests=200, max_seconds=SCALE_TIMEOUT_S + 60) as low:
            wait_for(scaled_down, SCALE_TIMEOUT_S, "the HPA scaling to 1 and the operator removing two replicas",
                     interval=0.5, on_timeout=hpa_state)  # fmt: skip
            fleet.wait_ready(1, timeout=120)
        assert low.failed == 0, low.errors[:5]
        assert low.sent > 0
        (survivor,) = {p.metadata.name for p in fleet.pods()}
        assert drained == workers_before - {survivor}, (drained, workers_before, survivor)  # drained, not killed
        events = core.list_namespaced_event(namespace, field_selector="involvedObject.name=chat").items
        assert any(e.reason == "ScalingDown" for e in events), [e.reason for e in events]
    finally:
        operator.stop()


def test_front_proxy_ca_is_what_extension_servers_trust(own_cluster: ClusterInfo, api: client.ApiClient) -> None:
    """The API server publishes the front proxy's CA for extension API servers (what the adapter reads)."""
    cm = client.CoreV1Api(api).read_namespaced_config_map("extension-apiserver-authentication", "kube-system")
    ca = Pki(StateLayout(own_cluster.state_dir).pki).front_proxy_ca_crt.read_text()
    assert cm.data["requestheader-client-ca-file"].strip() == ca.strip()
    assert "front-proxy-client" in cm.data["requestheader-allowed-names"]
