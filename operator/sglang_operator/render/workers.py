"""Worker pods (one per node of a replica) and the headless Service of multi-node replicas.

Pure: every input is an argument. The pod runs the real `python3 -m sglang.launch_server` command from
`topology.launch_args`, asks for GPUs with requests = limits, mounts /dev/shm as memory for NCCL, keeps weights in a
cache volume, and probes the server in a way that survives minutes of weight loading and a /health that itself
runs a one-token generation (~1 s). Every pod leaves through `harden_pod_spec` (Pod Security "baseline", see
`podsecurity`), and the operator's own labels and annotations win over the template's. The main container's command
and env values are written as kubelet literals (`reserved.kubelet_literal`): a `$(NAME)` a CR put there reaches
SGLang as written, never expanded with the operator's env.
"""

import hashlib
import json
from typing import Any

from pydantic import BaseModel

from .. import names
from ..api.constants import (
    ANNOTATION_REPLICA_NODES,
    COMPONENT_WORKER,
    DIST_INIT_PORT,
    LABEL_COMPONENT,
    LABEL_DEPLOYMENT,
    LABEL_KV_EPOCH,
    LABEL_NODE_RANK,
    LABEL_REPLICA,
    LABEL_REVISION,
    LABEL_WORKER_GROUP,
)
from ..api.groups import PdRole
from ..api.reserved import WORKER_API_KEY_ENV, kubelet_literal
from ..api.spec import RDMA_BACKENDS, SGLangDeploymentSpec
from ..kvepoch import kv_epoch
from ..topology import launch_args, readiness_path, topology
from .meta import Owner, child_labels, object_meta, scrape_annotations, with_operator_keys
from .overrides import merge_pod_spec
from .podsecurity import harden_pod_spec

CONTAINER_NAME = "sglang"
PROBE_PERIOD_SECONDS = 10
# SGLang's /health submits a one-token generation and polls it for up to 20 s; a 1 s timeout would flap.
PROBE_TIMEOUT_SECONDS = 30
TERMINATION_GRACE_SECONDS = 60


def revision_hash(spec: SGLangDeploymentSpec, pd: PdRole | None = None) -> str:
    """Hash of everything that shapes a worker pod; a new value starts a rollout.

    Replicas, router, autoscaling, update strategy and monitoring are left out: changing them must not restart
    GPU servers. The hashed form is kept as it was before the template and env were typed and the version became
    optional (absent fields dropped, the effective version written out), so upgrading the operator does not roll
    every fleet whose spec did not change.
    """
    shaping = spec.model_dump(
        by_alias=True, mode="json", include={"model", "engine", "parallelism", "resources", "template"}
    )
    shaping["engine"]["version"] = spec.engine.sglang_version
    shaping["engine"]["image"] = spec.engine.sglang_image  # optional since a version alone names its image
    if spec.engine.api_key_secret_ref is None:  # a field added later: absent, it leaves the hash as it was
        del shaping["engine"]["apiKeySecretRef"]
    shaping["engine"]["env"] = [
        {"name": var.name, "value": var.value, "valueFrom": _without_none(var.value_from)} for var in spec.engine.env
    ]
    shaping["template"]["spec"] = _without_none(spec.template.spec)
    if spec.disaggregation is not None and pd is not None:  # absent in a colocated fleet: its hash stays
        shaping["disaggregation"] = spec.disaggregation.model_dump(by_alias=True, mode="json")
        if spec.disaggregation.dtype is None:  # a field added later: absent, it leaves the hash as it was
            del shaping["disaggregation"]["dtype"]
        shaping["role"] = {"role": pd.role, "decodeShape": pd.decode_shape}
    digest = hashlib.sha256(json.dumps(shaping, sort_keys=True).encode()).hexdigest()
    return digest[:10]


def _without_none(model: BaseModel | None) -> dict[str, Any] | None:
    return None if model is None else model.model_dump(by_alias=True, mode="json", exclude_none=True)


