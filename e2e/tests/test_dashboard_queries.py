"""Every query of the Grafana dashboard (manifests/monitoring/dashboard.json) returns data from the local cluster's
Prometheus while a live fleet serves, with the dashboard's variables set to that fleet.

The operator runs as the chart installs it (two pods, scraped through their `prometheus.io/*` annotations), watching
only the test's namespace, with the local Prometheus as its default URL. The fleet serves steady traffic through
its router, sends one request for a model it does not serve (a router error), is scaled from 2 replicas to 1 (a
drain), and then gets its autoscaler; a second CR whose router name is taken by a foreign Service gives the operator
a reconcile error to count. Then each panel's PromQL ($namespace, $name set; $__rate_interval 1m) must return at
least one series, and the dashboard's variable queries must offer the fleet.
"""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from kubernetes import client
from kubernetes.client.rest import ApiException

from localcluster import prometheus
from localcluster.cluster import ClusterInfo
from localcluster.fleet import Fleet, generate, install_crd, simulated_example, steady_load
from localcluster.helm import CHART_DIR, run_helm
from localcluster.procs import wait_for
from sglang_operator import names
from sglang_operator.api.constants import GROUP, PLURAL, VERSION

DASHBOARD = CHART_DIR.parent.parent / "manifests" / "monitoring" / "dashboard.json"
HELM_TIMEOUT_S = 120.0
FLEET_READY_TIMEOUT_S = 240.0
DATA_TIMEOUT_S = 180.0  # scrapes every 5 s; the autoscaler's first decisions and a 1m rate window need a while
RATE_INTERVAL = "1m"
SYSTEM_PROMPT = " ".join(f"You are a careful assistant, rule {i}: answer briefly and cite sources." for i in range(40))


def dashboard_queries() -> list[tuple[str, str]]:
    """(panel title, PromQL) for every target of every panel."""
    doc = json.loads(DASHBOARD.read_text())
    return [(panel["title"], target["expr"]) for panel in doc["panels"] for target in panel.get("targets", [])]


def substitute(expr: str, namespace: str, name: str) -> str:
    text = expr.replace("$__rate_interval", RATE_INTERVAL).replace("$namespace", namespace).replace("$name", name)
    assert "$" not in text.replace("$1", ""), f"a variable the test does not set: {text}"
    return text


def query(base: str, promql: str) -> list[dict[str, Any]]:
    url = f"{base}/api/v1/query?{urllib.parse.urlencode({'query': promql})}"
    with urllib.request.urlopen(url, timeout=10) as resp:
        body = json.loads(resp.read())
    assert body["status"] == "success", body
    return list(body["data"]["result"])


def label_values(base: str, label: str, match: str) -> list[str]:
    url = f"{base}/api/v1/label/{label}/values?{urllib.parse.urlencode({'match[]': match})}"
    with urllib.request.urlopen(url, timeout=10) as resp:
        return list(json.loads(resp.read())["data"])


def helm(cluster: ClusterInfo, home: Path, *args: str) -> str:
    return run_helm(cluster.kubeconfig, home, *args, timeout=HELM_TIMEOUT_S)


@pytest.fixture
def prom(cluster: ClusterInfo) -> str:
    base = prometheus.url(cluster.state_dir)
    if not (base and prometheus.ready(cluster.state_dir)):
        pytest.skip("the local cluster runs without Prometheus (LOCALCLUSTER_NO_PROMETHEUS=1)")
    return base


@pytest.fixture
def chart_operator(
    cluster: ClusterInfo, api_client: client.ApiClient, core: client.CoreV1Api, namespace: str, prom: str,
    tmp_path: Path,
) -> Iterator[str]:  # fmt: skip
    """The chart's operator for the test's namespace, with the local Prometheus as its default URL; its release."""
    suffix = uuid.uuid4().hex[:5]
    release, operator_namespace = f"sgo-{suffix}", f"e2e-dashboard-operator-{suffix}"
    install_crd(api_client)
    home = tmp_path / "helm"
    helm(
        cluster, home, "install", release, str(CHART_DIR), "--namespace", operator_namespace, "--create-namespace",
        "--set-json", f'watchNamespaces=["{namespace}"]', "--set", f"prometheusURL={prom}",
    )  # fmt: skip
    try:
        yield release
    finally:  # the fleets first, while the operator runs to remove their finalizer
        custom = client.CustomObjectsApi(api_client)
        custom.delete_collection_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)
        wait_for(lambda: not custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)["items"], 60,
                 "the test's SGLangDeployments deleted")  # fmt: skip
        helm(cluster, home, "uninstall", release, "--namespace", operator_namespace, "--ignore-not-found")
        try:
            core.delete_namespace(operator_namespace, propagation_policy="Background")
        except ApiException as err:
            if err.status != 404:
                raise


def test_every_dashboard_query_returns_data_for_a_live_fleet(
    api_client: client.ApiClient, core: client.CoreV1Api, namespace: str, prom: str, chart_operator: str
) -> None:
    queries = dashboard_queries()
    assert len(queries) >= 20, queries

    fleet = Fleet(api_client, namespace, "chat")
    fleet.apply(simulated_example("quickstart.yaml", replicas=2))
    fleet.wait_ready(2, timeout=FLEET_READY_TIMEOUT_S)
    router = fleet.router_urls()[0]

    # A router error: a model the fleet does not serve (smg answers 404 model_not_found and counts the error).
    body = {"model": "no-such-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    assert requests.post(f"{router}/v1/chat/completions", json=body, timeout=30).status_code == 404

    # A reconcile error the operator counts: the router's name of a second CR taken by a Service it does not own.
    core.create_namespaced_service(namespace, {
        "metadata": {"name": names.router("taken")},
        "spec": {"ports": [{"port": 30000}], "selector": {"app": "someone-else"}},
    })  # fmt: skip
    taken = Fleet(api_client, namespace, "taken")
    taken.apply(simulated_example("quickstart.yaml", replicas=0))

    def shared_prefix(url: str, index: int) -> requests.Response:  # requests that hit the prefix cache
        return generate(url, f"{SYSTEM_PROMPT} Question {index}: what is the weather like?")

    with steady_load(router, 4, 2000, DATA_TIMEOUT_S + 240, send=shared_prefix) as load:
        # A drain: 2 -> 1 replicas.
        fleet.scale(1)
        fleet.wait_ready(1, timeout=FLEET_READY_TIMEOUT_S)
        # The autoscaler, reading the local Prometheus (the operator's default URL), bounded by maxReplicas 2.
        fleet.patch_spec({"autoscaling": {"enabled": True, "minReplicas": 1, "maxReplicas": 2, "maxGPUs": 2}})

        empty: dict[str, str] = {}

        def every_query_has_data() -> bool:
            empty.clear()
            for title, expr in queries:
                promql = substitute(expr, namespace, "chat")
                if not query(prom, promql):
                    empty[title] = promql
            return not empty

        wait_for(every_query_has_data, DATA_TIMEOUT_S, "every dashboard query returning data", interval=5.0,
                 on_timeout=lambda: f"; empty: {json.dumps(empty, indent=1)}")  # fmt: skip
    assert load.sent > 0 and load.failed == 0, load.errors[:5]

    # The variables' own queries offer this fleet.
    templating = {v["name"]: v for v in json.loads(DASHBOARD.read_text())["templating"]["list"]}
    assert templating["namespace"]["definition"] == "label_values(sglang:num_requests_total, namespace)"
    assert namespace in label_values(prom, "namespace", "sglang:num_requests_total")
    assert "chat" in label_values(prom, "sglang_deployment", f'sglang:num_requests_total{{namespace="{namespace}"}}')
