"""Every query of the Grafana dashboard (manifests/monitoring/dashboard.json) returns data from the local cluster's
Prometheus while a live fleet serves, with the dashboard's variables set to that fleet.

The operator runs as the chart installs it (two pods, scraped through their `prometheus.io/*` annotations), watching
only the test's namespace, with the local Prometheus as its default URL. The fleet serves steady traffic through
its router, sends one request for a model it does not serve (a router error), is scaled from 2 replicas to 1 (a
drain), and then gets its autoscaler; a second CR whose router name is taken by a foreign Service gives the operator
a reconcile error to count. Then each panel's PromQL ($namespace, $name set; $__rate_interval 1m) must return at
least one series, and the dashboard's variable queries must offer the fleet.

The panels of the row "Prefill/decode" show each role of a prefill/decode fleet and have no series for a colocated
one: they are read for examples/pd-small.yaml, run beside the colocated fleet under the same operator with a little
traffic of its own, and must return nothing for the colocated fleet. smg counts rendezvous failures only from the
first one on, so the test makes one: a decode re-registered with a closed bootstrap port fails smg's registration
probe (a decode never serves that port, so it keeps serving), and the operator puts it back as it was.
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
from sglang_operator.api.constants import DEFAULT_ROUTER_METRICS_PORT, GROUP, PLURAL, VERSION

DASHBOARD = CHART_DIR.parent.parent / "manifests" / "monitoring" / "dashboard.json"
HELM_TIMEOUT_S = 120.0
FLEET_READY_TIMEOUT_S = 240.0
DATA_TIMEOUT_S = 180.0  # scrapes every 5 s; the autoscaler's first decisions and a 1m rate window need a while
RATE_INTERVAL = "1m"
SYSTEM_PROMPT = " ".join(f"You are a careful assistant, rule {i}: answer briefly and cite sources." for i in range(40))
PD_ROW = "Prefill/decode"  # its panels read the prefill/decode fleet; every other panel the colocated one
CLOSED_PORT = 1  # nothing listens there on a pod's IP: smg's bootstrap probe is refused


def dashboard_queries() -> list[tuple[str, str, str]]:
    """(row title, panel title, PromQL) for every target of every panel; a panel belongs to the row above it."""
    row, queries = "", []
    for panel in json.loads(DASHBOARD.read_text())["panels"]:
        if panel["type"] == "row":
            row = panel["title"]
        queries += [(row, panel["title"], target["expr"]) for target in panel.get("targets", [])]
    return queries


def test_panels_are_listed_in_layout_order_under_their_rows() -> None:
    """Grafana shows a panel under the row above it on the grid; the list order must say the same, as
    `dashboard_queries` reads it, and no two panels may overlap."""
    panels = json.loads(DASHBOARD.read_text())["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    positions = [(p["gridPos"]["y"], p["gridPos"]["x"]) for p in panels]
    assert positions == sorted(positions)
    cells = [(x, y) for p in panels for x in range(p["gridPos"]["x"], p["gridPos"]["x"] + p["gridPos"]["w"])
             for y in range(p["gridPos"]["y"], p["gridPos"]["y"] + p["gridPos"]["h"])]  # fmt: skip
    assert len(set(cells)) == len(cells)
    pd_panels = [title for row, title, _ in dashboard_queries() if row == PD_ROW]
    assert len(set(pd_panels)) >= 6, pd_panels


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


def router_workers(router: str) -> list[dict[str, Any]]:
    return list(requests.get(f"{router}/workers", timeout=5).json().get("workers", []))


def rendezvous_failures(router_pod_ip: str) -> float:
    text = requests.get(f"http://{router_pod_ip}:{DEFAULT_ROUTER_METRICS_PORT}/metrics", timeout=5).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("smg_pd_rendezvous_failures_total{"))  # fmt: skip


def fail_a_bootstrap_probe(fleet: Fleet) -> str:
    """Re-register one decode on one router pod with a closed bootstrap port, until smg counts the refused probe
    (`smg_pd_rendezvous_failures_total{leg="decode", phase="probe"}`); the decode's URL. The operator, the routers'
    only source of membership, puts the entry back (without a port) within a resync."""
    router_pod = next(p for p in fleet.pods("router") if p.status.pod_ip)
    router = f"http://{router_pod.status.pod_ip}:30000"
    url: str = min(w["url"] for w in router_workers(router) if w.get("worker_type") == "decode")
    body: dict[str, Any] = {"url": url, "runtime": "sglang", "worker_type": "decode", "bootstrap_port": CLOSED_PORT}

    def probe_failed() -> bool:
        if rendezvous_failures(router_pod.status.pod_ip) > 0:
            return True
        entry = next((w for w in router_workers(router) if w["url"] == url), None)
        if entry is not None and entry.get("bootstrap_port") != CLOSED_PORT:
            requests.delete(f"{router}/workers/{entry['id']}", timeout=5)
        # 202; or 409 while smg still removes the entry, or once the operator put it back first: the next round
        requests.post(f"{router}/workers", json=body, timeout=5)
        return False

    wait_for(probe_failed, 30, "smg counting a refused bootstrap probe", interval=1.0)
    return url


def listed_as_a_plain_decode(fleet: Fleet, url: str) -> bool:
    """Every router pod lists `url` once, as a decode without a bootstrap port (as the operator registers it)."""
    routers = fleet.router_urls()
    return bool(routers) and all(
        [(w.get("worker_type"), w.get("bootstrap_port")) for w in router_workers(r) if w["url"] == url]
        == [("decode", None)]
        for r in routers
    )


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
    pd = Fleet(api_client, namespace, "pd")  # starts beside the colocated fleet
    pd.apply(simulated_example("pd-small.yaml"))
    fleet.wait_ready(2, timeout=FLEET_READY_TIMEOUT_S)
    router = fleet.router_urls()[0]
    pd.wait_ready(3, timeout=FLEET_READY_TIMEOUT_S)
    decode = fail_a_bootstrap_probe(pd)
    pd_router = pd.router_urls()[0]

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

    empty: dict[str, str] = {}

    def every_query_has_data() -> bool:
        empty.clear()
        for row, title, expr in queries:
            promql = substitute(expr, namespace, "pd" if row == PD_ROW else "chat")
            if not query(prom, promql):
                empty[f"{row}: {title}"] = promql
        return not empty

    with steady_load(router, 4, 2000, DATA_TIMEOUT_S + 240, send=shared_prefix) as load:
        # A drain: 2 -> 1 replicas.
        fleet.scale(1)
        # Meanwhile the operator lists the decode as it was; then the prefill/decode fleet gets traffic of its own.
        wait_for(
            lambda: listed_as_a_plain_decode(pd, decode),
            60,
            f"every router listing {decode} as it was",
            interval=0.5,
            on_timeout=lambda: f"; routers={[router_workers(u) for u in pd.router_urls()]}",
        )
        with steady_load(pd_router, 2, 1000, DATA_TIMEOUT_S + 240) as pd_load:
            fleet.wait_ready(1, timeout=FLEET_READY_TIMEOUT_S)
            # The autoscaler, reading the local Prometheus (the operator's default URL), bounded by maxReplicas 2.
            fleet.patch_spec({"autoscaling": {"enabled": True, "minReplicas": 1, "maxReplicas": 2, "maxGPUs": 2}})
            wait_for(every_query_has_data, DATA_TIMEOUT_S, "every dashboard query returning data", interval=5.0,
                     on_timeout=lambda: f"; empty: {json.dumps(empty, indent=1)}")  # fmt: skip
    assert load.sent > 0 and load.failed == 0, load.errors[:5]
    assert pd_load.sent > 0 and pd_load.failed == 0, pd_load.errors[:5]

    # The per-role panels show nothing of a colocated fleet (its servers' engine_type is `unified`).
    colocated = {title: promql for row, title, expr in queries if row == PD_ROW
                 if query(prom, promql := substitute(expr, namespace, "chat"))}  # fmt: skip
    assert not colocated, colocated

    # The variables' own queries offer this fleet.
    templating = {v["name"]: v for v in json.loads(DASHBOARD.read_text())["templating"]["list"]}
    assert templating["namespace"]["definition"] == "label_values(sglang:num_requests_total, namespace)"
    assert namespace in label_values(prom, "namespace", "sglang:num_requests_total")
    offered = label_values(prom, "sglang_deployment", f'sglang:num_requests_total{{namespace="{namespace}"}}')
    assert {"chat", "pd"} <= set(offered), offered
