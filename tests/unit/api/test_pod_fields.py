"""Pod fields a CR may give and the API server would refuse in a pod (issue 29, gaps 8-10), at the unit level.

- The path, key and fieldRef patterns of `podtypes` agree with Kubernetes' own checks (ported here from
  `pkg/apis/core/validation` and apimachinery as oracles) on every short string over the characters that matter.
- envFrom has Kubernetes' shape; the operator's own env is in `env`, which the kubelet applies after `envFrom`.
- The operator's annotations fit the share of 256 KiB the template leaves them.
- Sidecars and init containers get cpu, memory and ephemeral-storage, nothing else; the main container's entry
  these and hugepages (issue 37): its GPUs and RDMA device are the operator's, whatever the template says.
- Strings that reach exec hold no NUL, command-line values no control character, in one class that the API server's
  RE2 and `validate` read alike (issue 37); Secret keys are keys a Secret can hold.
- Tolerations, selector requirements, requests over limits and resourceFieldRef divisors are refused where
  Kubernetes 1.37's pod validation (ported as oracles) refuses them.
- Every edge-case spec of `edge_specs` is accepted and renders children that pass kubernetes-validate (the e2e twin
  sends them to a real API server).
"""

from __future__ import annotations

import itertools
import re
from typing import Any

import kubernetes_validate
import pytest

from localcluster.nodeagent.envvars import PodFacts, container_env
from sglang_operator.api.base import CONTROL, NO_NUL
from sglang_operator.api.constants import ANNOTATION_DRAINING, ANNOTATION_SPEC_HASH, ANNOTATION_WARM
from sglang_operator.api.crdgen import render_crd_yaml
from sglang_operator.api.limits import OPERATOR_ANNOTATION_BYTES, POD_ANNOTATION_BYTES, TEMPLATE_ANNOTATION_BYTES
from sglang_operator.api.pod_rules import SIDECAR_RESOURCES
from sglang_operator.api.podtemplate import DIVISORS, ENV_NAME
from sglang_operator.api.podtypes import (
    CONFIG_KEY,
    DESCENDING_PATH,
    ENV_FIELD_PATH,
    RELATIVE_PATH,
    VOLUME_FIELD_PATH,
)
from sglang_operator.api.resource_rules import quantity
from sglang_operator.api.spec import SECRET_KEY, SGLangDeploymentSpec
from sglang_operator.api.validation import parse_spec
from sglang_operator.render import Owner, render_all
from sglang_operator.render.workers import API_KEY_ENV, worker_pod
from tests.support.api.edge_specs import EDGE_SPECS

K8S_VERSION = "1.34.0"
OWNER = Owner(name="demo", namespace="team-a", uid="7f0c2a4e-0000-4000-8000-000000000001")


def _spec(raw: dict[str, Any]) -> SGLangDeploymentSpec:
    spec, errors = parse_spec(raw, strict=True)
    assert spec is not None, errors
    return spec


def _errors(raw: dict[str, Any]) -> list[tuple[str, str]]:
    return [(e.field, e.message) for e in parse_spec(raw, strict=True)[1]]


# -- Kubernetes' checks, ported as oracles ------------------------------------------------------------------------


def _k8s_descending_path(path: str) -> bool:
    """validateLocalDescendingPath: not absolute, no '..' element."""
    return not path.startswith("/") and ".." not in path.split("/")


def _k8s_non_reserved_path(path: str) -> bool:
    """ValidateLocalNonReservedPath: a descending path not starting with '..'."""
    return _k8s_descending_path(path) and not path.startswith("..")


def _k8s_config_key(key: str) -> bool:
    """apimachinery IsConfigMapKey."""
    return re.fullmatch(r"[-._a-zA-Z0-9]+", key) is not None and key not in (".", "..") and not key.startswith("..")


def _k8s_env_name(name: str) -> bool:
    """apimachinery IsEnvVarName (the strict form clusters before relaxed env names use)."""
    return (
        re.fullmatch(r"[-._a-zA-Z][-._a-zA-Z0-9]*", name) is not None
        and name not in (".", "..")
        and not (name.startswith(".."))
    )


