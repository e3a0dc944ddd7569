"""Fixtures for tests against the real local cluster (built from Go modules; see testing/localcluster).

`cluster` reuses a running cluster (`python -m localcluster up`) or starts one for the session and stops it at
the end; set LOCALCLUSTER_KEEP=1 to leave a cluster this session started running for the next one, and
LOCALCLUSTER_NO_AGENT=1 / LOCALCLUSTER_NO_PROMETHEUS=1 to run without the node agent / Prometheus.
Every test collected under e2e/tests is marked `e2e`.
"""

from __future__ import annotations

import os
import re
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from localcluster import cluster as localcluster
from localcluster.cluster import ClusterInfo
from localcluster.fleet import OperatorProcess, create_namespace, install_crd

E2E_TESTS = Path(__file__).resolve().parent


SERIAL: dict[str, str] = {
    "test_helm_install.py": "runs a cluster-wide operator, which would also reconcile every other test's CRs",
    "test_uninstall.py": "deletes the CRD and the chart's cluster roles",
    "test_reconcile_errors.py": "deletes and recreates the PodMonitor CRD that every fleet's monitoring renders",
    "test_nodeagent.py": "kills the node agent's pods and deletes a node",
    "test_client_side_apply.py": "applies the CRDs client-side and dry-runs the manifest's cluster-wide objects",
    "test_leader_election.py": "times Lease handovers to the second",
    "test_scale_smoke.py": "a load test: 50 fleets' timings, measured on a quiet cluster",
    "test_many_fleets.py": "a load test: many fleets and their GPUs at once",
    "test_worker_groups.py": "needs a node with all 8 GPUs free",
}
"""The e2e modules that run alone, after the parallel ones (`python -m tests.tiers e2e`; docs/testing.md), with the
reason: each touches something not namespaced, or measures time or capacity that parallel tests would disturb."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        path = Path(str(item.fspath)).resolve()
        if E2E_TESTS in path.parents:
            item.add_marker(pytest.mark.e2e)
            if path.name in SERIAL:
                item.add_marker(pytest.mark.serial)


@pytest.fixture(scope="session")
def cluster() -> Iterator[ClusterInfo]:
    # On a running cluster this only starts what is missing; one this run started is stopped at the end
    # unless another run (registered the same way) still uses it.
    agent = False if os.environ.get("LOCALCLUSTER_NO_AGENT") == "1" else None  # None: if the package exists
    prom = os.environ.get("LOCALCLUSTER_NO_PROMETHEUS") != "1"
    keep = os.environ.get("LOCALCLUSTER_KEEP") == "1"
    with localcluster.session(agent=agent, with_prometheus=prom, keep=keep) as info:
        yield info


@pytest.fixture(scope="session")
def api_client(cluster: ClusterInfo) -> client.ApiClient:
    return config.new_client_from_config(str(cluster.kubeconfig))


@pytest.fixture(scope="session")
def core(api_client: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api_client)


@pytest.fixture
def namespace(request: pytest.FixtureRequest, core: client.CoreV1Api) -> Iterator[str]:
    """A fresh namespace (ready for pods: its `default` service account exists), deleted afterwards."""
    slug = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    name = f"e2e-{slug}-{uuid.uuid4().hex[:5]}"
    create_namespace(core, name, {"e2e": "true"})
    yield name
    try:
        core.delete_namespace(name, propagation_policy="Background")
    except ApiException as err:
        if err.status != 404:
            raise


@pytest.fixture
def operator(cluster: ClusterInfo, api_client: client.ApiClient, namespace: str) -> Iterator[OperatorProcess]:
    """`sglang-operator run` for the test's namespace with the chart's defaults (no host path, no per-CR Prometheus
    URL allowed), the CRD installed; tests that need other flags define their own."""
    install_crd(api_client)
    log = cluster.state_dir / "logs" / f"operator-{namespace}.log"
    proc = OperatorProcess(cluster.kubeconfig, [namespace], log).start()
    yield proc
    proc.stop()


@pytest.fixture
def operator_with_prometheus(cluster: ClusterInfo, api_client: client.ApiClient, namespace: str) -> Iterator[str]:
    """The operator for the test's namespace with the local Prometheus as its default URL (the doctor reads it);
    yields the operator's own metrics URL."""
    if cluster.prometheus_url is None:
        pytest.fail("the local cluster runs without Prometheus; `python -m localcluster up` starts it")
    install_crd(api_client)
    log = cluster.state_dir / "logs" / f"operator-{namespace}.log"
    proc = OperatorProcess(cluster.kubeconfig, [namespace], log, ["--prometheus-url", cluster.prometheus_url],
                           metrics_port=_free_port())  # fmt: skip
    proc.start()
    yield proc.metrics_url
    proc.stop()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
