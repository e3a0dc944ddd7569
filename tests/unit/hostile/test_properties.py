"""Properties, with hypothesis: `validate` never raises or hangs whatever it is given, and every spec it accepts
renders objects the API server would take that meet the operator's pod policy.

Runs are derandomized (the same examples every run: a failure reproduces, nothing flickers) and bounded (a few
hundred examples each, the whole file in well under 30 s). Each example goes through the CLI in-process
(`cli_runner`), so the last-resort guard of `cli.main` is in the path: an input that reaches it fails the test.
"""

from __future__ import annotations

import copy
from collections import Counter
from typing import Any

import kubernetes_validate
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from sglang_operator.api.constants import LABEL_REPLICA
from sglang_operator.api.validation import check_pod_policy, parse_spec
from sglang_operator.kubeyaml import KubectlDumper
from sglang_operator.render import Owner, render_all
from sglang_operator.settings import OperatorSettings, PodPolicy
from tests.conftest import EXAMPLES
from tests.support.hostile.cli_runner import Result, run_cli, run_on_bytes
from tests.support.render import pss

K8S_VERSION = "1.34.0"
SECONDS = 1.0
OWNER = Owner(name="fuzz", namespace="tenant", uid="7f0c2a4e-0000-4000-8000-00000000f022")
ALLOWED_HOST_PATHS = ("/models",)
EXAMPLE_TEXTS = [path.read_bytes() for path in EXAMPLES]
EXAMPLE_DOCS = [yaml.safe_load(text) for text in EXAMPLE_TEXTS]

FUZZ = settings(
    max_examples=200,
    deadline=None,  # each run is timed against SECONDS below, which names the input
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# --- (a) validate never raises or hangs ------------------------------------------------------------------------


def _scalars() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**70), max_value=2**70),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=20),
        st.text(alphabet=st.characters(min_codepoint=0xD7F0, max_codepoint=0xE010), max_size=4),  # surrogates
        st.sampled_from(["", "-", "--port", "1e400", ".inf", "~", "yes", "0x1F", "2024-01-01", "*a", "&a", "!!x"]),
    )


JSON_VALUES = st.recursive(
    _scalars(),
    lambda children: st.one_of(
        st.lists(children, max_size=5), st.dictionaries(st.text(max_size=12), children, max_size=5)
    ),
    max_leaves=40,
)


class _PlainDumper(KubectlDumper):
    """Writes a value twice rather than as an anchor and an alias, which the CLI refuses (as kubectl never writes)."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _dump(value: Any) -> bytes:
    # Surrogates come out as "\ud800" escapes (not UTF-8): exactly what a hostile file holds.
    return yaml.dump(value, Dumper=_PlainDumper, sort_keys=False).encode("utf-8", "surrogatepass")


def assert_well_behaved(result: Result, data: bytes) -> None:
    """What any input must get: an answer in time, an exit code the CLI documents, and lines in its shape."""
    shown = data[:300]
    assert result.seconds < SECONDS, f"{result.seconds:.2f} s on {shown!r}"
    assert "internal error" not in result.err, f"{result.err} on {shown!r}"
    assert "Traceback" not in result.err
    assert result.rc in (0, 1, 2), (result.rc, result.err)
    if result.rc == 0:
        assert result.err == "" and result.out.endswith(": valid\n"), result
    else:
        assert result.out == "" and result.lines, result
        assert all(line.startswith(("error: <stdin>: ", "error: cannot read")) for line in result.lines), result.err
        assert len(result.lines) <= 101


@FUZZ
@given(JSON_VALUES)
def test_validate_on_any_yaml_value(value: Any) -> None:
    data = _dump(value)
    assert_well_behaved(run_on_bytes("validate", data), data)


@FUZZ
@given(metadata=JSON_VALUES, spec=JSON_VALUES)
def test_validate_on_any_cr_shaped_document(metadata: Any, spec: Any) -> None:
    data = _dump({"apiVersion": "sglang.ai/v1alpha1", "kind": "SGLangDeployment", "metadata": metadata, "spec": spec})
    assert_well_behaved(run_on_bytes("validate", data), data)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path into a document (dict keys and list indexes), the root included."""
    found = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            found += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found += _paths(value, (*prefix, index))
    return found


