"""Every pod the operator renders meets Pod Security "baseline" (the router "restricted"), whatever the template
says; the checker itself is tested against one violation per rule, so a passing pod means something."""

import copy
from typing import Any

import kubernetes_validate
import pytest
import yaml

from sglang_operator.api.spec import SGLangDeploymentSpec
from sglang_operator.render import Owner, harden_pod_spec, render_all
from sglang_operator.render.workers import worker_pod
from tests.conftest import EXAMPLES
from tests.support.render import pss

K8S_VERSION = "1.34.0"
OWNER = Owner(name="demo", namespace="team-a", uid="7f0c2a4e-0000-4000-8000-000000000001")


def spec_of(raw: dict[str, Any]) -> SGLangDeploymentSpec:
    return SGLangDeploymentSpec.model_validate(raw)


def pods_of(objects: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any], dict[str, str]]]:
    """(what, pod spec, pod annotations) for worker pods and the router's pod template."""
    found = []
    for obj in objects:
        if obj["kind"] == "Pod":
            found.append((f"pod {obj['metadata']['name']}", obj["spec"], obj["metadata"].get("annotations") or {}))
        elif obj["kind"] == "Deployment":
            template = obj["spec"]["template"]
            found.append(
                (f"deployment {obj['metadata']['name']}", template["spec"], template["metadata"]["annotations"])
            )
    return found


SPECS = {
    "single-node": {"model": {"path": "m"}},
    "multi-node": {"model": {"path": "m"}, "parallelism": {"tp": 16, "nnodes": 2}},
    "pvc-cache-and-api-key": {
        "model": {"path": "m", "cache": {"type": "persistentVolumeClaim", "claimName": "weights", "readOnly": True}},
        "router": {"apiKeySecretRef": {"name": "key"}, "stickySessions": {"enabled": True}},
    },
}


@pytest.mark.parametrize("name", sorted(SPECS))
def test_rendered_pods_meet_baseline_and_the_router_restricted(name: str) -> None:
    objects = render_all(spec_of(SPECS[name]), OWNER)
    pods = pods_of(objects)
    assert {what.split()[0] for what, _, _ in pods} == {"pod", "deployment"}
    for what, pod_spec, annotations in pods:
        assert pss.baseline(pod_spec, annotations) == [], what
        if what.startswith("deployment"):
            assert pss.restricted(pod_spec, annotations) == [], what
    for obj in objects:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_pods_meet_baseline(example: Any) -> None:
    spec = spec_of(yaml.safe_load(example.read_text())["spec"])
    # A node directory as model cache is the one exception, allowed by an admin (settings), never by the CR alone.
    allowed = ["hostPath volumes: model-cache"] if spec.model.cache.type == "hostPath" else []
    for what, pod_spec, annotations in pods_of(render_all(spec, OWNER)):
        assert pss.baseline(pod_spec, annotations) == (allowed if what.startswith("pod") else []), what