def _strings(alphabet: str, longest: int) -> list[str]:
    return ["".join(p) for n in range(1, longest + 1) for p in itertools.product(alphabet, repeat=n)]


@pytest.mark.parametrize(
    ("pattern", "oracle", "alphabet"),
    [
        (DESCENDING_PATH, _k8s_descending_path, "./a"),
        (RELATIVE_PATH, _k8s_non_reserved_path, "./a"),
        (CONFIG_KEY, _k8s_config_key, ".a/-_ "),
        (SECRET_KEY, _k8s_config_key, ".a/-_ "),
        (ENV_NAME, _k8s_env_name, ".a1=-"),
    ],
    ids=["subPath", "item path", "Secret key", "Secret key of a reference", "env name"],
)
def test_patterns_agree_with_kubernetes_on_every_short_string(pattern: str, oracle: Any, alphabet: str) -> None:
    """Exhaustive over strings of up to 6 characters: the schema refuses exactly what the API server refuses in
    a pod (the path patterns add only what the template's other bounds already refuse: control characters)."""
    disagree = [s for s in _strings(alphabet, 6) if (re.search(pattern, s) is not None) != oracle(s)]
    assert disagree == []


@pytest.mark.parametrize(
    ("path", "env", "volume"),
    [
        ("metadata.name", True, True),
        ("metadata.uid", True, True),
        ("spec.nodeName", True, False),
        ("spec.serviceAccountName", True, False),
        ("status.hostIPs", True, False),
        ("status.podIP", True, False),
        ("metadata.labels", False, True),
        ("metadata.annotations", False, True),
        ("metadata.labels['app.kubernetes.io/name']", True, True),
        ("metadata.annotations['example.com/x']", True, True),
        ("status.phase", False, False),
        ("spec.restartPolicy", False, False),
        ("metadata.ownerReferences", False, False),
        ("spec.nodeName['x']", False, False),
        ("metadata.labels['bad key']", False, False),
        ("metadata.labels[app]", False, False),
    ],
)
def test_field_paths_are_those_pods_have(path: str, env: bool, volume: bool) -> None:
    """Kubernetes 1.37's validEnvDownwardAPIFieldPathExpressions and validVolumeDownwardAPIFieldPathExpressions."""
    assert (re.search(ENV_FIELD_PATH, path) is not None, re.search(VOLUME_FIELD_PATH, path) is not None) == (
        env,
        volume,
    )


# -- envFrom (gap 9) ------------------------------------------------------------------------------------------------


def test_env_from_in_the_kubernetes_form_is_accepted_and_rendered() -> None:
    spec = _spec(EDGE_SPECS["env-from-both-kinds"])
    pod = worker_pod(spec, OWNER, "r1", 0, 0)
    main = pod["spec"]["containers"][0]
    assert main["envFrom"] == [{"secretRef": {"name": "tenant-env"}}]
    sidecar = next(c for c in pod["spec"]["containers"] if c["name"] == "helper")
    assert sidecar["envFrom"] == [
        {"prefix": "CM_", "configMapRef": {"name": "settings", "optional": True}},
        {"secretRef": {"name": "tenant-env", "optional": False}},
    ]
    kubernetes_validate.validate(pod, K8S_VERSION, strict=True)


def test_env_from_with_a_key_is_an_unknown_field() -> None:
    """The old type required `key`, which Kubernetes' envFrom does not have (the normal form was refused)."""
    raw = {"model": {"path": "m"}, "template": {"spec": {"containers": [
        {"name": "sglang", "envFrom": [{"secretRef": {"name": "s", "key": "token"}}]}]}}}  # fmt: skip
    unknown = [field for field, message in _errors(raw) if message.startswith("unknown field")]
    assert unknown == ["spec.template.spec.containers[0].envFrom[0].secretRef.key"]
    spec = SGLangDeploymentSpec.model_validate(raw)  # the operator's lenient parse ignores it (as pruning would)
    pod = worker_pod(spec, OWNER, "r1", 0, 0)
    assert pod["spec"]["containers"][0]["envFrom"] == [{"secretRef": {"name": "s"}}]


