"""Pure rendering: (spec, owner, replica set, operator settings) -> the Kubernetes objects the operator wants."""

from typing import Any

from .. import names
from ..api.groups import worker_groups
from ..api.spec import SGLangDeploymentSpec
from ..kvepoch import Cutover, kv_epoch
from ..settings import OperatorSettings
from .inferencepool import inference_pool
from .meta import Owner
from .monitoring import pod_monitor
from .network import workers_network_policy
from .podsecurity import harden_pod_spec
from .router import router_deployment, router_service
from .workers import replica_pods, revision_hash, workers_service


def shared_children(
    spec: SGLangDeploymentSpec, owner: Owner, settings: OperatorSettings | None = None, cutover: Cutover | None = None
) -> list[dict[str, Any]]:
    """Everything but the worker pods, whose set the reconciler chooses replica by replica.

    `settings` are the operator's own (the NetworkPolicy's peers); None means the defaults, which admit no peer
    outside the fleet. `cutover`: where a prefill/decode fleet's routers stand between KV epochs (the reconciler
    reads it from the cluster); None: a fresh fleet's, all at the spec's epoch.
    """
    settings = settings if settings is not None else OperatorSettings()
    children: list[dict[str, Any]] = []
    if any(group.spec.parallelism.nnodes > 1 for group in worker_groups(spec)):
        children.append(workers_service(spec, owner))
    if spec.router.enabled:
        if spec.disaggregated and cutover is None:
            epoch = kv_epoch(spec)
            cutover = Cutover(epoch, epoch, None, names.router(owner.name))
        cutover = cutover if spec.disaggregated else None
        children += [router_deployment(spec, owner, cutover), router_service(spec, owner, cutover)]
    if spec.monitoring.pod_monitor:
        children.append(pod_monitor(spec, owner))
    if spec.network_policy.enabled:
        children.append(workers_network_policy(spec, owner, settings.network))
    if spec.inference_pool.enabled:
        children.append(inference_pool(spec, owner))
    return children


def render_all(
    spec: SGLangDeploymentSpec, owner: Owner, settings: OperatorSettings | None = None
) -> list[dict[str, Any]]:
    """The steady state of a fresh deployment: replicas 0..N-1 of each worker group at its current revision, then
    the shared children."""
    pods = [
        pod
        for group in worker_groups(spec)
        for replica in range(group.spec.replicas)
        for pod in replica_pods(
            group.spec,
            owner,
            revision_hash(group.spec, group.pd),
            replica,
            group.name,
            group.pd,
            settings.pod_policy.rdma_resource if settings is not None else None,
        )
    ]
    return pods + shared_children(spec, owner, settings)


__all__ = ["Owner", "harden_pod_spec", "render_all", "replica_pods", "revision_hash", "shared_children"]