def worker_labels(owner: Owner, revision: str, replica: int, rank: int, group: str = "") -> dict[str, str]:
    """The implicit group's pods carry no group label: they are the pods of a fleet without groups, unchanged."""
    return {
        **child_labels(owner, COMPONENT_WORKER),
        LABEL_REPLICA: str(replica),
        LABEL_NODE_RANK: str(rank),
        LABEL_REVISION: revision,
        **({LABEL_WORKER_GROUP: group} if group else {}),
    }


def _env(spec: SGLangDeploymentSpec) -> list[dict[str, Any]]:
    def field_ref(path: str) -> dict[str, Any]:
        return {"fieldRef": {"fieldPath": path}}

    env: list[dict[str, Any]] = [
        {"name": "POD_NAME", "valueFrom": field_ref("metadata.name")},
        {"name": "POD_NAMESPACE", "valueFrom": field_ref("metadata.namespace")},
        {"name": "POD_IP", "valueFrom": field_ref("status.podIP")},
        {"name": "HF_HOME", "value": spec.model.cache.mount_path},
    ]
    if spec.model.token_secret_ref is not None:
        ref = spec.model.token_secret_ref
        env.append({"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.key}}})
    if spec.engine.api_key_secret_ref is not None:
        ref = spec.engine.api_key_secret_ref
        env.append({"name": API_KEY_ENV, "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.key}}})
    for var in spec.engine.env:
        env.append(var.model_dump(by_alias=True, exclude_none=True))
    return env


API_KEY_ENV = WORKER_API_KEY_ENV
# SGLang reads its API key from argv only (`--api-key`; no variable, and `--config` needs a YAML file). This launcher
# moves the key from the environment (a Secret reference in the pod spec) into `sys.argv` inside the process, so it
# is in neither the pod spec nor the process's command line (`ps`, /proc/PID/cmdline), then runs the server module
# exactly as `python3 -m sglang.launch_server` would.
LAUNCH_WITH_API_KEY = (
    "import os, runpy, sys; "
    f"key = os.environ.pop({API_KEY_ENV!r}, ''); "
    "sys.argv += ['--api-key', key] if key else []; "
    "runpy.run_module('sglang.launch_server', run_name='__main__', alter_sys=True)"
)


def _command(spec: SGLangDeploymentSpec, launch: list[str]) -> list[str]:
    """`python3 -m sglang.launch_server ARGS`, or the same through LAUNCH_WITH_API_KEY when a key is configured."""
    if spec.engine.api_key_secret_ref is None:
        return launch
    assert launch[:3] == ["python3", "-m", "sglang.launch_server"]
    return ["python3", "-c", LAUNCH_WITH_API_KEY, *launch[3:]]


RDMA_CAPABILITY = "IPC_LOCK"
"""What RDMA needs to pin memory for the NIC: the one capability a worker may get, never `privileged`."""


def uses_rdma(spec: SGLangDeploymentSpec, pd: PdRole | None, rdma_resource: str | None) -> bool:
    """The pod asks for one RDMA device and IPC_LOCK: a disaggregated group whose backend moves KV over RDMA, where
    the operator's settings name the RDMA device plugin's resource (`--rdma-resource`)."""
    dis = spec.disaggregation
    return pd is not None and dis is not None and rdma_resource is not None and dis.transfer_backend in RDMA_BACKENDS


def _resources(spec: SGLangDeploymentSpec, rdma_resource: str | None = None) -> dict[str, Any]:
    gpus = str(topology(spec).gpus_per_pod)
    amounts = {spec.resources.gpu_resource_name: gpus}
    if rdma_resource is not None:
        amounts[rdma_resource] = "1"
    if spec.resources.cpu:
        amounts["cpu"] = spec.resources.cpu
    if spec.resources.memory:
        amounts["memory"] = spec.resources.memory
    return {"requests": dict(amounts), "limits": dict(amounts)}


def _volumes(spec: SGLangDeploymentSpec) -> list[dict[str, Any]]:
    cache = spec.model.cache
    cache_volume: dict[str, Any] = {"name": "model-cache"}
    if cache.type == "persistentVolumeClaim":
        cache_volume["persistentVolumeClaim"] = {"claimName": cache.claim_name, "readOnly": cache.read_only}
    elif cache.type == "hostPath":
        # `Directory`: the node directory must already exist (an admin put the weights there); never created, so
        # a CR cannot make the kubelet create directories on a node. Mounted read-only (`_volume_mounts`).
        cache_volume["hostPath"] = {"path": cache.host_path, "type": "Directory"}
    else:
        cache_volume["emptyDir"] = {"sizeLimit": cache.size_limit} if cache.size_limit else {}
    return [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": spec.resources.shared_memory}},
        cache_volume,
    ]


def _volume_mounts(spec: SGLangDeploymentSpec) -> list[dict[str, Any]]:
    """/dev/shm, and the model cache: read-only when it is a node directory (other pods and tenants share it, so
    no pod may write into it) or a claim declared read-only. A read-only HF_HOME needs the weights already there;
    set `HF_HUB_OFFLINE=1` in `engine.env` so the hub client does not try to write lock files."""
    cache = spec.model.cache
    cache_mount: dict[str, Any] = {"name": "model-cache", "mountPath": cache.mount_path}
    if cache.type == "hostPath" or (cache.type == "persistentVolumeClaim" and cache.read_only):
        cache_mount["readOnly"] = True
    return [{"name": "dshm", "mountPath": "/dev/shm"}, cache_mount]


def _probes(spec: SGLangDeploymentSpec, rank: int) -> dict[str, Any]:
    """Startup covers weight load + graph capture; readiness gates routing; liveness catches a hung server.

    Ranks >= 1 only serve a dummy /health, so every probe of theirs uses it.
    """
    port = spec.engine.port

    def http(path: str, period: int, failures: int) -> dict[str, Any]:
        return {
            "httpGet": {"path": path, "port": port},
            "periodSeconds": period,
            "timeoutSeconds": PROBE_TIMEOUT_SECONDS,
            "failureThreshold": failures,
        }

    ready = readiness_path(spec.engine.sglang_version) if rank == 0 else "/health"
    startup_failures = max(spec.engine.startup_timeout_seconds // PROBE_PERIOD_SECONDS, 1)
    return {
        "startupProbe": http("/health", PROBE_PERIOD_SECONDS, startup_failures),
        "readinessProbe": http(ready, 5, 3),
        "livenessProbe": http("/health", 30, 5),
    }


def worker_pod(
    spec: SGLangDeploymentSpec,
    owner: Owner,
    revision: str,
    replica: int,
    rank: int,
    group: str = "",
    pd: PdRole | None = None,
    rdma_resource: str | None = None,
) -> dict[str, Any]:
    """One pod of replica `replica` of worker group `group`; `spec` is the group's effective spec (`groups`), `pd`
    its role in a disaggregated fleet, `rdma_resource` the RDMA device resource the operator's settings allow."""
    multi_node = spec.parallelism.nnodes > 1
    rdma = uses_rdma(spec, pd, rdma_resource)
    pod_name = names.worker_pod(owner.name, revision, replica, rank, group)
    dist_host = names.dist_init_host(owner.name, owner.namespace, revision, replica, group) if multi_node else None
    labels = with_operator_keys(spec.template.metadata.labels, worker_labels(owner, revision, replica, rank, group))
    if pd is not None:  # the routers of its KV epoch list it, no other (kvepoch.py)
        labels[LABEL_KV_EPOCH] = kv_epoch(spec)
    annotations = with_operator_keys(
        spec.template.metadata.annotations,
        {**scrape_annotations(spec.engine.port), ANNOTATION_REPLICA_NODES: str(spec.parallelism.nnodes)},
    )
    container = {
        "name": CONTAINER_NAME,
        "image": spec.engine.sglang_image,
        "command": _command(spec, launch_args(spec, node_rank=rank, dist_init_host=dist_host, pd=pd)),
        "ports": _ports(spec, multi_node, pd),
        "env": _env(spec),
        "resources": _resources(spec, rdma_resource if rdma else None),
        "volumeMounts": _volume_mounts(spec),
        **_probes(spec, rank),
    }
    pod_spec: dict[str, Any] = {
        # A multi-node replica restarts as a gang, by the operator; a single-node one restarts in place.
        "restartPolicy": "Never" if multi_node else "Always",
        "terminationGracePeriodSeconds": TERMINATION_GRACE_SECONDS,
        "containers": [container],
        "volumes": _volumes(spec),
    }
    if multi_node:
        pod_spec["hostname"] = names.worker_hostname(owner.name, revision, replica, rank, group)
        pod_spec["subdomain"] = names.workers_service(owner.name)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": object_meta(owner, pod_name, labels, annotations),
        # Hardened after the merge, so whatever the template adds (sidecars, init containers) is covered too.
        "spec": harden_pod_spec(
            _main_as_literals(merge_pod_spec(pod_spec, spec.template.spec)),
            {CONTAINER_NAME: (RDMA_CAPABILITY,)} if rdma else None,
        ),
    }


BOOTSTRAP_PORT_NAME = "bootstrap"


def _ports(spec: SGLangDeploymentSpec, multi_node: bool, pd: PdRole | None) -> list[dict[str, Any]]:
    """The engine's port; rank 0's rendezvous port on a multi-node replica; a prefill server's bootstrap port,
    which decode servers and the router reach."""
    ports = [{"name": "http", "containerPort": spec.engine.port, "protocol": "TCP"}]
    if multi_node:
        ports.append({"name": "dist", "containerPort": DIST_INIT_PORT, "protocol": "TCP"})
    if pd is not None and pd.role == "prefill" and spec.disaggregation is not None:
        bootstrap = spec.disaggregation.bootstrap_port
        ports.append({"name": BOOTSTRAP_PORT_NAME, "containerPort": bootstrap, "protocol": "TCP"})
    return ports


def _main_as_literals(pod_spec: dict[str, Any]) -> dict[str, Any]:
    """The main container's command and env values as kubelet literals, after the template's env was appended.

    Defence in depth for CRs stored before `tenant_rules` refused `$(` there: the operator's own parts of that
    command and env hold no `$(` (its env refers to values through `valueFrom`), so escaping the whole container
    escapes exactly what the CR wrote (model.path, servedName, revision, engine.args, engine.env, model.cache's
    mountPath as HF_HOME, the template's env for this container). Sidecars keep theirs: the kubelet expands their
    strings with their own env, which holds only what the tenant wrote there."""

    def literal(container: dict[str, Any]) -> dict[str, Any]:
        if container.get("name") != CONTAINER_NAME:
            return container
        env = [{**var, "value": kubelet_literal(var["value"])} if "value" in var else var for var in container["env"]]
        return {**container, "command": [kubelet_literal(part) for part in container["command"]], "env": env}

    return {**pod_spec, "containers": [literal(container) for container in pod_spec["containers"]]}


def replica_pods(
    spec: SGLangDeploymentSpec,
    owner: Owner,
    revision: str,
    replica: int,
    group: str = "",
    pd: PdRole | None = None,
    rdma_resource: str | None = None,
) -> list[dict[str, Any]]:
    return [
        worker_pod(spec, owner, revision, replica, rank, group, pd, rdma_resource)
        for rank in range(spec.parallelism.nnodes)
    ]


def workers_service(spec: SGLangDeploymentSpec, owner: Owner) -> dict[str, Any]:
    """Headless, publishing not-ready addresses: ranks must find rank 0 before any of them is ready."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": object_meta(owner, names.workers_service(owner.name), child_labels(owner, COMPONENT_WORKER)),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {
                LABEL_DEPLOYMENT: owner.name,
                LABEL_COMPONENT: COMPONENT_WORKER,
                LABEL_NODE_RANK: "0",
            },
            "ports": [
                {"name": "http", "port": spec.engine.port, "targetPort": "http", "protocol": "TCP"},
                {"name": "dist", "port": DIST_INIT_PORT, "targetPort": "dist", "protocol": "TCP"},
            ],
        },
    }