def _at(doc: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        doc = doc[part]
    return doc


@st.composite
def mutated_examples(draw: st.DrawFn) -> Any:
    """An example CR with up to five structural mutations: a value replaced by any value, a key removed, a key
    added, a list item duplicated."""
    doc = copy.deepcopy(draw(st.sampled_from(EXAMPLE_DOCS)))
    for _ in range(draw(st.integers(min_value=1, max_value=5))):
        path = draw(st.sampled_from(_paths(doc)))
        if not path:
            continue
        parent, last = _at(doc, path[:-1]), path[-1]
        action = draw(st.sampled_from(["replace", "delete", "add", "duplicate"]))
        if action == "replace":
            parent[last] = draw(JSON_VALUES)
        elif action == "delete":
            del parent[last]
        elif action == "add" and isinstance(parent, dict):
            parent[draw(st.text(max_size=12))] = draw(JSON_VALUES)
        elif action == "duplicate" and isinstance(parent, list):
            parent.append(copy.deepcopy(parent[last]))
    return doc


@FUZZ
@given(mutated_examples())
def test_validate_and_render_on_mutated_examples(doc: Any) -> None:
    data = _dump(doc)
    result = run_on_bytes("validate", data, "--allow-host-path", "/models")
    assert_well_behaved(result, data)
    rendered = run_on_bytes("render", data, "--allow-host-path", "/models")
    if result.rc == 0:
        # A valid fleet renders, or (more than render prints) is refused in one line.
        assert rendered.rc in (0, 2) and "internal error" not in rendered.err, rendered.err
        if rendered.rc == 0:
            assert all(isinstance(obj, dict) and "kind" in obj for obj in yaml.safe_load_all(rendered.out))
    else:
        assert rendered.rc == result.rc and rendered.out == ""


_YAML_BYTES = st.sampled_from([b"[", b"]", b"{", b"}", b"&a ", b"*a", b"!!", b"|", b">", b":", b"- ", b"#",
                               b"%", b"@", b"`", b"'", b'"', b"\\", b"\n", b"\t", b"  ", b"\x00", b"\xff",
                               b"\xed\xa0\x80", b"\\ud800", b"<<: ", b"---\n", b"...\n", b"? "])  # fmt: skip


@st.composite
def mutated_bytes(draw: st.DrawFn) -> bytes:
    """An example file with up to eight byte-level edits (what the seeded fuzzer of issue 16 did: 88 tracebacks)."""
    data = bytearray(draw(st.sampled_from(EXAMPLE_TEXTS)))
    for _ in range(draw(st.integers(min_value=1, max_value=8))):
        at = draw(st.integers(min_value=0, max_value=len(data)))
        action = draw(st.sampled_from(["insert", "delete", "replace"]))
        piece = draw(st.one_of(_YAML_BYTES, st.binary(min_size=1, max_size=4)))
        if action == "insert":
            data[at:at] = piece
        elif action == "delete":
            del data[at : at + draw(st.integers(min_value=1, max_value=8))]
        else:
            data[at : at + len(piece)] = piece
    return bytes(data)


@FUZZ
@given(mutated_bytes())
def test_validate_on_mutated_files(data: bytes) -> None:
    assert_well_behaved(run_on_bytes("validate", data), data)


@settings(FUZZ, max_examples=150)
@given(st.binary(max_size=3000))
def test_validate_on_random_bytes(data: bytes) -> None:
    assert_well_behaved(run_on_bytes("validate", data), data)


@settings(FUZZ, max_examples=150)
@given(st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=4, max_size=4))
def test_plan_on_any_numbers(numbers: list[float]) -> None:
    qps, latency, concurrency, headroom = (repr(x) for x in numbers)
    result = run_cli("plan", "--qps", qps, "--latency", latency, "--concurrency", concurrency, "--headroom", headroom)
    assert result.rc in (0, 2) and "internal error" not in result.err, result.err
    assert len(result.lines) == (1 if result.rc else 0) and result.seconds < SECONDS
    if result.rc == 0:
        assert "replicas; with" in result.out


