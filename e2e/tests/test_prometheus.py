"""Prometheus discovers pods through the local API server and labels their series the way the operator queries.

The discovery test needs no node agent: it binds a pod to an unschedulable stand-in node and writes the pod's
status itself (pod IP 127.0.0.1), pointing Prometheus at a metrics endpoint served by the test. The simulator
test runs a real SGLang-simulator pod through the node agent.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import threading
import urllib.parse
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from localcluster import prometheus
from localcluster.cluster import ClusterInfo
from localcluster.procs import wait_for
from sglang_operator.api.spec import AutoscalingWindows, BurstyTraffic, ServiceLevel, SustainedRise
from sglang_operator.prometheus.client import Queries, Target, connect, read_samples

DISCOVERY_TIMEOUT_S = 90.0  # SD watch + one 5 s scrape, with room for a loaded 2-core machine
SGLANG_LABELS = {
    "sglang.ai/deployment": "demo",
    "sglang.ai/replica": "3",
    "sglang.ai/node-rank": "0",
    "sglang.ai/revision": "abc123",
    "sglang.ai/component": "worker",
}
EXPECTED_SERIES_LABELS = {
    "sglang_deployment": "demo",
    "sglang_replica": "3",
    "sglang_node_rank": "0",
    "sglang_revision": "abc123",
    "sglang_component": "worker",
}


def prom_get(base: str, path: str, **params: str) -> Any:
    query = f"?{urllib.parse.urlencode(params)}" if params else ""
    with urllib.request.urlopen(f"{base}{path}{query}", timeout=10) as resp:
        body = json.loads(resp.read())
    assert body["status"] == "success", body
    return body["data"]


@pytest.fixture(scope="module")
def prom_url(cluster: ClusterInfo) -> str:
    base = prometheus.url(cluster.state_dir)
    assert base and prometheus.ready(cluster.state_dir), "the cluster fixture starts Prometheus"
    return base


@pytest.fixture
def metrics_server() -> Iterator[int]:
    """A /custom-metrics endpoint on 127.0.0.1 (the port is returned) standing in for a pod's exporter."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"e2e_probe_value 42\n" if self.path == "/custom-metrics" else b""
            self.send_response(200 if body else 404)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield int(server.server_address[1])
    server.shutdown()
    server.server_close()


@pytest.fixture
def standin_node(core: client.CoreV1Api) -> Iterator[str]:
    """A Node nothing runs on and the scheduler never picks (unschedulable + tainted), so pods bound to it stay."""
    name = "e2e-prometheus-standin"
    taint = client.V1Taint(key="e2e.sglang.ai/standin", value="true", effect="NoSchedule")
    node = client.V1Node(
        metadata=client.V1ObjectMeta(name=name), spec=client.V1NodeSpec(unschedulable=True, taints=[taint])
    )
    try:
        core.create_node(node)
    except ApiException as err:
        assert err.status == 409  # left over from an interrupted run on a kept cluster
    yield name
    core.delete_node(name)


def bound_pod(name: str, node: str, labels: dict[str, str], annotations: dict[str, str]) -> client.V1Pod:
    container = client.V1Container(name="main", image="example.invalid/metrics:1")
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, labels=labels, annotations=annotations),
        spec=client.V1PodSpec(node_name=node, containers=[container]),
    )


def mark_running(core: client.CoreV1Api, namespace: str, name: str, ip: str) -> None:
    status = {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}], "hostIP": ip, "hostIPs": [{"ip": ip}]}
    core.patch_namespaced_pod_status(name, namespace, {"status": status})


def test_prometheus_is_up_with_pod_discovery(prom_url: str, cluster: ClusterInfo) -> None:
    with urllib.request.urlopen(f"{prom_url}/-/ready", timeout=5) as resp:
        assert resp.status == 200
    config = prom_get(prom_url, "/api/v1/status/config")["yaml"]
    assert "role: pod" in config
    assert f"api_server: {cluster.server}" in config
    assert "scrape_interval: 5s" in config


def test_annotated_pods_are_scraped_with_operator_labels(
    prom_url: str, core: client.CoreV1Api, namespace: str, standin_node: str, metrics_server: int
) -> None:
    annotations = {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(metrics_server),
        "prometheus.io/path": "/custom-metrics",
    }
    core.create_namespaced_pod(namespace, bound_pod("scraped", standin_node, SGLANG_LABELS, annotations))
    core.create_namespaced_pod(namespace, bound_pod("ignored", standin_node, SGLANG_LABELS, {}))
    for name in ("scraped", "ignored"):
        mark_running(core, namespace, name, "127.0.0.1")

    def series() -> list[dict[str, Any]]:
        query = f'e2e_probe_value{{namespace="{namespace}"}}'
        return list(prom_get(prom_url, "/api/v1/query", query=query)["result"])

    (sample,) = wait_for(series, DISCOVERY_TIMEOUT_S, "the annotated pod's metric in Prometheus", interval=1.0)
    labels = sample["metric"]
    assert labels["pod"] == "scraped"
    assert labels["node"] == standin_node
    assert labels["instance"] == f"127.0.0.1:{metrics_server}"
    assert {k: labels.get(k) for k in EXPECTED_SERIES_LABELS} == EXPECTED_SERIES_LABELS
    assert sample["value"][1] == "42"

    def dropped() -> bool:  # discovery saw the unannotated pod and the keep rule dropped it
        targets = prom_get(prom_url, "/api/v1/targets", state="any")
        seen = [t["discoveredLabels"] for t in targets["droppedTargets"]]
        return any(
            d.get("__meta_kubernetes_namespace") == namespace and d.get("__meta_kubernetes_pod_name") == "ignored"
            for d in seen
        )

    wait_for(dropped, DISCOVERY_TIMEOUT_S, "the unannotated pod among dropped targets", interval=1.0)
    active = prom_get(prom_url, "/api/v1/targets", state="active")["activeTargets"]
    assert not [t for t in active if t["labels"].get("namespace") == namespace and t["labels"]["pod"] == "ignored"]