def test_the_operators_env_wins_over_a_tenants_env_from() -> None:
    """A Secret sourced whole by envFrom may hold HF_TOKEN, HF_HOME, POD_IP or the workers' API key variable: the
    operator sets each in `env`, which the kubelet applies after envFrom (kubelet_pods.go: "Env will override
    EnvFrom variables"), so the operator's value is the one the process sees."""
    spec = _spec(EDGE_SPECS["env-from-both-kinds"])
    pod = worker_pod(spec, OWNER, "r1", 0, 0)
    pod["metadata"]["uid"] = "u-1"
    pod["spec"]["nodeName"] = "node-1"
    main = pod["spec"]["containers"][0]
    operator_env = {e["name"] for e in main["env"]}
    assert {"POD_NAME", "POD_NAMESPACE", "POD_IP", "HF_HOME", "HF_TOKEN", API_KEY_ENV} <= operator_env
    hostile = {name: f"tenant-{name}" for name in (*operator_env, "TENANT_ONLY")}
    env = container_env(
        pod,
        main,
        PodFacts(pod_ip="10.0.0.7", host_ip="10.0.0.1", node_allocatable={}),
        secrets={"tenant-env": hostile, "hf": {"token": "real-hf"}, "keys": {"workers": "real-key"}},
        config_maps={},
        services={},
    )
    assert env["HF_TOKEN"] == "real-hf" and env[API_KEY_ENV] == "real-key" and env["POD_IP"] == "10.0.0.7"
    assert env["HF_HOME"] == spec.model.cache.mount_path and env["TENANT_ONLY"] == "tenant-TENANT_ONLY"


# -- annotations (gap 8) ----------------------------------------------------------------------------------------------


def test_the_operators_annotations_fit_their_share() -> None:
    """Template annotations may use TEMPLATE_ANNOTATION_BYTES; the operator's own (rendered, and those it patches
    on later: drain and warm state, the spec hash) must fit in the rest, or a full template would get pods refused."""
    spec = _spec({"model": {"path": "m"}, "engine": {"port": 65535}, "parallelism": {"tp": 64, "nnodes": 64}})
    annotations = dict(worker_pod(spec, OWNER, "r" * 10, 511, 63, group="g" * 63)["metadata"]["annotations"])
    annotations |= {ANNOTATION_DRAINING: "2026-12-31T23:59:59.999999+00:00", ANNOTATION_WARM: "true"}
    annotations |= {ANNOTATION_SPEC_HASH: "f" * 64}
    used = sum(len(k.encode()) + len(v.encode()) for k, v in annotations.items())
    assert used * 4 < OPERATOR_ANNOTATION_BYTES
    assert TEMPLATE_ANNOTATION_BYTES + OPERATOR_ANNOTATION_BYTES == POD_ANNOTATION_BYTES


def test_the_annotation_budget_counts_bytes() -> None:
    """The API server counts bytes; a rule counting characters would pass 160 Ki two-byte characters."""
    under = {f"example.com/a{i}": "\u00e9" * 4096 for i in range(31)}  # 254 KiB of bytes minus keys: accepted
    over = {f"example.com/a{i}": "\u00e9" * 4096 for i in range(32)}
    assert _errors({"model": {"path": "m"}, "template": {"metadata": {"annotations": under}}}) == []
    assert [f for f, _ in _errors({"model": {"path": "m"}, "template": {"metadata": {"annotations": over}}})] == [
        "spec.template.metadata.annotations"
    ]


# -- sidecar accelerators (gap 10) -------------------------------------------------------------------------------------


_EXTENDED = ["nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "amd.com/gpu", "google.com/tpu", "habana.ai/gaudi",
             "gpu.intel.com/xe", "example.com/widget", "hugepages-2Mi"]  # fmt: skip