@st.composite
def yaml_bombs(draw: st.DrawFn) -> bytes:
    """The shapes behind issue 16's tracebacks and hangs, at random sizes: nesting, alias fan-out, long numbers,
    tags, repeated keys, surrogate escapes, placed where the spec or the metadata goes."""
    kind = draw(st.sampled_from(["deep", "laughs", "number", "tag", "duplicate", "surrogate"]))
    if kind == "deep":
        depth = draw(st.integers(min_value=1, max_value=30_000))
        open_, close = draw(st.sampled_from([("[", "]"), ("{a: ", "}"), ("- ", "")]))
        if close:
            value = open_ * depth + "1" + close * depth
        else:  # block style: indentation grows with depth, so keep the file within bounds
            value = "".join(f"\n{'  ' * i}- " for i in range(min(depth, 700))) + "1"
    elif kind == "laughs":
        fan, levels = draw(st.integers(min_value=1, max_value=12)), draw(st.integers(min_value=1, max_value=12))
        anchors = "".join(f"  a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * fan)}]\n" for i in range(1, levels))
        return _dump_text(f"  a0: &a0 [lol]\n{anchors}  model: {{path: m}}\n  x: *a{levels - 1}")
    elif kind == "number":
        value = draw(st.sampled_from(["9", "1:", "0x", "1_", "0b1"])) * draw(st.integers(min_value=1, max_value=50_000))
        value = value.rstrip(":_") or "1"
    elif kind == "tag":
        value = draw(st.sampled_from(["!!binary aGk=", "!!set {a}", "!!omap [{a: 1}]", "!!timestamp 2001-12-14",
                                      "!!python/name:os.system", "!custom 1", "!!float 1", "!!str 1"]))  # fmt: skip
    elif kind == "duplicate":
        key = draw(st.sampled_from(["model", "replicas", "engine"]))
        return _dump_text(f"  model: {{path: m}}\n  {key}: 1\n  {key}: 2")
    else:
        escapes = draw(st.lists(st.sampled_from(["\\ud800", "\\udfff", "a", "\\U0010ffff"]), max_size=6))
        value = '"' + "".join(escapes) + '"'
    return _dump_text(f"  model: {{path: m}}\n  x: {value}")


def _dump_text(spec_body: str) -> bytes:
    head = "apiVersion: sglang.ai/v1alpha1\nkind: SGLangDeployment\nmetadata: {name: a}\nspec:\n"
    return f"{head}{spec_body}\n".encode()


@settings(FUZZ, max_examples=150)
@given(yaml_bombs())
def test_validate_on_yaml_bombs(data: bytes) -> None:
    assert_well_behaved(run_on_bytes("validate", data), data)


# --- (b) every accepted spec renders valid objects that meet the pod policy ----------------------------------------

DNS = st.from_regex(r"\A[a-z]([a-z0-9-]{0,10}[a-z0-9])?\Z")
# (tp, dp, attentionDP, ep, nnodes) that satisfy the parallelism rules, and a few that do not.
PARALLELISM = st.sampled_from(
    [(1, 1, 1, 1, 1), (2, 1, 1, 1, 1), (4, 1, 2, 1, 1), (8, 1, 8, 8, 1), (8, 2, 1, 1, 1), (16, 1, 1, 1, 2),
     (16, 1, 16, 16, 2), (4, 1, 1, 1, 2), (6, 1, 4, 1, 1)]
)  # fmt: skip
MOUNT_PATHS = st.sampled_from(["/data", "/etc/app", "/scratch", "/var/run/x"])
TENANT_VOLUMES = ("data", "cfg", "creds", "scratch")


