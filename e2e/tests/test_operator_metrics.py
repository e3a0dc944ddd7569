"""The operator's own metrics at `/metrics`, read directly from two leader-electing processes and scraped by the
local Prometheus from the two pods of a `helm install`.

Direct: after a fleet reconciles, the leader reports `sglang_operator_leader` 1, reconcile durations and
Kubernetes requests by verb and code; the standby reports leader 0 and no reconcile at all (it only reads the
Lease). Through the chart: its pods carry the `prometheus.io/*` annotations the local Prometheus discovers pods
by, and every replica serves the port the chart's metrics Service names, so Prometheus has one leader series per
pod, summing to 1, the 1 on the pod named by the Lease. The chart's operator watches only an empty namespace, so
it never touches what other tests leave behind.
"""

from __future__ import annotations

import json
import os
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
from prometheus_client.parser import text_string_to_metric_families

from localcluster import prometheus
from localcluster.cluster import ClusterInfo
from localcluster.fleet import Fleet, OperatorProcess, install_crd, simulated_example
from localcluster.helm import CHART_DIR, run_helm
from localcluster.procs import pick_port, wait_for

LEASE = "sglang-operator-leader"
HELM_TIMEOUT_S = 120.0
SCRAPE_TIMEOUT_S = 120.0  # pod start + service discovery + a 5 s scrape on a loaded 2-core machine


