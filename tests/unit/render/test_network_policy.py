"""The optional NetworkPolicy: workers reachable from the fleet's routers, its other workers, and the operator and
Prometheus as the operator's settings name them; nothing from a CR widens it."""

from typing import Any

import kubernetes_validate

from sglang_operator.api.spec import SGLangDeploymentSpec
from sglang_operator.render import Owner, render_all, shared_children
from sglang_operator.settings import NetworkPeers, OperatorSettings, load_settings

K8S_VERSION = "1.34.0"
OWNER = Owner(name="demo", namespace="team-a", uid="7f0c2a4e-0000-4000-8000-000000000001")
ENGINE_PORT = [{"protocol": "TCP", "port": 30000}]
WORKERS = {"podSelector": {"matchLabels": {"sglang.ai/deployment": "demo", "sglang.ai/component": "worker"}}}
ROUTERS = {"podSelector": {"matchLabels": {"sglang.ai/deployment": "demo", "sglang.ai/component": "router"}}}


def policy(raw: dict[str, Any], settings: OperatorSettings | None = None) -> dict[str, Any]:
    spec = SGLangDeploymentSpec.model_validate({"model": {"path": "m"}, "networkPolicy": {"enabled": True}, **raw})
    (found,) = [o for o in shared_children(spec, OWNER, settings) if o["kind"] == "NetworkPolicy"]
    kubernetes_validate.validate(found, K8S_VERSION, strict=True)
    return found


def test_off_by_default() -> None:
    spec = SGLangDeploymentSpec.model_validate({"model": {"path": "m"}})
    assert all(o["kind"] != "NetworkPolicy" for o in render_all(spec, OWNER))


def test_without_settings_only_the_fleet_reaches_its_workers() -> None:
    found = policy({})
    assert found["metadata"]["name"] == "demo-workers" and found["metadata"]["namespace"] == "team-a"
    assert found["metadata"]["ownerReferences"][0]["uid"] == OWNER.uid
    assert found["metadata"]["labels"]["sglang.ai/deployment"] == "demo"
    assert found["spec"]["podSelector"] == WORKERS["podSelector"]
    assert found["spec"]["policyTypes"] == ["Ingress"]
    assert found["spec"]["ingress"] == [
        {"from": [ROUTERS], "ports": ENGINE_PORT},
        {"from": [WORKERS]},  # every port: NCCL and dist-init between the ranks of a replica
    ]


def test_operator_and_prometheus_come_from_the_settings() -> None:
    settings = load_settings({
        "SGLANG_OPERATOR_NAMESPACE": "sglang-operator",
        "SGLANG_OPERATOR_POD_LABELS": "app.kubernetes.io/name=sglang-operator,app.kubernetes.io/instance=op",
        "SGLANG_OPERATOR_PROMETHEUS_NAMESPACE_LABELS": "kubernetes.io/metadata.name=monitoring",
        "SGLANG_OPERATOR_PROMETHEUS_POD_LABELS": "app.kubernetes.io/name=prometheus",
    })  # fmt: skip
    found = policy({"engine": {"port": 8000}}, settings)
    port = [{"protocol": "TCP", "port": 8000}]
    assert found["spec"]["ingress"][2] == {
        "from": [
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "sglang-operator"}},
             "podSelector": {"matchLabels": {"app.kubernetes.io/name": "sglang-operator",
                                             "app.kubernetes.io/instance": "op"}}},
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
             "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}},
        ],
        "ports": port,
    }  # fmt: skip
    assert found["spec"]["ingress"][0]["ports"] == port


def test_a_peer_is_as_wide_as_its_selectors_and_absent_without_them() -> None:
    only_pods = OperatorSettings(network=NetworkPeers(prometheus_pod_labels={"app": "prometheus"}))
    (prometheus,) = policy({}, only_pods)["spec"]["ingress"][2]["from"]
    assert prometheus == {
        "namespaceSelector": {"matchLabels": {}},
        "podSelector": {"matchLabels": {"app": "prometheus"}},
    }
    only_namespace = OperatorSettings(network=NetworkPeers(operator_namespace="ops"))
    (operator,) = policy({}, only_namespace)["spec"]["ingress"][2]["from"]
    assert operator == {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ops"}},
                        "podSelector": {"matchLabels": {}}}  # fmt: skip
    labels_without_namespace = OperatorSettings(network=NetworkPeers(operator_pod_labels={"app": "op"}))
    assert len(policy({}, labels_without_namespace)["spec"]["ingress"]) == 2


def test_no_router_rule_without_a_router() -> None:
    assert policy({"router": {"enabled": False}})["spec"]["ingress"] == [{"from": [WORKERS]}]


def test_multi_node_workers_reach_each_other_on_every_port() -> None:
    ingress = policy({"parallelism": {"tp": 16, "nnodes": 2}})["spec"]["ingress"]
    assert {"from": [WORKERS]} in ingress
