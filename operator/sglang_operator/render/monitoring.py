"""An optional prometheus-operator PodMonitor scraping workers and routers, with the labels the autoscaler's
queries expect (the same names the local cluster's kubernetes_sd relabelling produces)."""

from typing import Any

from .. import names
from ..api.constants import LABEL_COMPONENT, LABEL_DEPLOYMENT, LABEL_NODE_RANK, LABEL_REPLICA, LABEL_REVISION
from ..api.spec import SGLangDeploymentSpec
from .meta import Owner, child_labels, object_meta

_KEPT_POD_LABELS = {
    LABEL_DEPLOYMENT: "sglang_deployment",
    LABEL_COMPONENT: "sglang_component",
    LABEL_REPLICA: "sglang_replica",
    LABEL_NODE_RANK: "sglang_node_rank",
    LABEL_REVISION: "sglang_revision",
}


def _label_source(label: str) -> str:
    sanitized = "".join(ch if ch.isalnum() else "_" for ch in label)
    return f"__meta_kubernetes_pod_label_{sanitized}"


def pod_monitor(spec: SGLangDeploymentSpec, owner: Owner) -> dict[str, Any]:
    relabelings = [
        {"sourceLabels": [_label_source(label)], "targetLabel": target} for label, target in _KEPT_POD_LABELS.items()
    ]
    endpoints = [
        {"port": port, "path": "/metrics", "interval": spec.monitoring.interval, "relabelings": relabelings}
        for port in ("http", "metrics")
    ]
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": object_meta(owner, names.pod_monitor(owner.name), child_labels(owner, "monitoring")),
        "spec": {
            "selector": {"matchLabels": {LABEL_DEPLOYMENT: owner.name}},
            "podMetricsEndpoints": endpoints,
        },
    }