@pytest.mark.parametrize("resource", _EXTENDED)
@pytest.mark.parametrize("kind", ["requests", "limits"])
@pytest.mark.parametrize("where", ["containers", "initContainers"])
def test_sidecars_and_init_containers_get_no_extended_resource(resource: str, kind: str, where: str) -> None:
    container = {"name": "helper", "image": "busybox:1.36", "resources": {kind: {resource: "1"}}}
    raw = {"model": {"path": "m"}, "resources": {"gpuResourceName": "nvidia.com/mig-3g.40gb"},
           "template": {"spec": {where: [container]}}}  # fmt: skip
    assert f"spec.template.spec.{where}" in [field for field, _ in _errors(raw)]


@pytest.mark.parametrize("where", ["containers", "initContainers"])
def test_sidecars_keep_cpu_memory_and_ephemeral_storage(where: str) -> None:
    amounts = dict.fromkeys(SIDECAR_RESOURCES, "1")
    container = {"name": "helper", "image": "busybox:1.36", "resources": {"requests": amounts, "limits": amounts}}
    assert _errors({"model": {"path": "m"}, "template": {"spec": {where: [container]}}}) == []


_MAIN_EXTENDED = ["rdma/ib", "rdma/rdma_shared_device_a", "nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "amd.com/gpu",
                  "google.com/tpu", "example.kubernetes.io/x", "gpu"]  # fmt: skip


@pytest.mark.parametrize("resource", _MAIN_EXTENDED)
@pytest.mark.parametrize("kind", ["requests", "limits"])
def test_the_main_container_gets_no_extended_resource_of_its_own(resource: str, kind: str) -> None:
    """Issue 37: the `sglang` entry asking for an RDMA device without the admin's setting, 8 where the operator
    renders 1, or `amd.com/gpu` and MIG slices outside maxGPUs. Its GPUs follow from parallelism, its RDMA device
    from the operator's settings; at the top level and in a worker group's template alike."""
    main = {"name": "sglang", "resources": {kind: {resource: "8"}}}
    template = {"spec": {"containers": [main]}}
    assert "spec.template.spec.containers" in [f for f, _ in _errors({"model": {"path": "m"}, "template": template})]
    group = {"name": "g", "replicas": 1, "parallelism": {}, "template": template}
    assert "spec.workerGroups[0].template.spec.containers" in [
        f for f, _ in _errors({"model": {"path": "m"}, "workerGroups": [group]})
    ]


def test_the_main_container_keeps_cpu_memory_storage_and_hugepages() -> None:
    amounts = {**dict.fromkeys(SIDECAR_RESOURCES, "1"), "hugepages-2Mi": "1Gi", "hugepages-1Gi": "2Gi"}
    main = {"name": "sglang", "resources": {"requests": amounts, "limits": amounts}}
    raw = {"model": {"path": "m"}, "template": {"spec": {"containers": [main]}}}
    assert _errors(raw) == []
    pod = worker_pod(_spec(raw), OWNER, "r1", 0, 0)
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "1", **amounts}
    kubernetes_validate.validate(pod, K8S_VERSION, strict=True)


def test_a_sidecar_gets_no_hugepages() -> None:
    sidecar = {"name": "helper", "image": "busybox:1.36", "resources": {"limits": {"hugepages-2Mi": "1Gi"}}}
    assert [f for f, _ in _errors({"model": {"path": "m"}, "template": {"spec": {"containers": [sidecar]}}})] == [
        "spec.template.spec.containers"
    ]


# -- every edge-case spec renders valid children ------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(EDGE_SPECS))
def test_edge_specs_are_accepted_and_render_valid_children(name: str) -> None:
    objects = render_all(_spec(EDGE_SPECS[name]), OWNER)
    pods = [o for o in objects if o["kind"] == "Pod"]
    assert pods
    for obj in objects:
        if obj["apiVersion"].startswith(("monitoring.coreos.com", "inference.networking")):
            continue  # CRDs kubernetes-validate has no schema for
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    for pod in pods:
        annotations = pod["metadata"].get("annotations", {})
        assert sum(len(k.encode()) + len(v.encode()) for k, v in annotations.items()) <= POD_ANNOTATION_BYTES