def test_worker_pod_is_locked_down_but_may_run_as_root() -> None:
    pod = worker_pod(spec_of({"model": {"path": "m"}}), OWNER, "r", 0, 0)["spec"]
    assert pod["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}
    assert (pod["hostNetwork"], pod["hostPID"], pod["hostIPC"]) == (False, False, False)
    assert pod["automountServiceAccountToken"] is False and pod["enableServiceLinks"] is False
    assert pod["containers"][0]["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "capabilities": {"drop": ["ALL"]},
    }
    assert "runAsNonRoot" not in pod["securityContext"]  # the lmsysorg/sglang images run as root


def test_router_pod_is_restricted_non_root_with_a_writable_tmp() -> None:
    (deployment,) = [o for o in render_all(spec_of({"model": {"path": "m"}}), OWNER) if o["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 65532,
        "runAsGroup": 65532,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert pod["automountServiceAccountToken"] is False
    (container,) = pod["containers"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["volumeMounts"] == [{"name": "tmp", "mountPath": "/tmp"}]
    assert pod["volumes"] == [{"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}}]


def test_host_path_cache_is_an_existing_directory_mounted_read_only() -> None:
    spec = spec_of({"model": {"path": "m", "cache": {"type": "hostPath", "hostPath": "/models"}}})
    pod = worker_pod(spec, OWNER, "r", 0, 0)
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == "model-cache")
    assert volume["hostPath"] == {"path": "/models", "type": "Directory"}
    mount = next(m for m in pod["spec"]["containers"][0]["volumeMounts"] if m["name"] == "model-cache")
    assert mount["readOnly"] is True
    # Baseline forbids hostPath itself: an admin who allows a host path accepts exactly this one violation.
    assert pss.baseline(pod["spec"], pod["metadata"]["annotations"]) == ["hostPath volumes: model-cache"]


def test_template_annotations_and_labels_never_override_the_operators() -> None:
    spec = spec_of({"model": {"path": "m"}, "parallelism": {"tp": 16, "nnodes": 2}, "template": {"metadata": {
        "labels": {"sglang.ai/deployment": "other", "sglang.ai/component": "router", "sglang.ai/extra": "x",
                   "app.kubernetes.io/managed-by": "me", "team": "a"},
        "annotations": {"sglang.ai/draining-since": "2026-01-01T00:00:00Z", "sglang.ai/warm": "true",
                        "sglang.ai/replica-nodes": "abc", "prometheus.io/port": "1", "note": "kept"}}}})  # fmt: skip
    meta = worker_pod(spec, OWNER, "r", 0, 1)["metadata"]
    assert meta["labels"]["sglang.ai/deployment"] == "demo" and meta["labels"]["sglang.ai/component"] == "worker"
    assert meta["labels"]["app.kubernetes.io/managed-by"] == "sglang-operator" and meta["labels"]["team"] == "a"
    assert "sglang.ai/extra" not in meta["labels"]
    annotations = meta["annotations"]
    assert "sglang.ai/draining-since" not in annotations and "sglang.ai/warm" not in annotations
    assert annotations["sglang.ai/replica-nodes"] == "2" and annotations["prometheus.io/port"] == "30000"
    assert annotations["note"] == "kept"


HOSTILE_POD: dict[str, Any] = {
    "hostNetwork": True, "hostPID": True, "hostIPC": True, "automountServiceAccountToken": True,
    "securityContext": {"runAsUser": 0, "sysctls": [{"name": "kernel.msgmax", "value": "1"}],
                        "seccompProfile": {"type": "Unconfined"}, "seLinuxOptions": {"type": "spc_t"},
                        "appArmorProfile": {"type": "Unconfined"}, "windowsOptions": {"hostProcess": True}},
    "initContainers": [{"name": "init", "image": "x", "securityContext": {"privileged": True}}],
    "containers": [
        {"name": "sglang", "image": "x", "ports": [{"containerPort": 80, "hostPort": 80, "hostIP": "0.0.0.0"}],
         "securityContext": {"privileged": True, "allowPrivilegeEscalation": True, "procMount": "Unmasked",
                             "capabilities": {"add": ["SYS_ADMIN", "NET_RAW"]},
                             "seccompProfile": {"type": "Unconfined"}, "appArmorProfile": {"type": "Unconfined"}}},
        {"name": "sidecar", "image": "y"},
    ],
}  # fmt: skip


def test_harden_pod_spec_removes_every_baseline_violation_and_is_idempotent() -> None:
    original = copy.deepcopy(HOSTILE_POD)
    assert len(pss.baseline(HOSTILE_POD)) >= 12
    hardened = harden_pod_spec(HOSTILE_POD)
    assert original == HOSTILE_POD, "the argument must not change"
    assert pss.baseline(hardened) == []
    assert hardened["securityContext"] == {"runAsUser": 0, "seccompProfile": {"type": "RuntimeDefault"}}
    assert hardened["automountServiceAccountToken"] is False
    assert hardened["containers"][0]["ports"] == [{"containerPort": 80}]
    for container in pss.containers(hardened):
        assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
        assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert harden_pod_spec(hardened) == hardened


def test_template_sidecars_are_hardened_too() -> None:
    spec = spec_of({"model": {"path": "m"}, "template": {"spec": {"containers": [{"name": "proxy", "image": "p"}]}}})
    pod = worker_pod(spec, OWNER, "r", 0, 0)["spec"]
    assert [c["name"] for c in pod["containers"]] == ["sglang", "proxy"]
    assert pod["containers"][1]["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert pss.baseline(pod) == []


@pytest.mark.parametrize(
    ("pod_spec", "rule"),
    [
        ({"hostNetwork": True}, "host namespaces"),
        ({"containers": [{"name": "c", "securityContext": {"privileged": True}}]}, "privileged"),
        ({"containers": [{"name": "c", "securityContext": {"capabilities": {"add": ["NET_ADMIN"]}}}]}, "capabilities"),
        ({"volumes": [{"name": "v", "hostPath": {"path": "/"}}]}, "hostPath volumes"),
        ({"containers": [{"name": "c", "ports": [{"containerPort": 1, "hostPort": 1}]}]}, "host ports"),
        ({"securityContext": {"seccompProfile": {"type": "Unconfined"}}}, "seccomp"),
        ({"ephemeralContainers": [{"name": "e", "securityContext": {"procMount": "Unmasked"}}]}, "/proc mount type"),
        ({"securityContext": {"sysctls": [{"name": "kernel.sem", "value": "1"}]}}, "sysctls"),
        ({"securityContext": {"appArmorProfile": {"type": "Unconfined"}}}, "AppArmor"),
        ({"securityContext": {"seLinuxOptions": {"user": "root"}}}, "SELinux"),
        ({"securityContext": {"windowsOptions": {"hostProcess": True}}}, "hostProcess"),
    ],
)
def test_the_checker_catches_each_baseline_rule(pod_spec: dict[str, Any], rule: str) -> None:
    (violation,) = pss.baseline(pod_spec)
    assert violation.startswith(rule)


def test_the_checker_catches_apparmor_annotations_and_restricted_rules() -> None:
    assert pss.baseline({}, {"container.apparmor.security.beta.kubernetes.io/c": "unconfined"})
    root = {"containers": [{"name": "c"}], "volumes": [{"name": "v", "nfs": {"server": "s", "path": "/"}}]}
    rules = {violation.split(":")[0] for violation in pss.restricted(root)}
    assert rules == {"volume types", "privilege escalation", "running as non-root", "seccomp", "capabilities"}
