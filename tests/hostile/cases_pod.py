"""Hostile specs, round two (issue 29):
pod fields the API server refuses (init container names, paths, annotations, envFrom, sidecar accelerators).

Each was accepted by `validate` and the CRD while the API server refused every pod it rendered (gap 8), typed
wrongly (envFrom, gap 9), or let a sidecar take accelerators outside `maxGPUs` (gap 10). Several variants of each
class: the same refusal reached through another list, volume type or container kind.
"""

from __future__ import annotations

from typing import Any

from .model import SCHEMA, UNKNOWN, Hostile, cr, main_container, pod_template, sidecar

_UNKNOWN = "unknown field"
_PATTERN = "should match"
_INIT_MAIN = "must not be named 'sglang'"
_UNIQUE = "container names must be unique"
_MOUNTS = "must not use a mountPath twice"
_ANNOTATIONS = "must not exceed"
_ENV = "exactly one of"
_SIDECAR_GPU = "a sidecar may request only cpu, memory, ephemeral-storage"
_INIT_GPU = "an init container may request only cpu, memory, ephemeral-storage"
_PROJECTED = "each projected source names exactly one"
_LABEL_KEY = "prefix a DNS name of at most 253 characters"

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

    # --- projected sources the pod cannot have (found rendering accepted specs) ---
    Hostile("projected-source-two-kinds",
            cr(_volume(projected={"sources": [{"secret": {"name": "s"}, "configMap": {"name": "c"}}]})),
            "spec.template.spec.volumes", _PROJECTED, SCHEMA, "every pod refused: two kinds in one source"),
    Hostile("projected-source-empty", cr(_volume(projected={"sources": [{}]})),
            "spec.template.spec.volumes", _PROJECTED, SCHEMA, "every pod refused: a source with no kind"),
]
# fmt: on