# -- tolerations, selector requirements, requests over limits, divisors (gap 8, continued) ---------------------------


def _k8s_toleration(t: dict[str, Any]) -> bool:
    """Kubernetes 1.37's ValidateTolerations, for the operators the template types (Exists, Equal, none)."""
    key, operator, value = t.get("key", ""), t.get("operator", ""), t.get("value", "")
    if key and not re.fullmatch(r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                                r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?", key):  # fmt: skip
        return False
    if not key and operator != "Exists":
        return False
    if "tolerationSeconds" in t and t.get("effect") != "NoExecute":
        return False
    if operator == "Exists":
        return not value
    return re.fullmatch(r"(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?", value) is not None


_TOLERATIONS = [
    {"key": k, "operator": o, "value": v, "effect": e, **({"tolerationSeconds": 30} if s else {})}
    for k in ("", "nvidia.com/gpu", "bad key") for o in ("Exists", "Equal") for v in ("", "x", "a b")
    for e in ("NoSchedule", "NoExecute") for s in (False, True)
]  # fmt: skip


@pytest.mark.parametrize("toleration", _TOLERATIONS, ids=[str(i) for i in range(len(_TOLERATIONS))])
def test_tolerations_are_refused_exactly_where_kubernetes_refuses_them(toleration: dict[str, Any]) -> None:
    raw = {"model": {"path": "m"}, "template": {"spec": {"tolerations": [toleration]}}}
    assert (_errors(raw) == []) == _k8s_toleration(toleration)


def _k8s_requirement(operator: str, count: int) -> bool:
    """ValidateNodeSelectorRequirement (and the label selector's, which has no Gt or Lt)."""
    return (
        count > 0
        if operator in ("In", "NotIn")
        else count == 0
        if operator in ("Exists", "DoesNotExist")
        else count == 1
    )


@pytest.mark.parametrize("operator", ["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"])
@pytest.mark.parametrize("count", [0, 1, 2])
def test_selector_requirements_take_the_values_their_operator_takes(operator: str, count: int) -> None:
    expression = {"key": "example.com/k", "operator": operator, "values": [str(i) for i in range(count)]}
    node = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [expression]}]}}}  # fmt: skip
    pod = {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "podAffinityTerm": {
        "topologyKey": "zone", "namespaceSelector": {"matchExpressions": [expression]}}}]}}  # fmt: skip
    assert (_errors({"model": {"path": "m"}, "template": {"spec": {"affinity": node}}}) == []) == _k8s_requirement(
        operator, count
    )
    pod_errors = _errors({"model": {"path": "m"}, "template": {"spec": {"affinity": pod}}})
    if operator in ("Gt", "Lt"):  # not a label selector operator: the schema's enum refuses it
        assert [f for f, _ in pod_errors] == [
            "spec.template.spec.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0]"
            ".podAffinityTerm.namespaceSelector.matchExpressions[0].operator"
        ]
    else:
        assert (pod_errors == []) == _k8s_requirement(operator, count)


_QUANTITIES = ["0", "1", "+1", ".5", "1.", "1.5", "100m", "1500m", "2", "1k", "1000", "1Ki", "1024", "1M", "1Mi",
               "1e3", "1E3", "1e-3", "1G", "1Gi", "2e9", "1T", "1Ti", "3n", "7u", "1P", "1Pi", "1E", "1Ei"]  # fmt: skip


@pytest.mark.parametrize("text", _QUANTITIES)
def test_quantities_read_as_kubernetes_reads_them(text: str) -> None:
    from kubernetes.utils import parse_quantity  # type: ignore[import-untyped]

    assert quantity(text) == parse_quantity(text)


