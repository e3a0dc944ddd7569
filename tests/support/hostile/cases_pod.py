"""Hostile specs, round two (issue 29):
pod fields the API server refuses (init container names, paths, annotations, envFrom, sidecar accelerators,
tolerations, selector requirements, requests over limits, resourceFieldRef divisors).

Each was accepted by `validate` and the CRD while the API server refused every pod it rendered (gap 8), typed
wrongly (envFrom, gap 9), or let a sidecar take accelerators outside `maxGPUs` (gap 10), or the main container's
entry take RDMA devices and accelerators the operator did not give it (issue 37). Several variants of each class: the
same refusal reached through another list, volume type or container kind.
"""

from __future__ import annotations

from typing import Any

from tests.support.hostile.model import SCHEMA, UNKNOWN, Hostile, cr, main_container, pod_template, sidecar

_UNKNOWN = "unknown field"
_PATTERN = "should match"
_INIT_MAIN = "must not be named 'sglang'"
_UNIQUE = "container names must be unique"
_MOUNTS = "must not use a mountPath twice"
_ANNOTATIONS = "must not exceed"
_ENV = "exactly one of"
_SIDECAR_GPU = "a container may request only cpu, memory, ephemeral-storage"
_MAIN_EXTENDED = "a container may request only cpu, memory, ephemeral-storage (the 'sglang' entry hugepages-* too)"
_INIT_GPU = "an init container may request only cpu, memory, ephemeral-storage"
_PROJECTED = "each projected source names exactly one"
_LABEL_KEY = "prefix a DNS name of at most 253 characters"
_SUPPORTED = "supported values"
_EXISTS_VALUE = "operator Exists must not have a value"
_NO_KEY = "without a key must have operator Exists"
_SECONDS = "tolerationSeconds must have effect NoExecute"
_VALUES = "needs values for In and NotIn, none for Exists and DoesNotExist, and exactly one for Gt and Lt"
_OVER_LIMIT = "each request must be at most its limit"
_MAIN_LIMIT = "entry's resources, with resources.cpu and resources.memory"
_DIVISOR = "divisor must be 1m or 1 for cpu"
_DUPLICATE = "Duplicate value"
_TOL = "spec.template.spec.tolerations"
_AFF = "spec.template.spec.affinity"
_NODE_TERM = f"{_AFF}.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"

_C0 = "spec.template.spec.containers[0]"
_V0 = "spec.template.spec.volumes[0]"
_LONG_PREFIX = ".".join(["a" * 63, "b" * 63, "c" * 63, "d" * 62])  # a DNS subdomain of 254 characters


def _init(**fields: Any) -> dict[str, Any]:
    return pod_template({"initContainers": [{"name": "prepare", "image": "busybox:1.36", **fields}]})


def _volume(mount: str = "/data", **source: Any) -> dict[str, Any]:
    """A volume `v` of `source`, mounted by a sidecar (so only the volume's own fields are in question)."""
    spec = sidecar(volumeMounts=[{"name": "v", "mountPath": mount}])
    spec["template"]["spec"]["volumes"] = [{"name": "v", **source}]
    return spec


def _mounted(container: dict[str, Any], volumes: tuple[str, ...] = ("v",)) -> dict[str, Any]:
    return {"volumes": [{"name": name, "emptyDir": {}} for name in volumes], "containers": [container]}


def _items(key: str = "k", path: str = "f") -> list[dict[str, str]]:
    return [{"key": key, "path": path}]


def _env(value_from: dict[str, Any], **extra: Any) -> list[dict[str, Any]]:
    return [{"name": "X", "valueFrom": value_from, **extra}]


def _big_annotations(count: int, char: str = "x") -> dict[str, Any]:
    return {"template": {"metadata": {"annotations": {f"example.com/a{i}": char * 8192 for i in range(count)}}}}


def _tolerations(*tolerations: dict[str, Any]) -> dict[str, Any]:
    return pod_template({"tolerations": list(tolerations)})