def _volume_source(name: str, draw: st.DrawFn, junk: bool) -> dict[str, Any]:
    source = draw(
        st.sampled_from(
            [
                {"configMap": {"name": "app-config"}},
                {"secret": {"secretName": "app-secret", "defaultMode": 0o440}},
                {"emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}},
                {"emptyDir": {}},
                {"persistentVolumeClaim": {"claimName": "shared-data", "readOnly": True}},
                {"downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}},
                {"projected": {"sources": [{"configMap": {"name": "a"}}, {"secret": {"name": "b"}}]}},
            ]
        )
    )
    if junk:
        kind = next(iter(source))
        if isinstance(source[kind], dict) and kind != "projected":
            source[kind] = {**source[kind], **draw(st.dictionaries(st.text(max_size=8), JSON_VALUES, max_size=2))}
    return {"name": name, **source}


def _env(draw: st.DrawFn) -> list[dict[str, Any]]:
    names = draw(st.lists(st.sampled_from(["LOG_LEVEL", "APP_MODE", "NCCL_DEBUG", "EXTRA"]), max_size=3, unique=True))
    return [
        draw(
            st.sampled_from(
                [
                    {"name": name, "value": "info"},
                    {"name": name, "valueFrom": {"secretKeyRef": {"name": "app-secret", "key": "k"}}},
                    {"name": name, "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                ]
            )
        )
        for name in names
    ]


def _mounts(draw: st.DrawFn, volumes: list[str], operator_volumes: bool) -> list[dict[str, Any]]:
    names = [*volumes, *(["model-cache", "dshm"] if operator_volumes else [])]
    if not names:
        return []
    chosen = draw(st.lists(st.sampled_from(names), max_size=2, unique=True))
    paths = draw(st.lists(MOUNT_PATHS, min_size=len(chosen), max_size=len(chosen), unique=True))
    return [
        {"name": name, "mountPath": path, **draw(st.sampled_from([{}, {"readOnly": True}, {"readOnly": False}]))}
        for name, path in zip(chosen, paths, strict=True)
    ]


@st.composite
def tenant_specs(draw: st.DrawFn, free_form: bool = False) -> dict[str, Any]:
    """A spec as a tenant could write it: mostly within the rules, over every section a tenant controls.
    `free_form` also, now and then (one slot in four, so that most specs still pass and reach the render), fills the
    template's once free-form objects (affinity, spread constraints, volume sources) with arbitrary content, lets
    containers mount the operator's own volumes and annotates AppArmor."""

    def hostile() -> bool:
        return free_form and draw(st.sampled_from([False, False, False, True]))

    tp, dp, attention_dp, ep, nnodes = draw(PARALLELISM)
    spec: dict[str, Any] = {
        "model": {
            "path": draw(st.sampled_from(["Qwen/Qwen2.5-7B-Instruct", "/models/llama", "meta-llama/Llama-3.1-8B"])),
            "cache": draw(
                st.sampled_from(
                    [
                        {"type": "emptyDir", "sizeLimit": "200Gi"},
                        {"type": "persistentVolumeClaim", "claimName": "weights", "readOnly": True},
                        {"type": "hostPath", "hostPath": "/models/hf"},
                        {"type": "hostPath", "hostPath": "/models/hf", "readOnly": False},
                        {"type": "hostPath", "hostPath": "/data/elsewhere"},
                    ]
                )
            ),
        },
        "replicas": draw(st.integers(min_value=0, max_value=2)),
        "parallelism": {"tp": tp, "dp": dp, "attentionDP": attention_dp, "ep": ep, "nnodes": nnodes},
        "engine": {
            "args": draw(
                st.lists(
                    st.sampled_from(["--log-level=info", "--enable-torch-compile", "--chunked-prefill-size=4096"]),
                    max_size=2,
                    unique=True,
                )
            ),
            "env": _env(draw),
        },
        "router": {
            "enabled": draw(st.booleans()),
            "replicas": draw(st.integers(min_value=1, max_value=2)),
            "stickySessions": {"enabled": draw(st.booleans())},
        },
        "monitoring": {"podMonitor": draw(st.booleans())},
        "networkPolicy": {"enabled": draw(st.booleans())},
    }
    if draw(st.booleans()):
        spec["router"]["apiKeySecretRef"] = {"name": "router-key"}
    if draw(st.booleans()):
        spec["model"]["tokenSecretRef"] = {"name": "hf-token", "key": "token"}
    volume_names = draw(st.lists(st.sampled_from(TENANT_VOLUMES), max_size=3, unique=True))
    pod: dict[str, Any] = {
        "nodeSelector": draw(st.dictionaries(st.sampled_from(["gpu", "zone", "example.com/pool"]), DNS, max_size=2)),
        "tolerations": draw(
            st.lists(
                st.sampled_from(
                    [
                        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                        {"key": "dedicated", "operator": "Equal", "value": "llm"},
                    ]
                ),
                max_size=2,
            )
        ),
        "volumes": [_volume_source(name, draw, hostile()) for name in volume_names],
        "containers": [],
    }
    if draw(st.booleans()):
        pod["affinity"] = (
            draw(st.dictionaries(st.sampled_from(["nodeAffinity", "podAffinity", "x"]), JSON_VALUES, max_size=2))
            if hostile()
            else {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["h100", "h200"]}]}]}}}
        )  # fmt: skip
    if draw(st.booleans()):
        pod["topologySpreadConstraints"] = (
            [draw(st.dictionaries(st.sampled_from(["maxSkew", "topologyKey", "whenUnsatisfiable"]), JSON_VALUES))]
            if hostile()
            else [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway",
                   "labelSelector": {"matchLabels": {"app": "x"}}}]
        )  # fmt: skip
    if draw(st.booleans()):
        pod["containers"].append(
            {"name": "sglang", "env": _env(draw), "volumeMounts": _mounts(draw, volume_names, hostile())}
        )
    for index in range(draw(st.integers(min_value=0, max_value=2))):
        sidecar: dict[str, Any] = {
            "name": f"helper-{index}",
            "image": "busybox:1.36",
            "command": ["sh", "-c", "sleep infinity"],
            "env": _env(draw),
            "volumeMounts": _mounts(draw, volume_names, hostile()),
            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
        }
        if draw(st.booleans()):
            sidecar["ports"] = [{"name": "http", "containerPort": 8080 + index}]
        pod["containers"].append(sidecar)
    annotations = draw(st.dictionaries(st.sampled_from(["team", "example.com/owner"]), DNS, max_size=2))
    if hostile():
        annotations[pss.APPARMOR_ANNOTATION + draw(st.sampled_from(["sglang", "helper-0"]))] = "unconfined"
    spec["template"] = {
        "metadata": {"labels": draw(st.dictionaries(st.sampled_from(["team", "app"]), DNS, max_size=2)),
                     "annotations": annotations},
        "spec": {key: value for key, value in pod.items() if value},
    }  # fmt: skip
    return spec