@pytest.mark.parametrize("request_", ["500m", "1", "1500m", "2"])
@pytest.mark.parametrize("limit", ["1", "1000m", "1.5"])
@pytest.mark.parametrize("where", ["containers", "initContainers"])
def test_sidecar_requests_are_at_most_their_limits(request_: str, limit: str, where: str) -> None:
    container = {"name": "helper", "image": "busybox:1.36", "resources": {"requests": {"cpu": request_},
                                                                         "limits": {"cpu": limit}}}  # fmt: skip
    errors = _errors({"model": {"path": "m"}, "template": {"spec": {where: [container]}}})
    assert (errors == []) == (quantity(request_) <= quantity(limit))


@pytest.mark.parametrize(
    ("resources", "main", "accepted"),
    [
        ({"cpu": "8"}, {"requests": {"cpu": "4"}}, True),
        ({"cpu": "8"}, {"requests": {"cpu": "8000m"}}, True),
        ({"cpu": "8"}, {"requests": {"cpu": "16"}}, False),
        ({"cpu": "8"}, {"limits": {"cpu": "16"}}, True),
        ({"cpu": "8"}, {"limits": {"cpu": "4"}}, False),
        ({"memory": "64Gi"}, {"limits": {"memory": "32Gi"}}, False),
        ({"memory": "64Gi"}, {"requests": {"memory": "32Gi"}, "limits": {"memory": "32Gi"}}, True),
        ({}, {"requests": {"cpu": "16"}}, True),
        ({}, {"requests": {"ephemeral-storage": "2Gi"}, "limits": {"ephemeral-storage": "1Gi"}}, False),
        ({}, {"requests": {"ephemeral-storage": "500Mi"}, "limits": {"ephemeral-storage": "1Gi"}}, True),
        ({}, {"limits": {"hugepages-2Mi": "1Gi"}}, True),
        ({}, {"requests": {"hugepages-2Mi": "1Gi"}}, False),
        ({}, {"requests": {"hugepages-2Mi": "1Gi"}, "limits": {"hugepages-2Mi": "1Gi"}}, True),
        ({}, {"requests": {"hugepages-2Mi": "1Gi"}, "limits": {"hugepages-2Mi": "2Gi"}}, False),
        ({}, {"limits": {"hugepages-2Mi": "500m"}}, False),
        ({}, {"limits": {"rdma/ib": "1"}}, False),  # an extended resource at all (above)
    ],
)
def test_the_main_containers_requests_are_within_its_limits(
    resources: dict[str, str], main: dict[str, Any], accepted: bool
) -> None:
    """As the pod gets them: resources.cpu and resources.memory as request and limit, the template's `sglang`
    entry replacing either one by one, a missing request defaulted to its limit."""
    raw = {"model": {"path": "m"}, "resources": resources,
           "template": {"spec": {"containers": [{"name": "sglang", "resources": main}]}}}  # fmt: skip
    assert (_errors(raw) == []) == accepted
    if accepted:
        pod = worker_pod(_spec(raw), OWNER, "r1", 0, 0)
        kubernetes_validate.validate(pod, K8S_VERSION, strict=True)


_K8S_CPU_DIVISORS = {"1m", "1"}
_K8S_MEMORY_DIVISORS = {"1", "1k", "1M", "1G", "1T", "1P", "1E", "1Ki", "1Mi", "1Gi", "1Ti", "1Pi", "1Ei"}


@pytest.mark.parametrize("divisor", sorted(_K8S_CPU_DIVISORS | _K8S_MEMORY_DIVISORS | {"2", "1000m", "0.5"}))
@pytest.mark.parametrize("resource", ["limits.cpu", "requests.memory", "limits.ephemeral-storage",
                                      "requests.hugepages-2Mi"])  # fmt: skip
def test_divisors_are_those_kubernetes_allows_for_the_resource(divisor: str, resource: str) -> None:
    """validateContainerResourceDivisor's sets (1.37), written as Kubernetes writes them."""
    allowed = _K8S_CPU_DIVISORS if resource.endswith(".cpu") else _K8S_MEMORY_DIVISORS
    env = [{"name": "X", "valueFrom": {"resourceFieldRef": {"resource": resource, "divisor": divisor}}}]
    assert (_errors({"model": {"path": "m"}, "engine": {"env": env}}) == []) == (divisor in allowed)
    assert set(DIVISORS) == _K8S_CPU_DIVISORS | _K8S_MEMORY_DIVISORS


