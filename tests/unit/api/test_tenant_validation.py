"""What a tenant's CR may not say: every number bounded, no coercion, no unknown field in `validate`, no flag, env
name or key the operator owns, a name every child can carry, and no node directory the operator's settings refuse."""

import types
from typing import Any, Union, get_args, get_origin

import pytest
from pydantic import BaseModel

from sglang_operator.api.limits import MAX_REPLICAS, UPPER_BOUNDS
from sglang_operator.api.reserved import ENGINE_FLAGS, ROUTER_FLAGS, owned_flag
from sglang_operator.api.spec import SGLangDeploymentSpec
from sglang_operator.api.validation import NAME_RULE, RULES, check_pod_policy, parse_spec
from sglang_operator.settings import PodPolicy
from tests.unit.api.test_validation import with_model


def _numeric_fields(model: type[BaseModel], path: str = "spec") -> list[tuple[str, Any]]:
    """(dotted path, field info) of every int/float field in the spec tree."""
    found = []
    for name, field in model.model_fields.items():
        where = f"{path}.{field.alias or name}"
        annotation = field.annotation
        if get_origin(annotation) in (Union, types.UnionType):
            annotation = next(a for a in get_args(annotation) if a is not type(None))
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            found += _numeric_fields(annotation, where)
        elif annotation in (int, float) and annotation is not bool:
            found.append((where, field))
    return found


def test_every_number_in_the_spec_has_an_upper_bound() -> None:
    unbounded = []
    for path, field in _numeric_fields(SGLangDeploymentSpec):
        by_rule = any(rule.field == path and ("at most" in rule.message or "below" in rule.message
                                              or "between" in rule.message or "port" in rule.message
                                              or "percentage" in rule.message) for rule in RULES)  # fmt: skip
        by_schema = any(getattr(meta, "le", None) is not None for meta in field.metadata)
        if not (by_rule or by_schema):
            unbounded.append(path)
    assert not unbounded, f"numeric fields without an upper bound: {unbounded}"
    assert set(UPPER_BOUNDS) <= {path for path, _ in _numeric_fields(SGLangDeploymentSpec)}


@pytest.mark.parametrize("replicas", [MAX_REPLICAS + 1, 1_000_000, 2**63 - 1, 2**200])
def test_huge_replica_counts_are_refused(replicas: int) -> None:
    spec, errors = parse_spec(with_model({"replicas": replicas}))
    assert spec is None
    assert [e.field for e in errors] == ["spec.replicas"]
    assert f"at most {MAX_REPLICAS}" in errors[0].message


@pytest.mark.parametrize(
    ("patch", "field", "fragment"),
    [
        ({"replicas": "3"}, "spec.replicas", "must be of type integer"),
        ({"replicas": True}, "spec.replicas", "must be of type integer"),
        ({"replicas": 2.5}, "spec.replicas", "must be of type integer"),
        ({"router": {"enabled": "yes"}}, "spec.router.enabled", "must be of type boolean"),
        ({"autoscaling": {"tolerance": float("inf")}}, "spec.autoscaling.tolerance", "finite number"),
        ({"autoscaling": {"tolerance": float("nan")}}, "spec.autoscaling.tolerance", "finite number"),
        ({"engine": {"image": "repo/img:v1\n--privileged"}}, "spec.engine.image", "should match"),
        ({"model": {"path": "m", "servedName": "a\nb"}}, "spec.model.servedName", "should match"),
        ({"model": {"path": "x" * 1_000_000}}, "spec.model.path", "more than 512 characters"),
        ({"engine": {"args": ["--x"] * 65}}, "spec.engine.args", "at most 64 items"),
        ({"resources": {"cpu": "lots"}}, "spec.resources.cpu", "should match"),
        ({"autoscaling": {"prometheusURL": "file:///etc/passwd"}}, "spec.autoscaling.prometheusURL", "should match"),
        ({"autoscaling": {"prometheusURL": "http://user:pw@prom:9090"}}, "spec.autoscaling.prometheusURL",
         "should match"),
        ({"template": {"metadata": {"labels": {"team": "a b"}}}}, "spec.template.metadata.labels.team",
         "should match"),
        ({"template": {"spec": {"containers": [{"name": "side", "image": "x",
                                                "ports": [{"containerPort": 80, "hostPort": 80}]}]}}},
         "spec.template.spec.containers[0].ports[0].hostPort", "unknown field"),
    ],
)  # fmt: skip
def test_values_are_not_coerced_and_are_bounded(patch: dict[str, Any], field: str, fragment: str) -> None:
    spec, errors = parse_spec(with_model(patch), strict=True)
    assert spec is None
    assert any(e.field == field and fragment in e.message for e in errors), errors
    assert all(len(e.message) < 2000 for e in errors)  # the input is never echoed whole