POLICY = OperatorSettings(pod_policy=PodPolicy(allowed_host_paths=ALLOWED_HOST_PATHS))


def pod_problems(what: str, pod_spec: dict[str, Any], annotations: dict[str, str]) -> list[str]:
    """What the operator's pod policy forbids, and what the API server refuses in a pod beyond its schema."""
    found = [
        f"{what}: {violation}"
        for violation in pss.baseline(pod_spec, annotations)
        if violation != "hostPath volumes: model-cache"  # the one hostPath there is: checked below
    ]
    if pod_spec.get("serviceAccountName", "default") != "default" or "serviceAccount" in pod_spec:
        found.append(f"{what}: another service account")
    if pod_spec.get("automountServiceAccountToken") is not False:
        found.append(f"{what}: a service-account token is mounted")
    host_paths = {v["name"]: v["hostPath"]["path"] for v in pod_spec.get("volumes") or [] if "hostPath" in v}
    for name, path in host_paths.items():
        if name != "model-cache" or not POLICY.pod_policy.host_path_allowed(path):
            found.append(f"{what}: hostPath {name}={path} outside the allowed paths")
    containers = list(pss.containers(pod_spec))
    for container in containers:
        name, context = container.get("name"), container.get("securityContext") or {}
        if context.get("privileged") is not False or context.get("allowPrivilegeEscalation") is not False:
            found.append(f"{what}: container {name} may gain privilege: {context}")
        if "ALL" not in (context.get("capabilities") or {}).get("drop", []):
            found.append(f"{what}: container {name} keeps capabilities")
        mounts = container.get("volumeMounts") or []
        for mount in mounts:
            if mount["name"] in host_paths and mount.get("readOnly") is not True:
                found.append(f"{what}: container {name} mounts the node directory {mount['name']} writable")
        paths = Counter(mount["mountPath"] for mount in mounts)
        found += [f"{what}: container {name} mounts {p} twice" for p, n in paths.items() if n > 1]
    volumes = Counter(v["name"] for v in pod_spec.get("volumes") or [])
    found += [f"{what}: volume {v} defined twice" for v, n in volumes.items() if n > 1]
    names = Counter(c.get("name") for c in containers)
    found += [f"{what}: container name {c} used twice" for c, n in names.items() if n > 1]
    found += [
        f"{what}: container {c.get('name')} mounts undefined volume {m['name']}"
        for c in containers
        for m in c.get("volumeMounts") or []
        if m["name"] not in volumes
    ]
    return found