def test_a_projected_source_gives_each_path_once() -> None:
    """Kubernetes' validateProjectionSources refuses a path twice ("conflicting duplicate paths"); within one
    source's items the CRD refuses it too (a list keyed by path). Across sources it is not checked at admission."""

    def volume(*items: tuple[str, str]) -> dict[str, Any]:
        source = {"secret": {"name": "s", "items": [{"key": k, "path": p} for k, p in items]}}
        return {"model": {"path": "m"}, "template": {"spec": {"volumes": [
            {"name": "v", "projected": {"sources": [source]}}]}}}  # fmt: skip

    assert _errors(volume(("a", "f"), ("b", "g"))) == []
    assert [f for f, _ in _errors(volume(("a", "f"), ("b", "f")))] == [
        "spec.template.spec.volumes[0].projected.sources[0].secret.items"
    ]
    crd = render_crd_yaml()
    assert crd.count("x-kubernetes-list-map-keys:") == crd.count("x-kubernetes-list-type: map") == 6


# -- characters exec cannot pass, and one class for both regex engines (issue 37) ------------------------------------

_ENGINE_DEPENDENT = re.compile(r"\\[sSwWdDbB]|\[\[:|\\p\{|\\P\{")
"""Classes whose members differ between RE2 (the API server: ASCII) and pydantic's and Python's engines (Unicode)."""


def _crd_patterns(node: Any) -> list[str]:
    if isinstance(node, dict):
        own = [node["pattern"]] if isinstance(node.get("pattern"), str) else []
        return own + [p for value in node.values() for p in _crd_patterns(value)]
    if isinstance(node, list):
        return [p for value in node for p in _crd_patterns(value)]
    return []


def test_every_pattern_reads_alike_in_re2_and_validate() -> None:
    """`\\s` is `[\\t\\n\\f\\r ]` to RE2 and Unicode whitespace to `validate`: U+00A0, U+2028 and `\\v` were refused by
    one and admitted by the other. Every pattern of the CRD spells its classes out (`base.CONTROL`)."""
    import yaml

    crd = yaml.safe_load(render_crd_yaml())
    patterns = sorted(set(_crd_patterns(crd)))
    assert patterns
    assert [p for p in patterns if _ENGINE_DEPENDENT.search(p)] == []


_COMMAND_LINE = {
    "spec.model.revision": lambda v: {"model": {"path": "m", "revision": v}},
    "spec.model.servedName": lambda v: {"model": {"path": "m", "servedName": v}},
    "spec.disaggregation.ibDevice": lambda v: {
        "model": {"path": "m"},
        "disaggregation": {"transferBackend": "mooncake_tcp", "ibDevice": v},
        "workerGroups": [
            {"name": "p", "role": "prefill", "replicas": 1, "parallelism": {}},
            {"name": "d", "role": "decode", "parallelism": {}},
        ],
    },
}
_CONTROLS = ["\x00", "\x01", "\t", "\n", "\x0b", "\x0c", "\r", "\x1b", "\x1f", "\x7f"]


@pytest.mark.parametrize("field", sorted(_COMMAND_LINE))
@pytest.mark.parametrize("char", _CONTROLS, ids=[f"{ord(c):#04x}" for c in _CONTROLS])
def test_command_line_values_hold_no_control_character(field: str, char: str) -> None:
    """Issue 37: a NUL (which exec cannot pass: every pod fails at start, no field named) or any other C0 or DEL in
    a value placed after a flag is refused naming the field, by `validate` and the CRD's pattern alike."""
    assert [f for f, _ in _errors(_COMMAND_LINE[field](f"mlx5{char}0"))] == [field]


