"""Typed views of the children the operator observes, built from raw Kubernetes objects. Pure."""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from . import names
from .api.constants import (
    ANNOTATION_DRAINING,
    ANNOTATION_REPLICA_NODES,
    ANNOTATION_WARM,
    COMPONENT_WORKER,
    LABEL_COMPONENT,
    LABEL_KV_EPOCH,
    LABEL_NODE_RANK,
    LABEL_REPLICA,
    LABEL_REVISION,
)


@dataclass(frozen=True)
class PodView:
    name: str
    rank: int
    phase: str
    ready: bool
    ip: str | None
    port: int
    deleting: bool
    restarts: int
    replica_nodes: int
    draining_since: float | None
    warm: bool

    @property
    def finished(self) -> bool:
        return self.phase in ("Failed", "Succeeded")


@dataclass(frozen=True)
class ReplicaView:
    index: int
    revision: str
    pods: dict[int, PodView] = field(default_factory=dict)
    epoch: str = ""
    """A prefill/decode replica's KV epoch (`kvepoch.py`); "" in a colocated fleet, or on a pod made before epochs
    existed (the reconciler reads that as the serving epoch: `controller/cutover.py`)."""

    @property
    def size(self) -> int:
        return max(pod.replica_nodes for pod in self.pods.values())

    @property
    def rank0(self) -> PodView | None:
        return self.pods.get(0)

    @property
    def failed(self) -> bool:
        """A replica that cannot serve again without being recreated.

        Any finished or vanishing pod breaks a multi-node replica (its NCCL group cannot be rejoined), so it
        restarts as a gang; a single-node pod restarts in place (restartPolicy Always) unless it finished.
        """
        if any(pod.finished for pod in self.pods.values()):
            return True
        if self.size > 1:
            return len(self.pods) < self.size or any(pod.deleting for pod in self.pods.values())
        return False

    @property
    def deleting(self) -> bool:
        return all(pod.deleting for pod in self.pods.values())

    @property
    def ready(self) -> bool:
        rank0 = self.rank0
        return (
            rank0 is not None
            and rank0.ready
            and not self.failed
            and not any(pod.deleting for pod in self.pods.values())
        )

    @property
    def draining_since(self) -> float | None:
        stamps = [pod.draining_since for pod in self.pods.values() if pod.draining_since is not None]
        return min(stamps) if stamps else None

    @property
    def warm(self) -> bool:
        return any(pod.warm for pod in self.pods.values())

    @property
    def url(self) -> str | None:
        rank0 = self.rank0
        return f"http://{rank0.ip}:{rank0.port}" if rank0 is not None and rank0.ip else None

    @property
    def pod_names(self) -> list[str]:
        return [self.pods[rank].name for rank in sorted(self.pods)]


def operator_stamp(value: object) -> float | None:
    """An RFC 3339 stamp the operator wrote; anything else (someone's edit) is ignored, as if absent."""
    if not isinstance(value, str) or not value or len(value) > 64:
        return None
    try:
        stamp = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return stamp.timestamp() if stamp.tzinfo is not None else None


MAX_REPLICA_NODES = 1024
"""More nodes than any replica spans: a larger `replica-nodes` value is not one the operator wrote."""


def _small_int(value: object, default: int | None, low: int = 0, high: int = 10**9) -> int | None:
    """A label or annotation the operator wrote as a decimal; `default` for anything else."""
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and value.isascii() and value.isdecimal() and len(value) <= 10:
        number = int(value)
    else:
        return default
    return number if low <= number <= high else default


def owned_by(obj: Mapping[str, Any], uid: str) -> bool:
    """True when `obj` has a controller ownerReference to the object with `uid`: only such children are the
    operator's to change or delete. Same labels and name are not enough (another team's object, or a CR of the
    same name deleted and created again)."""
    references = (obj.get("metadata") or {}).get("ownerReferences") or []
    return any(isinstance(ref, dict) and ref.get("uid") == uid and ref.get("controller") is True for ref in references)


PodT = TypeVar("PodT", bound=Mapping[str, Any])


def owned_workers(pods: Iterable[PodT], uid: str) -> list[PodT]:
    """The worker pods the CR `uid` controls (`owned_by`). The worker label only narrows the candidates: any pod of
    the namespace can carry it, so every component that acts on worker pods or calls them (the reconciler, the
    doctor) selects them with this."""
    return [
        pod for pod in pods
        if ((pod.get("metadata") or {}).get("labels") or {}).get(LABEL_COMPONENT) == COMPONENT_WORKER
        and owned_by(pod, uid)
    ]  # fmt: skip


@dataclass(frozen=True)
class SlotReplicaSet:
    """The ReplicaSet that controls a router pod, as the pod's ownerReference names it."""

    slot: str
    """The router Deployment its name says it belongs to (`<slot>-<hash>`)."""
    name: str
    uid: str