def rendered_problems(raw: dict[str, Any]) -> list[str]:
    spec, _ = parse_spec(raw, strict=True)
    assume(spec is not None)
    assert spec is not None
    assume(not check_pod_policy(spec, POLICY.pod_policy))
    problems = []
    for obj in render_all(spec, OWNER, POLICY):
        # Replicas differ only in names: the schema check (tens of ms an object) reads replica 0's pods. No schema
        # for the PodMonitor CRD here.
        other_replica = obj["kind"] == "Pod" and obj["metadata"]["labels"].get(LABEL_REPLICA) != "0"
        if not obj["apiVersion"].startswith("monitoring.coreos.com") and not other_replica:
            try:
                kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
            except kubernetes_validate.ValidationError as exc:
                problems.append(f"{obj['kind']} {obj['metadata']['name']}: schema: {str(exc).splitlines()[0]}")
        if obj["kind"] == "Pod":
            problems += pod_problems(f"pod {obj['metadata']['name']}", obj["spec"], obj["metadata"].get("annotations"))
        elif obj["kind"] == "Deployment":
            template = obj["spec"]["template"]
            problems += pod_problems(
                f"deployment {obj['metadata']['name']}", template["spec"], template["metadata"].get("annotations")
            )
    return problems


@settings(FUZZ, max_examples=50, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(tenant_specs())
def test_accepted_specs_render_valid_pods_within_the_policy(raw: dict[str, Any]) -> None:
    assert rendered_problems(raw) == []
    data = _dump({"apiVersion": "sglang.ai/v1alpha1", "kind": "SGLangDeployment", "metadata": {"name": "fuzz"},
                  "spec": raw})  # fmt: skip
    assert run_on_bytes("validate", data, "--allow-host-path", "/models").rc == 0


@settings(FUZZ, max_examples=50, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(tenant_specs(free_form=True))
def test_accepted_specs_with_free_form_content_render_valid_pods_within_the_policy(raw: dict[str, Any]) -> None:
    assert rendered_problems(raw) == []
