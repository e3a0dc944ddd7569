"""The optional per-fleet NetworkPolicy (`spec.networkPolicy.enabled`): who may reach the worker pods.

SGLang's HTTP server has no authentication of its own, so the router's API key is only worth something if clients
cannot call a worker directly. The policy selects the fleet's worker pods (Ingress only: egress stays open, the
workers download weights and resolve names) and admits:

- the fleet's own router pods (same namespace), on the engine port, when the router is enabled (and on the
  bootstrap port of a prefill/decode fleet, which smg probes);
- the fleet's other worker pods, on every port: ranks of a multi-node replica meet at `--dist-init-addr` and then
  open NCCL connections on ports chosen at run time; in a prefill/decode fleet decode servers reach each prefill's
  bootstrap port and both sides' KV transfer ports, which the transfer engine also picks at run time. Admitted
  for single-node fleets too, so a rollout between shapes (nnodes 2 -> 1) never cuts the NCCL traffic of old
  replicas still serving;
- the operator (drain checks read each replica's load; a prefill's bootstrap port is probed before it is
  registered), on the engine port (and the bootstrap port), when the operator's settings name its
  namespace (`--operator-namespace`, matched on the `kubernetes.io/metadata.name` label the API server sets) and,
  if given, its pod labels (`--operator-pod-labels`; none: every pod of that namespace);
- Prometheus (scrapes of /metrics on the engine port), when the settings name its namespace labels, its pod labels
  or both (pod labels alone: pods with those labels in any namespace).

A peer whose selectors are unset is left out: then nothing outside the fleet reaches the workers except that peer's
admitted neighbours above. Kubelet probes come from the node and are not subject to the policy in common CNIs.
The policy only works where the cluster's network plugin enforces NetworkPolicies (Calico, Cilium, ...).
Pure: the peers come from the operator's settings, passed in.
"""

from typing import Any

from .. import names
from ..api.constants import COMPONENT_ROUTER, COMPONENT_WORKER
from ..api.spec import SGLangDeploymentSpec
from ..settings import NetworkPeers
from .meta import Owner, child_labels, object_meta, selector_labels

NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


def _operator_peer(peers: NetworkPeers) -> dict[str, Any] | None:
    if not peers.operator_namespace:
        return None
    return {
        "namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: peers.operator_namespace}},
        "podSelector": {"matchLabels": dict(peers.operator_pod_labels)},
    }


def _prometheus_peer(peers: NetworkPeers) -> dict[str, Any] | None:
    if not peers.prometheus_namespace_labels and not peers.prometheus_pod_labels:
        return None
    peer: dict[str, Any] = {"namespaceSelector": {"matchLabels": dict(peers.prometheus_namespace_labels)}}
    if peers.prometheus_pod_labels:
        peer["podSelector"] = {"matchLabels": dict(peers.prometheus_pod_labels)}
    return peer


def workers_network_policy(spec: SGLangDeploymentSpec, owner: Owner, peers: NetworkPeers) -> dict[str, Any]:
    engine_port = [{"protocol": "TCP", "port": spec.engine.port}]
    if spec.disaggregation is not None:
        # The routers and the operator probe each prefill server's bootstrap port (before registering it, and
        # smg's rendezvous probe); decode servers reach it, and the transfer ports, as the fleet's workers below.
        engine_port.append({"protocol": "TCP", "port": spec.disaggregation.bootstrap_port})
    workers = {"podSelector": {"matchLabels": selector_labels(owner, COMPONENT_WORKER)}}
    ingress: list[dict[str, Any]] = []
    if spec.router.enabled:
        routers = {"podSelector": {"matchLabels": selector_labels(owner, COMPONENT_ROUTER)}}
        ingress.append({"from": [routers], "ports": engine_port})
    ingress.append({"from": [workers]})
    outside = [peer for peer in (_operator_peer(peers), _prometheus_peer(peers)) if peer is not None]
    if outside:
        ingress.append({"from": outside, "ports": engine_port})
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": object_meta(owner, names.network_policy(owner.name), child_labels(owner, COMPONENT_WORKER)),
        "spec": {
            "podSelector": {"matchLabels": selector_labels(owner, COMPONENT_WORKER)},
            "policyTypes": ["Ingress"],
            "ingress": ingress,
        },
    }