def router_replica_set(pod: Mapping[str, Any], deployment: str) -> SlotReplicaSet | None:
    """The ReplicaSet controlling `pod` when it is named as one of the CR's router Deployments' (`<slot>-<hash>`, the
    hash without a dash, so the router of a CR named `<name>-router` is not taken for this one's); None otherwise.
    Only what the pod says: whether that Deployment controls the ReplicaSet is `slot_router_pods`' question (a tenant
    can name a ReplicaSet `<name>-router-b-x`)."""
    slots = names.router_slots(deployment)
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if not isinstance(ref, dict) or ref.get("controller") is not True or ref.get("kind") != "ReplicaSet":
            continue
        name, uid = ref.get("name"), ref.get("uid")
        slot = name.rpartition("-")[0] if isinstance(name, str) else ""
        if slot in slots and isinstance(name, str) and isinstance(uid, str) and uid:
            return SlotReplicaSet(slot, name, uid)
    return None


def router_pod_of(pod: Mapping[str, Any], deployment: str) -> bool:
    """A pod named by its controlling ReplicaSet as one of the CR's router Deployments' (`router_replica_set`).
    Labels alone would let any pod of the namespace receive the router's API key and membership calls, so every
    component that sends the router a credential (the reconciler, the doctor) selects router pods with this, not by
    label; the reconciler then keeps only those whose ReplicaSet the slot's Deployment controls."""
    return router_replica_set(pod, deployment) is not None


def slot_router_pods(
    pods: Iterable[PodT],
    deployment: str,
    slots: Mapping[str, str],
    controllers: Mapping[str, str | None],
) -> list[PodT]:
    """The pods of the CR's own router Deployments: each controlled by a ReplicaSet named as a slot's
    (`router_replica_set`) that the Deployment of that very slot controls, by uid. `slots`: the router
    Deployments the CR owns, name -> uid; `controllers`: ReplicaSet uid -> the uid of the Deployment that controls
    it, as read (None or absent: none, or unknown). A tenant's ReplicaSet named `<name>-router-b-<x>` is not one:
    its pods are never read, sent the router's API key, or counted as a slot's routers (the cut-over's switch
    check). Pure."""
    kept = []
    for pod in pods:
        owner = router_replica_set(pod, deployment)
        if owner is None or owner.slot not in slots:
            continue
        controller = controllers.get(owner.uid)
        if controller is not None and controller == slots[owner.slot]:
            kept.append(pod)
    return kept


def pod_epoch(pod: Mapping[str, Any]) -> str:
    """The KV epoch label of a worker or router pod; "" when absent or not a string."""
    value = ((pod.get("metadata") or {}).get("labels") or {}).get(LABEL_KV_EPOCH, "")
    return value if isinstance(value, str) else ""


def pod_view(pod: dict[str, Any]) -> PodView | None:
    """None for a pod whose operator labels do not parse: whatever it is, it is not a replica the operator made."""
    meta, status = pod["metadata"], pod.get("status") or {}
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    rank = _small_int(labels.get(LABEL_NODE_RANK, "0"), None, high=MAX_REPLICA_NODES - 1)
    if rank is None:
        return None
    conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or [] if isinstance(c, dict)}
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    ports = {p.get("name"): p.get("containerPort") for p in containers[0].get("ports") or [] if isinstance(p, dict)}
    return PodView(
        name=meta["name"],
        rank=rank,
        phase=status.get("phase") or "Pending",
        ready=conditions.get("Ready") == "True",
        ip=status.get("podIP") or None,
        port=_small_int(ports.get("http"), 30000, low=1, high=65535) or 30000,
        deleting=bool(meta.get("deletionTimestamp")),
        restarts=sum(_small_int(cs.get("restartCount"), 0) or 0 for cs in status.get("containerStatuses") or []),
        replica_nodes=_small_int(annotations.get(ANNOTATION_REPLICA_NODES, "1"), 1, low=1, high=MAX_REPLICA_NODES) or 1,
        draining_since=operator_stamp(annotations.get(ANNOTATION_DRAINING)),
        warm=annotations.get(ANNOTATION_WARM) == "true",
    )


def group_replicas(pods: list[dict[str, Any]]) -> list[ReplicaView]:
    """Pods grouped by their replica label; the replica index is unique across revisions. Pods whose labels do not
    parse are left out (the caller has already kept only the pods the CR owns)."""
    grouped: dict[int, ReplicaView] = {}
    for pod in pods:
        labels = pod["metadata"].get("labels") or {}
        index = _small_int(labels.get(LABEL_REPLICA), None)
        view = pod_view(pod)
        if index is None or view is None:
            continue
        revision = labels.get(LABEL_REVISION, "")
        revision = revision if isinstance(revision, str) else ""
        replica = grouped.setdefault(index, ReplicaView(index=index, revision=revision, epoch=pod_epoch(pod)))
        replica.pods[view.rank] = view
    return [grouped[index] for index in sorted(grouped)]
