"""Accepted specs at the edges of what the pod template allows: every rendered child must be one the API server
admits. `test_pod_fields` checks them with `validate` and kubernetes-validate; `e2e/tests/test_rendered_admission.py`
creates every rendered child on a real API server (`dryRun=All`, strict field validation).

Each reaches a limit the rules of issue 29 (gap 8, 9, 10) draw, from the side that must stay allowed: the longest
label-key prefix, annotations just under the budget, every env and downward API path pods have, paths that contain
dots without being '..', envFrom in its Kubernetes form, sidecars with the resources they may have.
"""

from __future__ import annotations

from typing import Any

from sglang_operator.api.limits import TEMPLATE_ANNOTATION_BYTES

PREFIX_253 = ".".join(["a" * 63, "b" * 63, "c" * 63, "d" * 61])
"""A DNS subdomain of exactly 253 characters: the longest label-key prefix."""

_ENV_FIELDS = (
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
    "spec.nodeName",
    "spec.serviceAccountName",
    "status.hostIP",
    "status.hostIPs",
    "status.podIP",
    "status.podIPs",
    "metadata.labels['app']",
    "metadata.annotations['example.com/note']",
)
_VOLUME_FIELDS = (
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
    "metadata.labels",
    "metadata.annotations",
    "metadata.labels['app']",
)


def _annotations_up_to_the_budget(first: dict[str, str]) -> dict[str, str]:
    """`first` and more annotations, together within a few bytes of TEMPLATE_ANNOTATION_BYTES (keys and values,
    in bytes, as the API server counts)."""
    annotations = dict(first)
    left = TEMPLATE_ANNOTATION_BYTES - sum(len(k.encode()) + len(v.encode()) for k, v in first.items())
    index = 0
    while left > len(key := f"example.com/n{index}"):
        annotations[key] = "x" * min(8192, left - len(key))
        left -= len(key) + len(annotations[key])
        index += 1
    return annotations


def _sidecar(**fields: Any) -> dict[str, Any]:
    return {"name": "helper", "image": "busybox:1.36", **fields}


EDGE_SPECS: dict[str, dict[str, Any]] = {
    "env-from-both-kinds": {
        "model": {"path": "m", "tokenSecretRef": {"name": "hf", "key": "token"}},
        "engine": {"apiKeySecretRef": {"name": "keys", "key": "workers"}},
        "template": {
            "spec": {
                "containers": [
                    {"name": "sglang", "envFrom": [{"secretRef": {"name": "tenant-env"}}]},
                    _sidecar(
                        envFrom=[
                            {"prefix": "CM_", "configMapRef": {"name": "settings", "optional": True}},
                            {"secretRef": {"name": "tenant-env", "optional": False}},
                        ]
                    ),
                ],
                "initContainers": [
                    {"name": "prepare", "image": "busybox:1.36", "envFrom": [{"configMapRef": {"name": "c"}}]}
                ],
            }
        },
    },
    "env-every-source": {
        "model": {"path": "m"},
        "engine": {
            "env": [{"name": f"F{i}", "valueFrom": {"fieldRef": {"fieldPath": p}}} for i, p in enumerate(_ENV_FIELDS)]
        },
        "template": {
            "metadata": {"labels": {"app": "x"}, "annotations": {"example.com/note": "n"}},
            "spec": {
                "containers": [
                    _sidecar(
                        env=[
                            {"name": "PLAIN", "value": ""},
                            {
                                "name": "EMPTY_WITH_REF",
                                "value": "",
                                "valueFrom": {"secretKeyRef": {"name": "s", "key": ".k"}},
                            },
                            {"name": ".dotted", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "a..b"}}},
                            {
                                "name": "CPU",
                                "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu", "divisor": "1m"}},
                            },
                            {"name": "MEM", "valueFrom": {"resourceFieldRef": {"resource": "requests.memory"}}},
                            {
                                "name": "V1",
                                "valueFrom": {"fieldRef": {"fieldPath": "metadata.name", "apiVersion": "v1"}},
                            },
                        ],
                        resources={
                            "requests": {"cpu": "100m", "memory": "64Mi"},
                            "limits": {"cpu": "1", "memory": "128Mi"},
                        },
                    )
                ]
            },
        },
    },
    "volumes-with-dots": {
        "model": {"path": "m"},
        "template": {
            "spec": {
                "volumes": [
                    {"name": "cm", "configMap": {"name": "c", "items": [{"key": ".hidden", "path": ".x/y..z"}]}},
                    {
                        "name": "sec",
                        "secret": {"secretName": "s", "items": [{"key": "a..b", "path": "./a/..b", "mode": 256}]},
                    },
                    {
                        "name": "proj",
                        "projected": {
                            "sources": [
                                {"secret": {"name": "s", "items": [{"key": "k", "path": "s/k"}]}},
                                {"configMap": {"name": "c", "items": [{"key": "k", "path": "c/k"}]}},
                                {
                                    "downwardAPI": {
                                        "items": [
                                            {"path": f"d/{i}", "fieldRef": {"fieldPath": p}}
                                            for i, p in enumerate(_VOLUME_FIELDS)
                                        ]
                                    }
                                },
                            ]
                        },
                    },
                    {
                        "name": "down",
                        "downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]},
                    },
                    {"name": "scratch", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}},
                ],
                "containers": [
                    {
                        "name": "sglang",
                        "volumeMounts": [
                            {"name": "cm", "mountPath": "/etc/tenant", "readOnly": True},
                            {"name": "sec", "mountPath": "/etc/secret", "subPath": "..b"},
                            {"name": "proj", "mountPath": "/dev/shm/tenant"},
                        ],
                    },
                    _sidecar(
                        volumeMounts=[
                            {"name": "scratch", "mountPath": "/dev/shm"},
                            {"name": "down", "mountPath": "/root/.cache/huggingface"},
                            {"name": "cm", "mountPath": "/a", "subPath": "./x/...y/"},
                        ]
                    ),
                ],
                "initContainers": [
                    {
                        "name": "prepare",
                        "image": "busybox:1.36",
                        "volumeMounts": [{"name": "scratch", "mountPath": "/s"}],
                    }
                ],
            }
        },
    },
    "metadata-at-the-limits": {
        "model": {"path": "m"},
        "template": {
            "metadata": {
                "labels": {f"{PREFIX_253}/k": "v"},
                "annotations": _annotations_up_to_the_budget({f"{PREFIX_253}/k": "v"}),
            }
        },
    },
    "sidecar-resources-and-groups": {
        "model": {
            "path": "m",
            "cache": {"type": "persistentVolumeClaim", "claimName": "weights", "mountPath": "/weights"},
        },
        "resources": {"gpuResourceName": "nvidia.com/mig-3g.40gb", "gpusPerNode": 8},
        "workerGroups": [
            {"name": "big", "parallelism": {"tp": 2, "nnodes": 2}, "replicas": 1},
            {
                "name": "small",
                "parallelism": {"tp": 1},
                "replicas": 1,
                "template": {
                    "spec": {
                        "containers": [
                            {"name": "sglang", "resources": {"limits": {"memory": "8Gi"}}},
                            _sidecar(
                                resources={
                                    "requests": {"cpu": "10m", "memory": "16Mi", "ephemeral-storage": "1Gi"},
                                    "limits": {"ephemeral-storage": "2Gi"},
                                }
                            ),
                        ],
                        "initContainers": [
                            {"name": "prepare", "image": "busybox:1.36", "resources": {"requests": {"cpu": "1"}}}
                        ],
                    }
                },
            },
        ],
    },
}
