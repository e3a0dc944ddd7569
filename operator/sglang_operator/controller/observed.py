"""Typed views of the children the operator observes, built from raw Kubernetes objects. Pure."""

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ..api.constants import (
    ANNOTATION_DRAINING,
    ANNOTATION_REPLICA_NODES,
    ANNOTATION_WARM,
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


def _timestamp(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def pod_view(pod: dict[str, Any]) -> PodView:
    meta, status = pod["metadata"], pod.get("status") or {}
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    conditions = {c["type"]: c["status"] for c in status.get("conditions") or []}
    container = (pod.get("spec") or {}).get("containers", [{}])[0]
    ports = {p.get("name"): p.get("containerPort") for p in container.get("ports") or []}
    return PodView(
        name=meta["name"],
        rank=int(labels.get(LABEL_NODE_RANK, "0")),
        phase=status.get("phase") or "Pending",
        ready=conditions.get("Ready") == "True",
        ip=status.get("podIP") or None,
        port=int(ports.get("http") or 30000),
        deleting=bool(meta.get("deletionTimestamp")),
        restarts=sum(int(cs.get("restartCount") or 0) for cs in status.get("containerStatuses") or []),
        replica_nodes=int(annotations.get(ANNOTATION_REPLICA_NODES, "1")),
        draining_since=_timestamp(annotations.get(ANNOTATION_DRAINING)),
        warm=annotations.get(ANNOTATION_WARM) == "true",
    )


def group_replicas(pods: list[dict[str, Any]]) -> list[ReplicaView]:
    """Pods grouped by their replica label; the replica index is unique across revisions."""
    grouped: dict[int, ReplicaView] = {}
    for pod in pods:
        labels = pod["metadata"].get("labels") or {}
        if LABEL_REPLICA not in labels:
            continue
        index = int(labels[LABEL_REPLICA])
        view = pod_view(pod)
        replica = grouped.setdefault(index, ReplicaView(index=index, revision=labels.get(LABEL_REVISION, "")))
        replica.pods[view.rank] = view
    return [grouped[index] for index in sorted(grouped)]