def _node_term(**term: Any) -> dict[str, Any]:
    return pod_template({"affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}})  # fmt: skip


def _pod_term(kind: str, **term: Any) -> dict[str, Any]:
    return pod_template(
        {
            "affinity": {
                kind: {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {"topologyKey": "kubernetes.io/hostname", **term}
                    ]
                }
            }
        }
    )


def _expression(operator: str, *values: str, key: str = "example.com/k") -> dict[str, Any]:
    expression: dict[str, Any] = {"key": key, "operator": operator}
    return expression | {"values": list(values)} if values else expression


def _resource_env(resource: str, divisor: str) -> list[dict[str, Any]]:
    return _env({"resourceFieldRef": {"resource": resource, "divisor": divisor}})


def _group(template: dict[str, Any]) -> dict[str, Any]:
    return {"workerGroups": [{"name": "a", "parallelism": {"tp": 1}, "template": template}]}


# fmt: off
CASES: list[Hostile] = [
    # --- container names the pod cannot have (gap 8) ---
    Hostile("init-named-like-main", cr(_init(name="sglang")),
            "spec.template.spec.initContainers", _INIT_MAIN, SCHEMA, "every pod refused: duplicate name sglang"),
    Hostile("init-named-like-sidecar",
            cr(pod_template({"containers": [{"name": "helper", "image": "busybox:1.36"}],
                             "initContainers": [{"name": "helper", "image": "busybox:1.36"}]})),
            "spec.template.spec.containers", _UNIQUE, SCHEMA, "every pod refused: duplicate name helper"),
    Hostile("two-init-same-name",
            cr(pod_template({"initContainers": [{"name": "i", "image": "busybox:1.36"},
                                                {"name": "i", "image": "busybox:1.36"}]})),
            "spec.template.spec.containers", _UNIQUE, SCHEMA, "every pod refused: duplicate name i"),
    Hostile("group-init-named-like-main", cr(_group(_init(name="sglang")["template"])),
            "spec.workerGroups", _INIT_MAIN, SCHEMA,
            "the group's pods refused: duplicate name sglang"),

    # --- '..' in a subPath, an item's path or key, a Secret key (gap 8) ---
    Hostile("subpath-parent",
            cr(pod_template(_mounted({"name": "sglang", "volumeMounts": [
                {"name": "v", "mountPath": "/d", "subPath": ".."}]}))),
            f"{_C0}.volumeMounts[0].subPath", _PATTERN, SCHEMA, "every pod refused: subPath '..'"),
    Hostile("subpath-escapes",
            cr(pod_template(_mounted({"name": "helper", "image": "busybox:1.36", "volumeMounts": [
                {"name": "v", "mountPath": "/d", "subPath": "a/../../etc"}]}))),
            f"{_C0}.volumeMounts[0].subPath", _PATTERN, SCHEMA, "every pod refused: '..' inside a subPath"),
    Hostile("subpath-trailing-parent",
            cr(pod_template(_mounted({"name": "helper", "image": "busybox:1.36", "volumeMounts": [
                {"name": "v", "mountPath": "/d", "subPath": "a/.."}]}))),
            f"{_C0}.volumeMounts[0].subPath", _PATTERN, SCHEMA, "every pod refused: subPath ending in '..'"),
    Hostile("subpath-absolute",
            cr(pod_template(_mounted({"name": "helper", "image": "busybox:1.36", "volumeMounts": [
                {"name": "v", "mountPath": "/d", "subPath": "/etc"}]}))),
            f"{_C0}.volumeMounts[0].subPath", _PATTERN, SCHEMA, "every pod refused: an absolute subPath"),
    Hostile("subpath-expr",
            cr(pod_template(_mounted({"name": "helper", "image": "busybox:1.36", "volumeMounts": [
                {"name": "v", "mountPath": "/d", "subPathExpr": "$(POD_NAME)/../.."}]}))),
            f"{_C0}.volumeMounts[0].subPathExpr", _UNKNOWN, UNKNOWN,
            "a path the kubelet expands from the env at run time"),
    Hostile("configmap-item-path-parent", cr(_volume(configMap={"name": "cm", "items": _items(path="../x")})),
            f"{_V0}.configMap.items[0].path", _PATTERN, SCHEMA, "every pod refused: an item path out of the volume"),
    Hostile("secret-item-path-reserved", cr(_volume(secret={"secretName": "s", "items": _items(path="..data")})),
            f"{_V0}.secret.items[0].path", _PATTERN, SCHEMA, "every pod refused: the kubelet's own ..data"),
    Hostile("secret-item-path-inner-parent",
            cr(_volume(secret={"secretName": "s", "items": _items(path="a/../../b")})),
            f"{_V0}.secret.items[0].path", _PATTERN, SCHEMA, "every pod refused: '..' inside an item path"),
    Hostile("projected-item-path-parent",
            cr(_volume(projected={"sources": [{"secret": {"name": "s", "items": _items(path="x/..")}}]})),
            f"{_V0}.projected.sources[0].secret.items[0].path", _PATTERN, SCHEMA,
            "every pod refused: '..' in a projected item"),
    Hostile("downward-item-path-parent",
            cr(_volume(downwardAPI={"items": [{"path": "..", "fieldRef": {"fieldPath": "metadata.name"}}]})),
            f"{_V0}.downwardAPI.items[0].path", _PATTERN, SCHEMA, "every pod refused: a downward file '..'"),
    Hostile("projected-downward-item-path",
            cr(_volume(projected={"sources": [{"downwardAPI": {"items": [
                {"path": "..labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}}]})),
            f"{_V0}.projected.sources[0].downwardAPI.items[0].path", _PATTERN, SCHEMA,
            "every pod refused: a projected downward file starting with '..'"),
    Hostile("configmap-item-key-parent", cr(_volume(configMap={"name": "cm", "items": _items(key="..")})),
            f"{_V0}.configMap.items[0].key", _PATTERN, SCHEMA, "a key no ConfigMap can hold: the pod never starts"),
    Hostile("secret-item-key-dot", cr(_volume(secret={"secretName": "s", "items": _items(key=".")})),
            f"{_V0}.secret.items[0].key", _PATTERN, SCHEMA, "a key no Secret can hold: the pod never starts"),
    Hostile("projected-item-key-slash",
            cr(_volume(projected={"sources": [{"configMap": {"name": "cm", "items": _items(key="a/b")}}]})),
            f"{_V0}.projected.sources[0].configMap.items[0].key", _PATTERN, SCHEMA,
            "a key no ConfigMap can hold"),
    Hostile("env-secret-key-parent", cr(sidecar(env=_env({"secretKeyRef": {"name": "s", "key": ".."}}))),
            f"{_C0}.env[0].valueFrom.secretKeyRef.key", _PATTERN, SCHEMA, "every pod refused: Secret key '..'"),
    Hostile("env-configmap-key-chdir",
            cr(main_container(env=_env({"configMapKeyRef": {"name": "cm", "key": "..x"}}))),
            f"{_C0}.env[0].valueFrom.configMapKeyRef.key", _PATTERN, SCHEMA,
            "every pod refused: a key starting with '..'"),
    Hostile("engine-env-secret-key-bad",
            cr({"engine": {"env": _env({"secretKeyRef": {"name": "s", "key": "a b"}})}}),
            "spec.engine.env[0].valueFrom.secretKeyRef.key", _PATTERN, SCHEMA, "every pod refused: key 'a b'"),

    # --- annotations over the pod's 256 KiB (gap 8) ---
    Hostile("annotations-over-pod-limit", cr(_big_annotations(32)),
            "spec.template.metadata.annotations", _ANNOTATIONS, SCHEMA,
            "every pod refused: annotations over 256 KiB"),
    Hostile("annotations-fill-operator-share", cr(_big_annotations(31) | {
                "template": {"metadata": {"annotations": {
                    **_big_annotations(31)["template"]["metadata"]["annotations"], "example.com/z": "x" * 6000}}}}),
            "spec.template.metadata.annotations", _ANNOTATIONS, SCHEMA,
            "under 256 KiB alone, over it with the operator's own annotations"),
    Hostile("annotations-multibyte", cr(_big_annotations(20, char="\u00e9")),
            "spec.template.metadata.annotations", _ANNOTATIONS, SCHEMA,
            "160 Ki characters but 320 KiB: the API server counts bytes"),
    Hostile("group-annotations-over-pod-limit", cr(_group(_big_annotations(32)["template"])),
            "spec.workerGroups", _ANNOTATIONS, SCHEMA,
            "the group's pods refused: annotations over 256 KiB"),

    # --- a mount on a path the operator mounts, or twice in one container (gap 8) ---
    Hostile("main-mount-on-dev-shm",
            cr(pod_template(_mounted({"name": "sglang", "volumeMounts": [{"name": "v", "mountPath": "/dev/shm"}]}))),
            "spec.template.spec.containers", "must not use /dev/shm or model.cache.mountPath", SCHEMA,
            "every pod refused: /dev/shm mounted twice"),
    Hostile("main-mount-on-default-cache",
            cr(pod_template(_mounted({"name": "sglang", "volumeMounts": [
                {"name": "v", "mountPath": "/root/.cache/huggingface"}]}))),
            "spec.template.spec.containers", "model.cache.mountPath", SCHEMA,
            "every pod refused: the cache path mounted twice"),
    Hostile("main-mount-on-custom-cache",
            cr({"model": {"cache": {"mountPath": "/weights"}},
                **pod_template(_mounted({"name": "sglang", "volumeMounts": [
                    {"name": "v", "mountPath": "/weights"}]}))}),
            "spec.template.spec.containers", "model.cache.mountPath", SCHEMA,
            "every pod refused: the cache path mounted twice"),
    Hostile("sidecar-mount-path-twice",
            cr(pod_template(_mounted({"name": "helper", "image": "busybox:1.36", "volumeMounts": [
                {"name": "v", "mountPath": "/d"}, {"name": "w", "mountPath": "/d"}]}, volumes=("v", "w")))),
            "spec.template.spec.containers", _MOUNTS, SCHEMA, "every pod refused: mountPath /d twice"),
    Hostile("init-mount-path-twice",
            cr(pod_template({"volumes": [{"name": "v", "emptyDir": {}}],
                             "initContainers": [{"name": "i", "image": "busybox:1.36", "volumeMounts": [
                                 {"name": "v", "mountPath": "/d"}, {"name": "v", "mountPath": "/d"}]}]})),
            "spec.template.spec.initContainers", _MOUNTS, SCHEMA, "every pod refused: mountPath /d twice"),
    Hostile("cache-on-dev-shm", cr({"model": {"cache": {"mountPath": "/dev/shm"}}}),
            "spec.model.cache.mountPath", "must not be /dev/shm", SCHEMA,
            "every pod refused: the cache over the shared memory"),

    # --- a fieldRef to a path pods do not have (gap 8) ---
    Hostile("env-fieldref-phase", cr(sidecar(env=_env({"fieldRef": {"fieldPath": "status.phase"}}))),
            f"{_C0}.env[0].valueFrom.fieldRef.fieldPath", _PATTERN, SCHEMA,
            "every pod refused: env cannot read status.phase"),
    Hostile("env-fieldref-all-labels", cr(main_container(env=_env({"fieldRef": {"fieldPath": "metadata.labels"}}))),
            f"{_C0}.env[0].valueFrom.fieldRef.fieldPath", _PATTERN, SCHEMA,
            "every pod refused: env reads one label, not all"),
    Hostile("env-fieldref-owner",
            cr({"engine": {"env": _env({"fieldRef": {"fieldPath": "metadata.ownerReferences"}})}}),
            "spec.engine.env[0].valueFrom.fieldRef.fieldPath", _PATTERN, SCHEMA,
            "every pod refused: no such downward field"),
    Hostile("env-fieldref-bad-subscript",
            cr(sidecar(env=_env({"fieldRef": {"fieldPath": "spec.nodeName['x']"}}))),
            f"{_C0}.env[0].valueFrom.fieldRef.fieldPath", _PATTERN, SCHEMA,
            "every pod refused: only labels and annotations take a subscript"),
    Hostile("env-fieldref-api-version",
            cr(sidecar(env=_env({"fieldRef": {"fieldPath": "metadata.name", "apiVersion": "v2"}}))),
            f"{_C0}.env[0].valueFrom.fieldRef.apiVersion", "supported values", SCHEMA,
            "every pod refused: only v1 field paths exist"),
    Hostile("env-resourcefieldref-gpu",
            cr(sidecar(env=_env({"resourceFieldRef": {"resource": "limits.nvidia.com/gpu"}}))),
            f"{_C0}.env[0].valueFrom.resourceFieldRef.resource", _PATTERN, SCHEMA,
            "every pod refused: not a resource the downward API exposes"),
    Hostile("volume-fieldref-pod-ip",
            cr(_volume(downwardAPI={"items": [{"path": "ip", "fieldRef": {"fieldPath": "status.podIP"}}]})),
            f"{_V0}.downwardAPI.items[0].fieldRef.fieldPath", _PATTERN, SCHEMA,
            "every pod refused: a volume cannot project status.podIP"),
    Hostile("projected-fieldref-node",
            cr(_volume(projected={"sources": [{"downwardAPI": {"items": [
                {"path": "node", "fieldRef": {"fieldPath": "spec.nodeName"}}]}}]})),
            f"{_V0}.projected.sources[0].downwardAPI.items[0].fieldRef.fieldPath", _PATTERN, SCHEMA,
            "every pod refused: a volume cannot project spec.nodeName"),
    Hostile("downward-item-without-source", cr(_volume(downwardAPI={"items": [{"path": "f"}]})),
            f"{_V0}.downwardAPI.items[0].fieldRef", "is required", SCHEMA,
            "every pod refused: a downward file with no source"),

    # --- a label-key prefix over 253 characters: validate refused it, CEL did not (gap 8) ---
    Hostile("label-key-prefix-254", cr({"template": {"metadata": {"labels": {f"{_LONG_PREFIX}/k": "v"}}}}),
            "spec.template.metadata", _LABEL_KEY, SCHEMA, "every pod refused: a label key prefix of 254 characters"),
    Hostile("annotation-key-prefix-254",
            cr({"template": {"metadata": {"annotations": {f"{_LONG_PREFIX}/k": "v"}}}}),
            "spec.template.metadata", _LABEL_KEY, SCHEMA,
            "every pod refused: an annotation key prefix of 254 characters"),

    # --- env entries the pod cannot have (gap 8) and envFrom typed as Kubernetes does (gap 9) ---
    Hostile("env-value-and-value-from",
            cr(sidecar(env=_env({"secretKeyRef": {"name": "s", "key": "k"}}, value="x"))),
            "spec.template.spec.containers", _ENV, SCHEMA, "every pod refused: value and valueFrom"),
    Hostile("env-value-from-empty", cr({"engine": {"env": _env({})}}),
            "spec.engine.env", _ENV, SCHEMA, "every pod refused: valueFrom with no source"),
    Hostile("env-value-from-two-sources",
            cr(main_container(env=_env({"secretKeyRef": {"name": "s", "key": "k"},
                                        "configMapKeyRef": {"name": "c", "key": "k"}}))),
            "spec.template.spec.containers", _ENV, SCHEMA, "every pod refused: two sources"),
    Hostile("init-env-value-from-two-sources",
            cr(_init(env=_env({"fieldRef": {"fieldPath": "metadata.name"},
                               "resourceFieldRef": {"resource": "limits.cpu"}}))),
            "spec.template.spec.initContainers", _ENV, SCHEMA, "every pod refused: two sources"),
    Hostile("envfrom-secret-with-key",
            cr(main_container(envFrom=[{"secretRef": {"name": "s", "key": "token"}}])),
            f"{_C0}.envFrom[0].secretRef.key", _UNKNOWN, UNKNOWN,
            "envFrom has no key: a lenient create injected the whole Secret"),
    Hostile("envfrom-configmap-with-key",
            cr(sidecar(envFrom=[{"configMapRef": {"name": "c", "key": "k"}}])),
            f"{_C0}.envFrom[0].configMapRef.key", _UNKNOWN, UNKNOWN, "envFrom has no key"),
    Hostile("envfrom-other-namespace",
            cr(sidecar(envFrom=[{"secretRef": {"name": "s", "namespace": "kube-system"}}])),
            f"{_C0}.envFrom[0].secretRef.namespace", _UNKNOWN, UNKNOWN, "a Secret of another namespace"),
    Hostile("envfrom-both-sources",
            cr(sidecar(envFrom=[{"secretRef": {"name": "s"}, "configMapRef": {"name": "c"}}])),
            "spec.template.spec.containers", "exactly one of configMapRef and secretRef", SCHEMA,
            "every pod refused: two sources in one envFrom entry"),
    Hostile("envfrom-no-source", cr(main_container(envFrom=[{"prefix": "X_"}])),
            "spec.template.spec.containers", "exactly one of configMapRef and secretRef", SCHEMA,
            "every pod refused: an envFrom entry with no source"),
    Hostile("init-envfrom-both-sources",
            cr(_init(envFrom=[{"secretRef": {"name": "s"}, "configMapRef": {"name": "c"}}])),
            "spec.template.spec.initContainers", "exactly one of configMapRef and secretRef", SCHEMA,
            "every pod refused: two sources in one envFrom entry"),
    Hostile("envfrom-prefix-digit", cr(sidecar(envFrom=[{"prefix": "1X", "secretRef": {"name": "s"}}])),
            f"{_C0}.envFrom[0].prefix", _PATTERN, SCHEMA, "not an env name"),
    Hostile("envfrom-prefix-equals", cr(main_container(envFrom=[{"prefix": "A=", "configMapRef": {"name": "c"}}])),
            f"{_C0}.envFrom[0].prefix", _PATTERN, SCHEMA, "every pod refused: '=' in an env name"),
    Hostile("env-name-dotdot", cr(sidecar(env=[{"name": "..", "value": "x"}])),
            f"{_C0}.env[0].name", _PATTERN, SCHEMA, "refused where env names are not relaxed"),

    # --- a sidecar or init container taking accelerators of another name (gap 10) ---
    Hostile("sidecar-mig-slices",
            cr(sidecar(resources={"limits": {"nvidia.com/mig-1g.10gb": "7"}})),
            "spec.template.spec.containers", _SIDECAR_GPU, SCHEMA, "MIG slices outside maxGPUs"),
    Hostile("sidecar-gpu-on-mig-fleet",
            cr({"resources": {"gpuResourceName": "nvidia.com/mig-3g.40gb"},
                **sidecar(resources={"requests": {"nvidia.com/gpu": "8"}, "limits": {"nvidia.com/gpu": "8"}})}),
            "spec.template.spec.containers", _SIDECAR_GPU, SCHEMA, "whole GPUs beside a MIG fleet"),
    Hostile("sidecar-amd-gpu", cr(sidecar(resources={"limits": {"amd.com/gpu": "8"}})),
            "spec.template.spec.containers", _SIDECAR_GPU, SCHEMA, "AMD GPUs outside maxGPUs"),
    Hostile("sidecar-tpu", cr(sidecar(resources={"limits": {"google.com/tpu": "4"}})),
            "spec.template.spec.containers", _SIDECAR_GPU, SCHEMA, "TPUs outside maxGPUs"),
    Hostile("sidecar-gaudi", cr(sidecar(resources={"requests": {"habana.ai/gaudi": "8"}})),
            "spec.template.spec.containers", _SIDECAR_GPU, SCHEMA, "Gaudi cards outside maxGPUs"),
    Hostile("sidecar-intel-gpu", cr(sidecar(resources={"limits": {"gpu.intel.com/i915": "1"}})),
            "spec.template.spec.containers", _SIDECAR_GPU, SCHEMA, "Intel GPUs outside maxGPUs"),
    Hostile("sidecar-unqualified-resource", cr(sidecar(resources={"limits": {"gpu": "1"}})),
            "spec.template.spec.containers", _SIDECAR_GPU, SCHEMA, "every pod refused: not a resource name"),
    Hostile("init-mig-slices", cr(_init(resources={"limits": {"nvidia.com/mig-1g.10gb": "7"}})),
            "spec.template.spec.initContainers", _INIT_GPU, SCHEMA, "MIG slices held through the init phase"),
    Hostile("init-amd-gpu", cr(_init(resources={"requests": {"amd.com/gpu": "1"}, "limits": {"amd.com/gpu": "1"}})),
            "spec.template.spec.initContainers", _INIT_GPU, SCHEMA, "an AMD GPU outside maxGPUs"),
    Hostile("group-sidecar-mig-slices",
            cr(_group(sidecar(resources={"limits": {"nvidia.com/mig-1g.10gb": "7"}})["template"])),
            "spec.workerGroups", _SIDECAR_GPU, SCHEMA,
            "MIG slices outside maxGPUs in a group's pods"),

    # --- the main container's entry taking devices the operator gives it, or others outside maxGPUs (issue 37) ---
    Hostile("main-rdma-without-the-admins-setting",
            cr(main_container(resources={"requests": {"rdma/rdma_shared_device_a": "1"},
                                         "limits": {"rdma/rdma_shared_device_a": "1"}})),
            "spec.template.spec.containers", _MAIN_EXTENDED, SCHEMA,
            "an RDMA device the admin gave no fleet (--rdma-resource unset), with IPC_LOCK's use for it"),
    Hostile("main-eight-rdma-devices",
            cr(main_container(resources={"requests": {"rdma/ib": "8"}, "limits": {"rdma/ib": "8"}})),
            "spec.template.spec.containers", _MAIN_EXTENDED, SCHEMA,
            "8 RDMA devices per pod where the operator renders 1: the node's shared devices taken"),
    Hostile("main-amd-gpus", cr(main_container(resources={"limits": {"amd.com/gpu": "8"}})),
            "spec.template.spec.containers", _MAIN_EXTENDED, SCHEMA, "AMD GPUs beside the fleet's, outside maxGPUs"),
    Hostile("main-mig-slices", cr(main_container(resources={"limits": {"nvidia.com/mig-1g.10gb": "7"}})),
            "spec.template.spec.containers", _MAIN_EXTENDED, SCHEMA, "MIG slices beside the GPUs, outside maxGPUs"),
    Hostile("main-tpus", cr(main_container(resources={"requests": {"google.com/tpu": "4"},
                                                      "limits": {"google.com/tpu": "4"}})),
            "spec.template.spec.containers", _MAIN_EXTENDED, SCHEMA, "TPUs outside maxGPUs"),
    Hostile("group-main-amd-gpus",
            cr(_group(main_container(resources={"limits": {"amd.com/gpu": "8"}})["template"])),
            "spec.workerGroups[0].template.spec.containers", _MAIN_EXTENDED, SCHEMA,
            "AMD GPUs outside maxGPUs in a group's pods"),

    # --- projected sources the pod cannot have (found rendering accepted specs) ---
    Hostile("projected-source-two-kinds",
            cr(_volume(projected={"sources": [{"secret": {"name": "s"}, "configMap": {"name": "c"}}]})),
            "spec.template.spec.volumes", _PROJECTED, SCHEMA, "every pod refused: two kinds in one source"),
    Hostile("projected-source-empty", cr(_volume(projected={"sources": [{}]})),
            "spec.template.spec.volumes", _PROJECTED, SCHEMA, "every pod refused: a source with no kind"),

    # --- tolerations the API server refuses ---
    Hostile("toleration-exists-with-value", cr(_tolerations({"key": "k", "operator": "Exists", "value": "v"})),
            _TOL, _EXISTS_VALUE, SCHEMA, "every pod refused: Exists with a value"),
    Hostile("toleration-no-key-equal", cr(_tolerations({"operator": "Equal", "value": "v"})),
            _TOL, _NO_KEY, SCHEMA, "every pod refused: an empty key needs Exists"),
    Hostile("toleration-empty-key-default-operator", cr(_tolerations({"key": "", "effect": "NoSchedule"})),
            _TOL, _NO_KEY, SCHEMA, "every pod refused: no operator means Equal"),
    Hostile("toleration-seconds-no-schedule",
            cr(_tolerations({"key": "k", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 60})),
            _TOL, _SECONDS, SCHEMA, "every pod refused: tolerationSeconds on NoSchedule"),
    Hostile("toleration-seconds-no-effect",
            cr(_tolerations({"key": "k", "operator": "Exists", "tolerationSeconds": 60})),
            _TOL, _SECONDS, SCHEMA, "every pod refused: tolerationSeconds on every effect"),
    Hostile("toleration-operator-gt", cr(_tolerations({"key": "k", "operator": "Gt", "value": "5"})),
            f"{_TOL}[0].operator", _SUPPORTED, SCHEMA, "refused where the comparison operators are gated off"),
    Hostile("toleration-value-not-label-value", cr(_tolerations({"key": "k", "operator": "Equal", "value": "a b"})),
            f"{_TOL}[0].value", _PATTERN, SCHEMA, "every pod refused: not a label value"),
    Hostile("toleration-key-not-label-key", cr(_tolerations({"key": "bad key", "operator": "Exists"})),
            f"{_TOL}[0].key", _PATTERN, SCHEMA, "every pod refused: not a label key"),
    Hostile("group-toleration-exists-with-value",
            cr(_group(_tolerations({"key": "k", "operator": "Exists", "value": "v"})["template"])),
            "spec.workerGroups", _EXISTS_VALUE, SCHEMA, "the group's pods refused: Exists with a value"),

    # --- selector requirements with the wrong number of values, and fields pods cannot select on ---
    Hostile("node-affinity-in-without-values", cr(_node_term(matchExpressions=[_expression("In")])),
            _AFF, _VALUES, SCHEMA, "every pod refused: In with no values"),
    Hostile("node-affinity-exists-with-values", cr(_node_term(matchExpressions=[_expression("Exists", "a")])),
            _AFF, _VALUES, SCHEMA, "every pod refused: Exists with values"),
    Hostile("node-affinity-gt-two-values", cr(_node_term(matchExpressions=[_expression("Gt", "1", "2")])),
            _AFF, _VALUES, SCHEMA, "every pod refused: Gt with two values"),
    Hostile("preferred-node-affinity-notin-empty",
            cr(pod_template({"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 1, "preference": {"matchExpressions": [_expression("NotIn")]}}]}}})),
            _AFF, _VALUES, SCHEMA, "every pod refused: NotIn with no values"),
    Hostile("pod-affinity-in-without-values",
            cr(_pod_term("podAffinity", labelSelector={"matchExpressions": [_expression("In")]})),
            _AFF, _VALUES, SCHEMA, "every pod refused: In with no values"),
    Hostile("pod-anti-affinity-namespace-exists-with-values",
            cr(_pod_term("podAntiAffinity",
                         namespaceSelector={"matchExpressions": [_expression("DoesNotExist", "x")]})),
            _AFF, _VALUES, SCHEMA, "every pod refused: DoesNotExist with values"),
    Hostile("pod-affinity-label-selector-gt",
            cr(_pod_term("podAffinity", labelSelector={"matchExpressions": [_expression("Gt", "1")]})),
            f"{_AFF}.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].labelSelector.matchExpressions[0]"
            ".operator", _SUPPORTED, SCHEMA, "every pod refused: Gt is a node selector operator only"),
    Hostile("node-affinity-value-not-label-value",
            cr(_node_term(matchExpressions=[_expression("In", "a b")])),
            f"{_NODE_TERM}.matchExpressions[0].values[0]", _PATTERN, SCHEMA, "every pod refused: not a label value"),
    Hostile("match-fields-label-key",
            cr(_node_term(matchFields=[_expression("In", "node-1", key="metadata.labels")])),
            f"{_NODE_TERM}.matchFields[0].key", _SUPPORTED, SCHEMA,
            "every pod refused: metadata.name is the only node field"),
    Hostile("match-fields-two-values",
            cr(_node_term(matchFields=[_expression("In", "node-1", "node-2", key="metadata.name")])),
            f"{_NODE_TERM}.matchFields[0].values", "at most 1 item", SCHEMA,
            "every pod refused: one node name per field requirement"),
    Hostile("match-fields-exists", cr(_node_term(matchFields=[_expression("Exists", key="metadata.name")])),
            f"{_NODE_TERM}.matchFields[0].operator", _SUPPORTED, SCHEMA, "every pod refused: In or NotIn only"),
    Hostile("node-selector-value-not-label-value", cr(pod_template({"nodeSelector": {"pool": "gpu pool"}})),
            "spec.template.spec.nodeSelector.pool", _PATTERN, SCHEMA, "every pod refused: not a label value"),
    Hostile("spread-in-without-values",
            cr(pod_template({"topologySpreadConstraints": [
                {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule",
                 "labelSelector": {"matchExpressions": [_expression("In")]}}]})),
            "spec.template.spec.topologySpreadConstraints", _VALUES, SCHEMA, "every pod refused: In with no values"),
    Hostile("group-node-affinity-in-without-values",
            cr(_group(_node_term(matchExpressions=[_expression("In")])["template"])),
            "spec.workerGroups", _VALUES, SCHEMA, "the group's pods refused: In with no values"),

    # --- requests over limits, and extended resources whose request is not their limit ---
    Hostile("sidecar-cpu-request-over-limit",
            cr(sidecar(resources={"requests": {"cpu": "2"}, "limits": {"cpu": "1500m"}})),
            "spec.template.spec.containers", _OVER_LIMIT, SCHEMA, "every pod refused: request over limit"),
    Hostile("sidecar-memory-request-over-limit",
            cr(sidecar(resources={"requests": {"memory": "1Gi"}, "limits": {"memory": "1G"}})),
            "spec.template.spec.containers", _OVER_LIMIT, SCHEMA, "every pod refused: 1Gi is more than 1G"),
    Hostile("init-storage-request-over-limit",
            cr(_init(resources={"requests": {"ephemeral-storage": "2e9"}, "limits": {"ephemeral-storage": "1Gi"}})),
            "spec.template.spec.initContainers", _OVER_LIMIT, SCHEMA, "every pod refused: request over limit"),
    Hostile("main-cpu-request-over-resources",
            cr({"resources": {"cpu": "8"}, **main_container(resources={"requests": {"cpu": "16"}})}),
            "spec.template.spec.containers", _MAIN_LIMIT, SCHEMA,
            "every pod refused: the template's request over resources.cpu, the limit"),
    Hostile("main-memory-limit-under-resources",
            cr({"resources": {"memory": "64Gi"}, **main_container(resources={"limits": {"memory": "32Gi"}})}),
            "spec.template.spec.containers", _MAIN_LIMIT, SCHEMA,
            "every pod refused: resources.memory, the request, over the template's limit"),
    Hostile("main-extended-request-without-limit",
            cr(main_container(resources={"requests": {"rdma/ib": "1"}})),
            "spec.template.spec.containers", _MAIN_EXTENDED, SCHEMA,
            "every pod refused: an extended request needs a limit (and an RDMA device is the operator's to give)"),
    Hostile("main-extended-request-below-limit",
            cr(main_container(resources={"requests": {"rdma/ib": "1"}, "limits": {"rdma/ib": "2"}})),
            "spec.template.spec.containers", _MAIN_EXTENDED, SCHEMA,
            "every pod refused: an extended request must equal its limit (and is the operator's to give)"),
    Hostile("main-extended-fraction", cr(main_container(resources={"limits": {"rdma/ib": "500m"}})),
            "spec.template.spec.containers", _MAIN_EXTENDED, SCHEMA, "every pod refused: half a device"),
    Hostile("main-hugepages-request-without-limit",
            cr(main_container(resources={"requests": {"hugepages-2Mi": "1Gi"}})),
            "spec.template.spec.containers", _MAIN_LIMIT, SCHEMA, "every pod refused: hugepages need a limit"),
    Hostile("main-hugepages-request-below-limit",
            cr(main_container(resources={"requests": {"hugepages-2Mi": "1Gi"}, "limits": {"hugepages-2Mi": "2Gi"}})),
            "spec.template.spec.containers", _MAIN_LIMIT, SCHEMA,
            "every pod refused: a hugepages request must equal its limit"),
    Hostile("group-main-cpu-request-over-resources",
            cr({"resources": {"cpu": "8"},
                **_group(main_container(resources={"requests": {"cpu": "64"}})["template"])}),
            "spec.workerGroups", _MAIN_LIMIT, SCHEMA, "the group's pods refused: request over resources.cpu"),

    # --- resourceFieldRef divisors the API server refuses ---
    Hostile("env-cpu-divisor-mebibyte", cr(sidecar(env=_resource_env("limits.cpu", "1Mi"))),
            "spec.template.spec.containers", _DIVISOR, SCHEMA, "every pod refused: a memory divisor for cpu"),
    Hostile("env-memory-divisor-milli", cr(main_container(env=_resource_env("requests.memory", "1m"))),
            "spec.template.spec.containers", _DIVISOR, SCHEMA, "every pod refused: a cpu divisor for memory"),
    Hostile("engine-env-storage-divisor-milli",
            cr({"engine": {"env": _resource_env("limits.ephemeral-storage", "1m")}}),
            "spec.engine.env", _DIVISOR, SCHEMA, "every pod refused: a cpu divisor for storage"),
    Hostile("init-env-cpu-divisor-kilo", cr(_init(env=_resource_env("requests.cpu", "1k"))),
            "spec.template.spec.initContainers", _DIVISOR, SCHEMA, "every pod refused: 1k is not a cpu divisor"),
    Hostile("env-divisor-two", cr(sidecar(env=_resource_env("limits.memory", "2"))),
            f"{_C0}.env[0].valueFrom.resourceFieldRef.divisor", _SUPPORTED, SCHEMA,
            "every pod refused: not a power of the unit"),
    Hostile("env-divisor-not-canonical", cr(sidecar(env=_resource_env("limits.cpu", "1000m"))),
            f"{_C0}.env[0].valueFrom.resourceFieldRef.divisor", _SUPPORTED, SCHEMA,
            "accepted by the API server as 1, refused here: divisors are written as Kubernetes writes them"),

    # --- a projected source giving one path twice (the API server's "conflicting duplicate paths") ---
    Hostile("projected-secret-path-twice",
            cr(_volume(projected={"sources": [{"secret": {"name": "s", "items": [*_items("a", "f"),
                                                                                 *_items("b", "f")]}}]})),
            f"{_V0}.projected.sources[0].secret.items", _DUPLICATE, SCHEMA, "every pod refused: path f twice"),
    Hostile("projected-configmap-path-twice",
            cr(_volume(projected={"sources": [{"configMap": {"name": "c", "items": [*_items("a", "x/y"),
                                                                                    *_items("a", "x/y")]}}]})),
            f"{_V0}.projected.sources[0].configMap.items", _DUPLICATE, SCHEMA,
            "every pod refused: the same item twice"),
    Hostile("projected-downward-path-twice",
            cr(_volume(projected={"sources": [{"downwardAPI": {"items": [
                {"path": "n", "fieldRef": {"fieldPath": "metadata.name"}},
                {"path": "n", "fieldRef": {"fieldPath": "metadata.namespace"}}]}}]})),
            f"{_V0}.projected.sources[0].downwardAPI.items", _DUPLICATE, SCHEMA, "every pod refused: path n twice"),
    Hostile("group-projected-secret-path-twice",
            cr(_group(_volume(projected={"sources": [{"secret": {"name": "s", "items": [
                *_items("a", "f"), *_items("b", "f")]}}]})["template"])),
            "spec.workerGroups[0].template.spec.volumes[0].projected.sources[0].secret.items", _DUPLICATE, SCHEMA,
            "the group's pods refused: path f twice"),
]
# fmt: on
