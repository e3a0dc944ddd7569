"""`spec.networkPolicy.enabled` on the real API server: the operator creates the fleet's NetworkPolicy with the
peers its own settings name (run flags), owned by the CR, and deletes it when the CR turns it off.

The local cluster has no network plugin, so no NetworkPolicy is enforced here: this checks the object the API
server accepted and stored, and that the fleet still serves, not which traffic the policy admits.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from localcluster.cluster import ClusterInfo
from localcluster.fleet import Fleet, OperatorProcess, generate, install_crd, simulated_example
from localcluster.procs import wait_for

PEER_FLAGS = [
    "--operator-namespace", "sglang-operator",
    "--operator-pod-labels", "app.kubernetes.io/name=sglang-operator,app.kubernetes.io/instance=sglang-operator",
    "--prometheus-namespace-labels", "kubernetes.io/metadata.name=monitoring",
]  # fmt: skip
TIMEOUT_S = 60.0


@pytest.fixture
def operator(cluster: ClusterInfo, api_client: client.ApiClient, namespace: str) -> Iterator[OperatorProcess]:
    install_crd(api_client)
    log = cluster.state_dir / "logs" / f"operator-{namespace}.log"
    proc = OperatorProcess(cluster.kubeconfig, [namespace], log, run_args=PEER_FLAGS).start()
    yield proc
    proc.stop()


def read_policy(networking: client.NetworkingV1Api, namespace: str) -> client.V1NetworkPolicy | None:
    try:
        return networking.read_namespaced_network_policy("qs-workers", namespace)
    except ApiException as err:
        if err.status == 404:
            return None
        raise


@pytest.mark.usefixtures("operator")
def test_network_policy_is_created_with_the_settings_peers_and_deleted_when_off(
    api_client: client.ApiClient, namespace: str
) -> None:
    networking = client.NetworkingV1Api(api_client)
    fleet = Fleet(api_client, namespace, "qs")
    doc = simulated_example("quickstart.yaml", replicas=1)
    doc["spec"]["model"].pop("tokenSecretRef", None)
    doc["spec"]["networkPolicy"] = {"enabled": True}
    fleet.apply(doc)
    fleet.wait_ready(1)
    assert generate(fleet.router_urls()[0], "hello").status_code == 200

    policy = read_policy(networking, namespace)
    assert policy is not None
    (owner,) = policy.metadata.owner_references
    assert (owner.kind, owner.name, owner.uid) == ("SGLangDeployment", "qs", fleet.get()["metadata"]["uid"])
    spec = api_client.sanitize_for_serialization(policy.spec)
    assert spec["podSelector"] == {"matchLabels": {"sglang.ai/deployment": "qs", "sglang.ai/component": "worker"}}
    assert spec["policyTypes"] == ["Ingress"]
    routers, workers, outside = spec["ingress"]
    assert routers["from"] == [{"podSelector": {"matchLabels": {"sglang.ai/deployment": "qs",
                                                                "sglang.ai/component": "router"}}}]  # fmt: skip
    assert "ports" not in workers
    assert outside["from"] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "sglang-operator"}},
         "podSelector": {"matchLabels": {"app.kubernetes.io/name": "sglang-operator",
                                         "app.kubernetes.io/instance": "sglang-operator"}}},
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}},
    ]  # fmt: skip
    assert outside["ports"] == [{"protocol": "TCP", "port": 30000}]

    fleet.patch_spec({"networkPolicy": {"enabled": False}})
    wait_for(lambda: read_policy(networking, namespace) is None, TIMEOUT_S, "the NetworkPolicy deleted")