@pytest.mark.parametrize(
    ("patch", "field", "hint"),
    [
        ({"replica": 3}, "spec.replica", "did you mean replicas?"),
        ({"engine": {"maxRunningRequest": 8}}, "spec.engine.maxRunningRequest", "did you mean maxRunningRequests?"),
        ({"autoscaling": {"max_replicas": 3}}, "spec.autoscaling.max_replicas", "did you mean maxReplicas?"),
        ({"template": {"spec": {"hostNetwork": True}}}, "spec.template.spec.hostNetwork", "known fields: nodeSelector"),
        ({"template": {"spec": {"serviceAccountName": "admin"}}}, "spec.template.spec.serviceAccountName", "known"),
        ({"template": {"spec": {"volumes": [{"name": "root", "hostPath": {"path": "/"}, "emptyDir": {}}]}}},
         "spec.template.spec.volumes[0].hostPath", "known fields"),
        ({"template": {"spec": {"containers": [{"name": "x", "image": "i",
                                                "securityContext": {"privileged": True}}]}}},
         "spec.template.spec.containers[0].securityContext", "known fields"),
    ],
)  # fmt: skip
def test_unknown_fields_are_errors_in_strict_mode(patch: dict[str, Any], field: str, hint: str) -> None:
    spec, errors = parse_spec(with_model(patch), strict=True)
    assert spec is None
    assert any(e.field == field and "unknown field" in e.message and hint in e.message for e in errors), errors
    lenient, lenient_errors = parse_spec(with_model(patch))  # the operator ignores them: an older one survives
    assert lenient_errors == [] and lenient is not None


def test_what_the_operator_never_reads_cannot_reach_a_pod() -> None:
    from sglang_operator.render import Owner, render_all

    spec, _ = parse_spec(with_model({"template": {"spec": {
        "hostNetwork": True, "hostPID": True, "serviceAccountName": "admin", "securityContext": {"runAsUser": 0},
        "volumes": [{"name": "root", "hostPath": {"path": "/"}, "emptyDir": {}}],
        "containers": [{"name": "sglang", "securityContext": {"privileged": True}}],
    }}}))  # fmt: skip
    assert spec is not None  # leniently parsed, as the operator does: the unknown fields are dropped
    pod = render_all(spec, Owner("f", "ns", "uid"))[0]
    text = repr(pod)
    for forbidden in ("hostNetwork': True", "hostPID': True", "'admin'", "hostPath", "'privileged': True"):
        assert forbidden not in text


@pytest.mark.parametrize(
    ("arg", "owned"),
    [("--tp", "--tp-size"), ("--tp-size=4", "--tp-size"), ("--model", "--model"), ("--mod", "--model-path"),
     ("--port", "--port"), ("--api-key=x", "--api-key"), ("--config", "--config"), ("--ep", "--ep-size")],
)  # fmt: skip
def test_owned_engine_flags_and_their_prefixes(arg: str, owned: str) -> None:
    assert owned_flag(arg, ENGINE_FLAGS) is not None
    spec, errors = parse_spec(with_model({"engine": {"args": [arg]}}))
    assert spec is None and [e.field for e in errors] == ["spec.engine.args"]


