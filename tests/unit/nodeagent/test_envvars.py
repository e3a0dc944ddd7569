"""Container environment: envFrom/env order, downward API, references and `$(VAR)` expansion."""

from __future__ import annotations

from typing import Any

import pytest

from localcluster.nodeagent.envvars import (
    EnvError,
    PodFacts,
    container_env,
    expand,
    referenced_objects,
    service_env,
)

FACTS = PodFacts(pod_ip="127.1.0.9", host_ip="127.0.0.1", node_allocatable={"cpu": "191", "memory": "2032Gi"})


def pod(container: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"name": "w-0", "namespace": "ns", "uid": "u-1", "labels": {"app": "x"}, "annotations": {"a": "b"}},
        "spec": {"nodeName": "gpu-node-1", "serviceAccountName": "sa", "containers": [container]},
    }


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("$(A)-$(B)", "1-$(B)"),
        ("$$(A)", "$(A)"),
        ("$$", "$"),
        ("$(A", "$(A"),
        ("$A", "$A"),
        ("$()", "$()"),
        ("x$", "x$"),
    ],
)
def test_expand(text: str, expected: str) -> None:
    assert expand(text, {"A": "1"}) == expected


def test_env_order_references_and_expansion() -> None:
    container = {
        "name": "c",
        "resources": {"limits": {"memory": "1Gi"}, "requests": {"cpu": "500m"}},
        "envFrom": [{"configMapRef": {"name": "cm"}, "prefix": "CM_"}, {"secretRef": {"name": "s"}}],
        "env": [
            {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
            {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "SA", "valueFrom": {"fieldRef": {"fieldPath": "spec.serviceAccountName"}}},
            {"name": "URL", "value": "http://$(IP):$(KUBERNETES_SERVICE_PORT)/$(POD)/$(NOPE)"},
            {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "token"}}},
            {"name": "MEM_MI", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}},
            {"name": "CPU_M", "valueFrom": {"resourceFieldRef": {"resource": "requests.cpu", "divisor": "1m"}}},
            {"name": "CPU_LIMIT", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}},
            {"name": "TOKEN", "value": "override-$(TOKEN)"},
        ],
    }
    env = container_env(
        pod(container),
        container,
        FACTS,
        {"s": {"token": "t0k"}},
        {"cm": {"K": "v", "bad key": "x"}},
        service_env("127.0.0.1", 6443),
    )
    assert env["CM_K"] == "v"
    assert "CM_bad key" not in env
    assert env["POD"] == "w-0"
    assert env["IP"] == "127.1.0.9"
    assert env["APP"] == "x"
    assert env["NODE"] == "gpu-node-1"
    assert env["SA"] == "sa"
    assert env["URL"] == "http://127.1.0.9:6443/w-0/$(NOPE)"
    assert env["TOKEN"] == "override-t0k"
    assert env["MEM_MI"] == "1024"
    assert env["CPU_M"] == "500"
    assert env["CPU_LIMIT"] == "191"  # no limit: node allocatable
    assert env["KUBERNETES_SERVICE_HOST"] == "127.0.0.1"
    assert env["KUBERNETES_PORT_6443_TCP_ADDR"] == "127.0.0.1"


def test_missing_secret_is_a_config_error_unless_optional() -> None:
    container = {"name": "c", "env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "gone", "key": "k"}}}]}
    with pytest.raises(EnvError, match='secret "gone" not found'):
        container_env(pod(container), container, FACTS, {"gone": None}, {}, {})
    container["env"][0]["valueFrom"]["secretKeyRef"]["optional"] = True
    assert "X" not in container_env(pod(container), container, FACTS, {"gone": None}, {}, {})


def test_missing_key_is_a_config_error() -> None:
    container = {"name": "c", "env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "k"}}}]}
    with pytest.raises(EnvError, match="couldn't find key k in configmap cm"):
        container_env(pod(container), container, FACTS, {}, {"cm": {}}, {})


def test_referenced_objects_cover_env_and_volumes() -> None:
    container = {
        "name": "c",
        "envFrom": [{"secretRef": {"name": "s1"}}],
        "env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "c1", "key": "k"}}}],
    }
    spec = pod(container)
    spec["spec"]["volumes"] = [
        {"name": "a", "secret": {"secretName": "s2"}},
        {
            "name": "b",
            "projected": {"sources": [{"configMap": {"name": "kube-root-ca.crt"}}, {"secret": {"name": "s3"}}]},
        },
    ]
    assert referenced_objects(spec) == ({"s1", "s2", "s3"}, {"c1", "kube-root-ca.crt"})