@pytest.mark.parametrize("field", sorted(_COMMAND_LINE))
@pytest.mark.parametrize("char", ["\u00a0", "\u2028", "\u0085", "\u3000"])
def test_command_line_values_read_unicode_as_the_api_server_does(field: str, char: str) -> None:
    """Not control characters: the API server (RE2's ASCII classes) admits them, and now `validate` does too (it
    refused them through a Unicode `\\s`); exec passes them, as bytes of UTF-8."""
    assert _errors(_COMMAND_LINE[field](f"mlx5{char}0")) == []


def _env_value_spec(where: str, value: str) -> dict[str, Any]:
    env = [{"name": "X", "value": value}]
    if where == "engine":
        return {"model": {"path": "m"}, "engine": {"env": env}}
    if where == "group":
        return {"model": {"path": "m"}, "workerGroups": [{"name": "g", "parallelism": {}, "engine": {"env": env}}]}
    container = {"name": "sglang", "env": env} if where == "main" else {"name": "h", "image": "b", "env": env}
    return {"model": {"path": "m"}, "template": {"spec": {"containers": [container]}}}


_ENV_FIELDS = {
    "engine": "spec.engine.env[0].value",
    "group": "spec.workerGroups[0].engine.env[0].value",
    "main": "spec.template.spec.containers[0].env[0].value",
    "sidecar": "spec.template.spec.containers[0].env[0].value",
}


@pytest.mark.parametrize("where", sorted(_ENV_FIELDS))
def test_env_values_hold_no_nul(where: str) -> None:
    """Issue 37: exec takes env as C strings, so a NUL fails the container at every start. Kubernetes checks nothing
    in an env value; everything else a value may hold passes exec verbatim, and stays allowed (multi-line PEM, tabs,
    an escape sequence)."""
    assert [f for f, _ in _errors(_env_value_spec(where, "a\x00b"))] == [_ENV_FIELDS[where]]
    assert _errors(_env_value_spec(where, "-----BEGIN-----\r\n\tx\x1b[0m\x7f\u00a0\n")) == []


def test_a_sidecars_command_holds_no_nul() -> None:
    def sidecar(**fields: Any) -> dict[str, Any]:
        return {"model": {"path": "m"}, "template": {"spec": {"containers": [{"name": "h", "image": "b", **fields}]}}}

    assert [f for f, _ in _errors(sidecar(command=["sh", "-c", "a\x00b"]))] == [
        "spec.template.spec.containers[0].command[2]"
    ]
    assert [f for f, _ in _errors(sidecar(args=["\x00"]))] == ["spec.template.spec.containers[0].args[0]"]
    assert _errors(sidecar(command=["sh", "-c", "echo a\n\techo b"])) == []


def test_the_character_classes_are_ascii_and_exact() -> None:
    """C0 and DEL, nothing more: the same 33 code points whichever engine reads the class."""
    members = [chr(i) for i in range(0x3000) if re.fullmatch(f"[{CONTROL}]", chr(i))]
    assert members == [chr(i) for i in range(0x20)] + ["\x7f"]
    assert [chr(i) for i in range(0x3000) if not re.fullmatch(NO_NUL, chr(i))] == ["\x00"]


@pytest.mark.parametrize(
    ("key", "accepted"),
    [("..", False), (".", False), ("..token", False), ("a/b", False), (".token", True), ("a..b", True), ("t", True)],
)
def test_secret_references_name_keys_a_secret_can_hold(key: str, accepted: bool) -> None:
    """Issue 37: `model.tokenSecretRef.key: ..` was accepted, and every pod then waited for a key no Secret holds
    (Kubernetes' IsConfigMapKey). The API key's reference alike."""
    token = {"model": {"path": "m", "tokenSecretRef": {"name": "hf", "key": key}}}
    api_key = {"model": {"path": "m"}, "engine": {"apiKeySecretRef": {"name": "k", "key": key}}}
    assert ([f for f, _ in _errors(token)] == []) == accepted
    assert ([f for f, _ in _errors(api_key)] == []) == accepted
    if not accepted:
        assert [f for f, _ in _errors(token)] == ["spec.model.tokenSecretRef.key"]