def test_restart_keeps_the_url(cluster: ClusterInfo, prom_url: str) -> None:
    assert prometheus.stop_prometheus(cluster.state_dir)
    assert not prometheus.ready(cluster.state_dir)
    assert prometheus.start_prometheus(cluster.state_dir) == prom_url
    assert prometheus.ready(cluster.state_dir)


@pytest.mark.skipif(
    importlib.util.find_spec("localcluster.nodeagent.__main__") is None,
    reason="needs the GPU node agent (localcluster.nodeagent), which runs the simulator pod",
)
def test_simulator_metrics_are_labelled_by_pod(
    prom_url: str, cluster: ClusterInfo, core: client.CoreV1Api, namespace: str
) -> None:
    assert cluster.agent, "the cluster fixture starts the node agent when it exists"
    port = 30000
    container = client.V1Container(
        name="sglang",
        image="lmsysorg/sglang:latest",
        command=["python3", "-m", "sglang.launch_server"],
        args=["--model-path", "e2e/tiny", "--host", "0.0.0.0", "--port", str(port), "--enable-metrics"],
        ports=[client.V1ContainerPort(container_port=port, name="http")],
        resources=client.V1ResourceRequirements(limits={"nvidia.com/gpu": "1"}),
    )
    annotations = {"prometheus.io/scrape": "true", "prometheus.io/port": str(port)}
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name="sim-0", labels=SGLANG_LABELS, annotations=annotations),
        spec=client.V1PodSpec(containers=[container], termination_grace_period_seconds=5),
    )
    core.create_namespaced_pod(namespace, pod)

    def series() -> list[dict[str, Any]]:
        query = f'sglang:num_running_reqs{{namespace="{namespace}"}}'
        return list(prom_get(prom_url, "/api/v1/query", query=query)["result"])

    samples = wait_for(series, 180, "simulator metrics in Prometheus", interval=2.0)
    node = core.read_namespaced_pod("sim-0", namespace).spec.node_name
    for sample in samples:
        labels = sample["metric"]
        assert labels["pod"] == "sim-0"
        assert labels["node"] == node
        assert {k: labels.get(k) for k in EXPECTED_SERIES_LABELS} == EXPECTED_SERIES_LABELS

    # The sustained-rise rule's series is a range answer (a subquery): the reader parses the real server's matrix,
    # at the queries' resolution (here the 5 s scrape interval).
    windows = AutoscalingWindows(rate_seconds=15)
    rise = SustainedRise(step_seconds=5, steps=2)
    queries = Queries(step_seconds=5)

    def trend() -> tuple[tuple[float, float], ...] | None:
        target = Target(namespace, "demo")
        samples, error = read_samples(connect(prom_url, 5.0), target, windows, queries, rise=rise)
        assert error is None and samples is not None, error
        return samples.qps_trend if samples.qps_trend and len(samples.qps_trend) >= 3 else None

    points = wait_for(trend, 60, "the stable rate's series over the rule's span", interval=2.0)
    assert [rate for _, rate in points] == [0.0] * len(points)  # an idle simulator
    assert all(later - earlier == 5.0 for (earlier, _), (later, _) in itertools.pairwise(points))

    # The SLO reading: the simulator's queue-time histogram has a bucket at le="1.0" (as SGLang's), so three
    # requests admitted at once give a share over the SLO of exactly 0 (not "no reading").
    pod_ip = core.read_namespaced_pod("sim-0", namespace).status.pod_ip
    for i in range(3):
        body = json.dumps({"text": f"slo {i}", "sampling_params": {"max_new_tokens": 4}}).encode()
        request = urllib.request.Request(f"http://{pod_ip}:{port}/generate", data=body, method="POST")
        request.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(request, timeout=30) as resp:
            assert resp.status == 200

    def slo_miss_ratio() -> tuple[float] | None:
        target = Target(namespace, "demo")
        short = AutoscalingWindows(quiet_lookback_seconds=60)
        samples, error = read_samples(connect(prom_url, 5.0), target, short, queries, slo=ServiceLevel())
        assert error is None and samples is not None, error
        return None if samples.slo_miss_ratio is None else (samples.slo_miss_ratio,)

    assert wait_for(slo_miss_ratio, 60, "the share of requests over the SLO", interval=2.0) == (0.0,)


@pytest.mark.parametrize("quiet_lookback", [1, 600])
def test_every_default_autoscaler_query_is_valid_promql(prom_url: str, quiet_lookback: int) -> None:
    """The real server parses every query the autoscaler sends (the unit tests only see a fake HTTP layer),
    including the peak-queue subquery at the shortest lookback validation allows (clamped to one step)."""
    windows = AutoscalingWindows(quiet_lookback_seconds=quiet_lookback)
    target = Target("no-such-namespace", "none")
    rise = SustainedRise()
    samples, error = read_samples(
        connect(prom_url, 5.0), target, windows, bursty=BurstyTraffic(), rise=rise, slo=ServiceLevel()
    )
    assert error is None and samples is not None
    assert samples.qps is None and samples.queued_peak is None and samples.qps_trend is None  # valid, no series
    assert samples.slo_miss_ratio is None
    assert samples.bursty_qps is None and samples.bursty_qps_peak is None
