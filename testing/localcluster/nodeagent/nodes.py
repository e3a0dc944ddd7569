"""Node, node status and Lease objects for the simulated GPU nodes (pure).

The shape follows an 8 x H200 machine (AWS p5en.48xlarge) with the labels NVIDIA's GPU feature discovery puts
on real nodes, so node selectors and affinities written for production clusters match here too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from localcluster.nodeagent.status import rfc3339

AGENT_LABEL = "localcluster.sglang.ai/node-agent"
GPU_RESOURCE = "nvidia.com/gpu"
LEASE_NAMESPACE = "kube-node-lease"
LEASE_DURATION_S = 40
HOST_IP = "127.0.0.1"


@dataclass(frozen=True)
class NodeShape:
    gpus: int = 8
    cpu: int = 192
    memory_gi: int = 2048
    pods: int = 110
    ephemeral_storage_gi: int = 7600
    gpu_product: str = "NVIDIA-H200"
    gpu_memory_mib: int = 143771
    instance_type: str = "p5en.48xlarge"
    region: str = "local-1"
    zones: tuple[str, ...] = ("local-1a", "local-1b")


def node_names(prefix: str, count: int) -> list[str]:
    return [f"{prefix}-{index}" for index in range(count)]


def capacity(shape: NodeShape) -> dict[str, str]:
    return {
        "cpu": str(shape.cpu),
        "memory": f"{shape.memory_gi}Gi",
        "pods": str(shape.pods),
        "ephemeral-storage": f"{shape.ephemeral_storage_gi}Gi",
        GPU_RESOURCE: str(shape.gpus),
    }


def allocatable(shape: NodeShape) -> dict[str, str]:
    """Capacity minus what a kubelet reserves for the system (one core, 16 GiB)."""
    return {**capacity(shape), "cpu": f"{shape.cpu * 1000 - 1000}m", "memory": f"{shape.memory_gi - 16}Gi"}


def node_labels(name: str, index: int, shape: NodeShape) -> dict[str, str]:
    zone = shape.zones[index % len(shape.zones)]
    return {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": shape.instance_type,
        "topology.kubernetes.io/region": shape.region,
        "topology.kubernetes.io/zone": zone,
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": shape.gpu_product,
        "nvidia.com/gpu.count": str(shape.gpus),
        "nvidia.com/gpu.memory": str(shape.gpu_memory_mib),
        "nvidia.com/gpu.family": "hopper",
        "nvidia.com/gpu.machine": shape.instance_type,
        AGENT_LABEL: "true",
    }


def node_manifest(name: str, index: int, shape: NodeShape) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": node_labels(name, index, shape),
            "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": {},
    }


@dataclass(frozen=True)
class HostFacts:
    """Facts about the machine and versions reported in nodeInfo."""

    kubelet_version: str
    kernel: str = ""
    os_image: str = "Local node agent (Linux)"
    boot_id: str = ""
    machine_id: str = ""
    kubelet_port: int = 0


def _condition(
    kind: str, ok: bool, reason: str, message: str, now: str, previous: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any]:
    status = "True" if ok else "False"
    before = previous.get(kind) or {}
    since = before.get("lastTransitionTime") if before.get("status") == status else None
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastHeartbeatTime": now,
        "lastTransitionTime": since or now,
    }


def node_status(
    shape: NodeShape,
    host: HostFacts,
    ready: bool,
    now: float,
    previous_conditions: Sequence[Mapping[str, Any]] = (),
    not_ready_message: str = "",
) -> dict[str, Any]:
    """The status a kubelet reports: capacity, conditions, addresses, nodeInfo."""
    stamp = rfc3339(now)
    previous = {c["type"]: c for c in previous_conditions}
    conditions = [
        _condition(
            "MemoryPressure",
            False,
            "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available",
            stamp,
            previous,
        ),
        _condition("DiskPressure", False, "KubeletHasNoDiskPressure", "kubelet has no disk pressure", stamp, previous),
        _condition(
            "PIDPressure", False, "KubeletHasSufficientPID", "kubelet has sufficient PID available", stamp, previous
        ),
        _condition(
            "Ready",
            ready,
            "KubeletReady" if ready else "KubeletNotReady",
            "kubelet is posting ready status" if ready else not_ready_message,
            stamp,
            previous,
        ),
    ]
    return {
        "capacity": capacity(shape),
        "allocatable": allocatable(shape),
        "conditions": conditions,
        # No Hostname address: the apiserver would prefer it for kubectl logs and resolve it through DNS.
        "addresses": [{"type": "InternalIP", "address": HOST_IP}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": host.kubelet_port}},
        "nodeInfo": {
            "machineID": host.machine_id,
            "systemUUID": host.machine_id,
            "bootID": host.boot_id,
            "kernelVersion": host.kernel,
            "osImage": host.os_image,
            "containerRuntimeVersion": "nodeagent://0.1.0",
            "kubeletVersion": host.kubelet_version,
            "kubeProxyVersion": "",
            "operatingSystem": "linux",
            "architecture": "amd64",
        },
    }


def micro_time(ts: float) -> str:
    """A Lease's MicroTime (RFC 3339 with microseconds)."""
    whole = int(ts)
    return rfc3339(whole)[:-1] + f".{int((ts - whole) * 1_000_000):06d}Z"


def lease_manifest(name: str, node_uid: str, now: float) -> dict[str, Any]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": name,
            "namespace": LEASE_NAMESPACE,
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": name, "uid": node_uid}],
        },
        "spec": {"holderIdentity": name, "leaseDurationSeconds": LEASE_DURATION_S, "renewTime": micro_time(now)},
    }