def samples(url: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Every sample of a /metrics page by sample name (`..._count`, `..._total`, ...)."""
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(requests.get(url, timeout=5).text):
        for sample in family.samples:
            found.setdefault(sample.name, []).append((dict(sample.labels), float(sample.value)))
    return found


def value(page: dict[str, list[tuple[dict[str, str], float]]], name: str, **labels: str) -> float:
    return sum(v for lbls, v in page.get(name, []) if labels.items() <= lbls.items())


def lease_holder(api: client.ApiClient, namespace: str, name: str = LEASE) -> str:
    try:
        return str(client.CoordinationV1Api(api).read_namespaced_lease(name, namespace).spec.holder_identity or "")
    except ApiException as err:
        if err.status == 404:
            return ""
        raise


@pytest.fixture
def operators(cluster: ClusterInfo, api_client: client.ApiClient, namespace: str) -> Iterator[list[OperatorProcess]]:
    install_crd(api_client)
    first = pick_port(19181)
    ports = [first, pick_port(19182, {first})]
    procs = [
        OperatorProcess(
            cluster.kubeconfig, [namespace], cluster.state_dir / "logs" / f"operator-{namespace}-{name}.log",
            lease_namespace=namespace, identity=name, metrics_port=port,
        )
        for name, port in zip(("op-a", "op-b"), ports, strict=True)
    ]  # fmt: skip
    try:
        yield procs
    finally:
        for proc in procs:
            proc.stop()


def test_leader_and_standby_expose_their_metrics(
    operators: list[OperatorProcess], cluster: ClusterInfo, api_client: client.ApiClient, namespace: str
) -> None:
    leader, standby = operators
    leader.start()
    wait_for(lambda: lease_holder(api_client, namespace).startswith("op-a_"), 30, "op-a holds the Lease")
    standby.start()
    fleet = Fleet(api_client, namespace, "quick")
    fleet.apply(simulated_example("quickstart.yaml", replicas=1))
    fleet.wait_ready(1, timeout=180)

    def scraped(proc: OperatorProcess) -> dict[str, list[tuple[dict[str, str], float]]] | None:
        try:
            return samples(proc.metrics_url)
        except requests.RequestException:
            return None

    def standby_has_read_the_lease() -> bool:
        page = scraped(standby)
        return page is not None and value(page, "sglang_operator_kubernetes_requests_total", verb="get") > 0

    def leader_has_renewed() -> bool:
        page = scraped(leader)
        return page is not None and value(page, "sglang_operator_kubernetes_requests_total", verb="update") > 0

    wait_for(standby_has_read_the_lease, 30, "the standby's /metrics counting its Lease reads")
    wait_for(leader_has_renewed, 30, "the leader's first Lease renewal, a renewal period after it took the Lease")
    ours, theirs = samples(leader.metrics_url), samples(standby.metrics_url)
    assert lease_holder(api_client, namespace).startswith("op-a_")
    assert (value(ours, "sglang_operator_leader"), value(theirs, "sglang_operator_leader")) == (1.0, 0.0)

    assert value(ours, "sglang_operator_reconcile_duration_seconds_count", result="ok") > 0
    assert value(ours, "sglang_operator_reconcile_duration_seconds_bucket", result="ok", le="+Inf") > 0
    requests_by = {(lbls["verb"], lbls["code"]) for lbls, v in ours["sglang_operator_kubernetes_requests_total"] if v}
    assert ("update", "200") in requests_by, requests_by  # the leader's Lease renewals
    assert {verb for verb, _ in requests_by} - {"get", "update"}, f"only Lease calls counted: {requests_by}"
    assert all(code.isdigit() or code == "error" for _, code in requests_by), requests_by

    assert value(theirs, "sglang_operator_reconcile_duration_seconds_count") == 0  # a standby never reconciles
    standby_verbs = {lbls["verb"] for lbls, v in theirs["sglang_operator_kubernetes_requests_total"] if v}
    assert "get" in standby_verbs and standby_verbs <= {"get", "watch"}, f"the standby wrote: {standby_verbs}"

    # Every connection either process holds to the API server (kopf's watches among them) has TCP keepalive
    # armed (runtime/keepalive.py).
    port = urllib.parse.urlsplit(cluster.server).port or 443
    for proc in (leader, standby):
        assert proc.proc is not None
        timers = api_connection_timers(proc.proc.pid, port)
        assert len(timers) >= 5, f"kopf's watches not found among the connections of {proc.identity}: {timers}"
        assert 0 not in timers, f"{proc.identity} holds API connections without keepalive: timers {timers}"


def api_connection_timers(pid: int, port: int) -> list[int]:
    """The kernel's timer kind (`tr` in /proc/net/tcp: 0 none, 1 retransmit, 2 keepalive) of each established TCP
    connection process `pid` holds to `port`. An idle connection shows 2 only with SO_KEEPALIVE set."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:  # closed meanwhile
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    timers = []
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            remote_port, state, timer, inode = int(fields[2].split(":")[1], 16), fields[3], fields[5], fields[9]
            if inode in inodes and state == "01" and remote_port == port:  # 01: ESTABLISHED
                timers.append(int(timer.split(":")[0], 16))
    return timers


# -- through the chart and the local Prometheus --------------------------------------------------------------------


def helm(cluster: ClusterInfo, home: Path, *args: str) -> str:
    return run_helm(cluster.kubeconfig, home, *args, timeout=HELM_TIMEOUT_S)


def prom_query(base: str, query: str) -> list[dict[str, Any]]:
    url = f"{base}/api/v1/query?{urllib.parse.urlencode({'query': query})}"
    with urllib.request.urlopen(url, timeout=10) as resp:
        body = json.loads(resp.read())
    assert body["status"] == "success", body
    return list(body["data"]["result"])


@pytest.fixture
def release(cluster: ClusterInfo, core: client.CoreV1Api, tmp_path: Path) -> Iterator[tuple[str, str]]:
    suffix = uuid.uuid4().hex[:5]
    name, namespace = f"sgo-{suffix}", f"e2e-operator-metrics-{suffix}"
    yield name, namespace
    helm(cluster, tmp_path / "helm", "uninstall", name, "--namespace", namespace, "--ignore-not-found")
    try:
        core.delete_namespace(namespace, propagation_policy="Background")
    except ApiException as err:
        if err.status != 404:
            raise


def test_the_local_prometheus_scrapes_both_chart_replicas(
    cluster: ClusterInfo,
    api_client: client.ApiClient,
    core: client.CoreV1Api,
    namespace: str,
    release: tuple[str, str],
    tmp_path: Path,
) -> None:
    prom = prometheus.url(cluster.state_dir)
    if not (prom and prometheus.ready(cluster.state_dir)):
        pytest.skip("the local cluster runs without Prometheus (LOCALCLUSTER_NO_PROMETHEUS=1)")
    name, operator_namespace = release
    install_crd(api_client)
    helm(
        cluster, tmp_path / "helm", "install", name, str(CHART_DIR), "--namespace", operator_namespace,
        "--create-namespace", "--set-json", f'watchNamespaces=["{namespace}"]',
    )  # fmt: skip
    service = core.read_namespaced_service(f"{name}-sglang-operator-metrics", operator_namespace)
    assert [(p.name, p.port) for p in service.spec.ports] == [("metrics", 8081)]

    query = f'sglang_operator_leader{{namespace="{operator_namespace}"}}'

    def one_leader_of_two() -> list[dict[str, Any]] | None:
        result = prom_query(prom, query)
        values = sorted(float(r["value"][1]) for r in result)
        return result if values == [0.0, 1.0] else None

    result = wait_for(
        one_leader_of_two, SCRAPE_TIMEOUT_S, f"Prometheus scraping leader 1 and 0 from the two pods of {name}",
        interval=2.0, on_timeout=lambda: f"; series={prom_query(prom, query)}",
    )  # fmt: skip
    leading_pod = next(r["metric"]["pod"] for r in result if float(r["value"][1]) == 1.0)
    assert lease_holder(api_client, operator_namespace, f"{name}-sglang-operator-leader").startswith(f"{leading_pod}_")
    requests_query = f'sum by (verb) (sglang_operator_kubernetes_requests_total{{namespace="{operator_namespace}"}})'

    def verbs() -> set[str]:
        return {r["metric"]["verb"] for r in prom_query(prom, requests_query)}

    # The leader's first renewal comes 7 s after it took the Lease: the scrape that first showed both pods may
    # predate it.
    wait_for(lambda: {"get", "update"} <= verbs(), SCRAPE_TIMEOUT_S, "the Lease's reads and renewals in Prometheus",
             interval=2.0, on_timeout=lambda: f"; verbs={verbs()}")  # fmt: skip