@pytest.mark.parametrize("arg", ["--chunked-prefill-size", "4096", "--enable-metrics-for-all-schedulers", "-x", "--"])
def test_flags_the_operator_does_not_own_pass(arg: str) -> None:
    assert owned_flag(arg, ENGINE_FLAGS) is None
    assert parse_spec(with_model({"engine": {"args": [arg]}}))[1] == []


@pytest.mark.parametrize("arg", ["--service-discovery", "--worker-urls=http://x", "--api-key", "--port", "--pol"])
def test_owned_router_flags(arg: str) -> None:
    assert owned_flag(arg, ROUTER_FLAGS) is not None
    assert [e.field for e in parse_spec(with_model({"router": {"args": [arg]}}))[1]] == ["spec.router.args"]


def test_env_the_operator_sets_is_refused_in_the_main_container_too() -> None:
    patch = {
        "template": {"spec": {"containers": [{"name": "sglang", "env": [{"name": "POD_IP", "value": "1.2.3.4"}]}]}}
    }
    assert [e.field for e in parse_spec(with_model(patch))[1]] == ["spec.template.spec.containers"]


@pytest.mark.parametrize("name", ["my.model", "1llama", "Llama", "llama-", "a" * 41, "", "llama_3"])
def test_names_every_child_cannot_carry_are_refused(name: str) -> None:
    assert NAME_RULE.check(name) and "DNS-1035" in NAME_RULE.check(name)[0].message


@pytest.mark.parametrize("name", ["llama", "l", "qwen-2-5", "a" * 40])
def test_dns_1035_names_pass(name: str) -> None:
    assert NAME_RULE.check(name) == []


@pytest.mark.parametrize(
    ("path", "allowed", "ok"),
    [("/models", ("/models",), True), ("/models/llama", ("/models/",), True), ("/", ("/models",), False),
     ("/models/../etc", ("/models",), False), ("/modelsx", ("/models",), False), ("/models", (), False)],
)  # fmt: skip
def test_host_path_cache_only_under_allowed_paths(path: str, allowed: tuple[str, ...], ok: bool) -> None:
    spec, errors = parse_spec(with_model({"model": {"path": "m", "cache": {"type": "hostPath", "hostPath": path}}}))
    assert errors == [] and spec is not None
    refused = check_pod_policy(spec, PodPolicy(allowed_host_paths=allowed))
    assert (refused == []) is ok
    if not ok:
        assert refused[0].field == "spec.model.cache.hostPath" and "--allow-host-path" in refused[0].message


def test_the_gpu_resource_is_not_the_admins_rdma_resource() -> None:
    """Issue 37: `resources.gpuResourceName: rdma/ib` under `--rdma-resource rdma/ib` rendered one RDMA device in
    place of a prefill/decode worker's GPUs (the one resource map holds each name once), and RDMA devices as GPUs
    everywhere else. Refused by the operator's settings, naming the field, for the fleet and for each group."""
    group = {"name": "g", "replicas": 1, "parallelism": {}, "resources": {"gpuResourceName": "rdma/ib"}}
    for patch, field in (
        ({"resources": {"gpuResourceName": "rdma/ib"}}, "spec.resources.gpuResourceName"),
        ({"workerGroups": [group]}, "spec.workerGroups[0].resources.gpuResourceName"),
    ):
        spec, errors = parse_spec(with_model(patch))
        assert errors == [] and spec is not None
        refused = check_pod_policy(spec, PodPolicy(rdma_resource="rdma/ib"))
        assert [e.field for e in refused] == [field]
        assert "--rdma-resource" in refused[0].message and "nvidia.com/gpu" in refused[0].message
        assert check_pod_policy(spec, PodPolicy(rdma_resource="rdma/roce")) == []
        assert check_pod_policy(spec, PodPolicy()) == []
