"""What `crfile` still reads: the bounds refuse hostile files, never the ordinary ways of writing a CR."""

from __future__ import annotations

import pytest
import yaml

from sglang_operator.crfile import MAX_DEPTH, CRFileError, loader_class, parse_documents
from sglang_operator.kubeyaml import kubectl_scalar
from tests.support.hostile.cli_runner import run_on_bytes

HEAD = "apiVersion: sglang.ai/v1alpha1\nkind: SGLangDeployment\nmetadata: {name: ok}\n"
LOADERS = [loader_class(), loader_class(yaml.SafeLoader)]  # libyaml's parser where installed, and PyYAML's own


@pytest.mark.parametrize(
    "text",
    [
        HEAD + "spec: {model: {path: m, revision: 2024-01-01}}\n",  # a date-like revision stays a string
        "\ufeff" + HEAD + "spec: {model: {path: m}}\n",  # a byte-order mark
        (HEAD + "spec:\n  model:\n    path: m\n").replace("\n", "\r\n"),  # Windows line endings
        "---\n" + HEAD + "spec: {model: {path: m}}\n...\n---\n# only a comment\n",  # empty documents around it
        HEAD + "spec: {model: {path: !!str m}, replicas: !!int 2}\n",  # YAML's core tags
        HEAD + "spec:\n  model: {path: m}\n  engine:\n    args:\n    - >-\n      --chat-template=a\n      b\n",
        HEAD + "spec: {model: {path: 'caché/模型'}}\n",  # any Unicode text
        HEAD + "spec: {model: {path: m}, template: {spec: {affinity: {nodeAffinity: {"
        "requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: "
        "[{key: gpu, operator: In, values: [h100]}]}]}}}}}}\n",  # the deepest real field
    ],
    ids=["timestamp", "bom", "crlf", "empty-documents", "core-tags", "folded-scalar", "unicode", "deep-affinity"],
)
def test_ordinary_files_are_valid(text: str) -> None:
    result = run_on_bytes("validate", text.encode())
    assert (result.rc, result.err, result.out) == (0, "", "default/ok: valid\n")
    for loader in LOADERS:
        assert len(parse_documents(text.removeprefix("\ufeff"), "f", loader)) == 1


@pytest.mark.parametrize("loader", LOADERS, ids=["libyaml", "pure-python"])
def test_depth_limit_is_exact(loader: type[yaml.SafeLoader]) -> None:
    def nested(levels: int) -> str:
        return "a: " + "[" * (levels - 1) + "]" * (levels - 1)  # the document's own map is the first level

    assert parse_documents(nested(MAX_DEPTH), "f", loader) == [{"a": _lists(MAX_DEPTH - 1)}]
    with pytest.raises(CRFileError, match=f"nested deeper than {MAX_DEPTH} levels"):
        parse_documents(nested(MAX_DEPTH + 1), "f", loader)


def _lists(levels: int) -> object:
    value: object = []
    for _ in range(levels - 1):
        value = [value]
    return value


@pytest.mark.parametrize("loader", LOADERS, ids=["libyaml", "pure-python"])
def test_every_refusal_names_the_line(loader: type[yaml.SafeLoader]) -> None:
    for body, fragment in [
        ("x: &a 1\ny: *a", "line 1: YAML anchors"),
        ("x: 1\nz: !!binary aGk=", "line 2: the YAML tag"),
        ("x: 1\nz: 2\nx: 3", "line 3: the key 'x' appears twice"),
        ("x:\n  z: " + "9" * 101, "line 2: a number of 101 characters"),
    ]:
        with pytest.raises(CRFileError, match=fragment):
            parse_documents(body, "f", loader)


# --- one reading (issue 29, gap 7): what validate reads is what kubectl sends, or the file is refused ---

_AT = HEAD + "spec:\n  model: {path: m}\n  x: %s\n"  # the scalar under test is on line 6
_BOTH = "is {kubectl} to kubectl and {validate} to validate"

# fmt: off
DISAGREE = [
    ("y", _BOTH.format(kubectl="the boolean true", validate="the string 'y'")),
    ("N", _BOTH.format(kubectl="the boolean false", validate="the string 'N'")),
    ("0o10", _BOTH.format(kubectl="the number 8", validate="the string '0o10'")),
    ("0X1F", _BOTH.format(kubectl="the number 31", validate="the string '0X1F'")),
    ("0B11", _BOTH.format(kubectl="the number 3", validate="the string '0B11'")),
    ("08", _BOTH.format(kubectl="the number 8", validate="the string '08'")),
    ("1e3", _BOTH.format(kubectl="the number 1000", validate="the string '1e3'")),
    ("1.0e3", _BOTH.format(kubectl="the number 1000", validate="the string '1.0e3'")),
    (".5e3", _BOTH.format(kubectl="the number 500", validate="the string '.5e3'")),
    ("-.5", _BOTH.format(kubectl="the number -0.5", validate="the string '-.5'")),
    ("0b-1", _BOTH.format(kubectl="the number -1", validate="the string '0b-1'")),
    ("1:30", _BOTH.format(kubectl="the string '1:30'", validate="the number 90")),
    ("190:20:30.15", _BOTH.format(kubectl="the string '190:20:30.15'", validate="the number 685230.15")),
    ("18446744073709551617", _BOTH.format(kubectl="the number 18446744073709551616",
                                          validate="the number 18446744073709551617")),
    ("0b_", "is the string '0b_' to kubectl and no value to validate"),
    ("=", "the unquoted '=' is YAML 1.1's 'value' type to validate and a string to kubectl"),
    ("<<", "the YAML merge key '<<' is not accepted"),
    ("! 12", "the '!'-tagged '12' " + _BOTH.format(kubectl="the string '12'", validate="the number 12")),
    ('! "true"', "the '!'-tagged 'true' " + _BOTH.format(kubectl="the string 'true'", validate="the boolean true")),
    ("!!bool y", "!!bool 'y' is the boolean true to kubectl and no value to validate"),
    ("!!int 08", "!!int '08': kubectl reads '08' as the number 8 and refuses the tag"),
    ("!!int 1:30", "!!int '1:30': kubectl reads '1:30' as the string '1:30' and refuses the tag"),
    ('"a\\/b"', "the escape \\/ in a double-quoted string is '/' to validate and an error to kubectl"),
]
AGREE = [
    "true", "False", "yes", "OFF", "~", "null", "10", "-3", "+12", "010", "0x1F", "0b11", "1_000", "0.5", "1.",
    "1.0e+3", "abc", ".inf", "2001-12-14", "2001-12-14 21:59:43.10 -5", "'y'", '"1:30"', "!!str y", "!!float 1",
    "! abc", "'a\\/b'", "a\\/b", '"<<"',
]
# fmt: on


@pytest.mark.parametrize("loader", LOADERS, ids=["libyaml", "pure-python"])
@pytest.mark.parametrize(("scalar", "fragment"), DISAGREE, ids=[s for s, _ in DISAGREE])
def test_scalars_the_readers_disagree_on_are_refused(scalar: str, fragment: str, loader: type[yaml.SafeLoader]) -> None:
    with pytest.raises(CRFileError, match=r"^f: line 6: ") as refused:
        parse_documents(_AT % scalar, "f", loader)
    assert fragment in str(refused.value)


@pytest.mark.parametrize("loader", LOADERS, ids=["libyaml", "pure-python"])
@pytest.mark.parametrize("scalar", AGREE)
def test_scalars_the_readers_agree_on_are_read(scalar: str, loader: type[yaml.SafeLoader]) -> None:
    [doc] = parse_documents(_AT % scalar, "f", loader)
    if scalar[:1] not in "'\"!":
        assert doc["spec"]["x"] == kubectl_scalar(scalar)


# fmt: off
FILES = [
    ("inline-merge", HEAD + "spec:\n  <<: {replicas: 3}\n  model: {path: m}\n", "line 5: the YAML merge key"),
    ("merge-after", HEAD + "spec:\n  replicas: 1\n  <<: {replicas: 3}\n", "line 6: the YAML merge key"),
    ("merge-list", HEAD + "spec: {<<: [{replicas: 3}, {model: {path: m}}]}\n", "line 4: the YAML merge key"),
    ("merge-nested", HEAD + "spec:\n  model:\n    <<: {path: m}\n", "line 6: the YAML merge key"),
    ("key-y", HEAD + "spec:\n  nodeSelector: {y: gpu}\n", "the map key 'y' is the boolean true to kubectl"),
    ("key-on", HEAD + "spec:\n  on: 1\n", "the map key 'on' is the boolean true to validate"),
    ("key-int", HEAD + "spec:\n  1: a\n", "the map key '1' is the number 1 to validate"),
    ("key-null", HEAD + "spec:\n  ~: a\n", "the map key '~' is null to validate"),
    ("key-octal", HEAD + "spec:\n  0o10: a\n", "the map key '0o10' is the number 8 to kubectl"),
    ("directive-yaml", "%YAML 1.1\n---\n" + HEAD, "line 1: YAML directives (%YAML, %TAG) are not accepted"),
    ("directive-tag", "%TAG !k! tag:yaml.org,2002:\n---\n" + HEAD, "line 1: YAML directives"),
    ("separator-content", "--- " + HEAD, "line 1: kubectl refuses a '---' line with more than a comment"),
    ("separator-dashes", HEAD + "spec: {model: {path: m}}\n----\n", "line 5: kubectl refuses a '---' line"),
    ("unicode-line-break", HEAD + "spec: {model: {path: m}}\u2028---\u2028", "line 4: YAML starts a document here"),
    ("json-exponent", '{"apiVersion": "sglang.ai/v1alpha1", "kind": "SGLangDeployment", "metadata": {"name": "ok"}, '
                      '"spec": {"model": {"path": "m"}, "replicas": 1e0}}', "reads spec.replicas otherwise"),
    ("json-exponent-list", '{"a": [1, 2, 3E2]}', "reads a[2] otherwise"),
]
# fmt: on


@pytest.mark.parametrize("loader", LOADERS, ids=["libyaml", "pure-python"])
@pytest.mark.parametrize(("text", "fragment"), [f[1:] for f in FILES], ids=[f[0] for f in FILES])
def test_files_the_readers_disagree_on_are_refused(text: str, fragment: str, loader: type[yaml.SafeLoader]) -> None:
    with pytest.raises(CRFileError, match=r"^f: ") as refused:
        parse_documents(text, "f", loader)
    assert fragment in str(refused.value)


def test_json_is_read_as_kubectl_reads_it() -> None:
    """A file that is JSON goes through kubectl's JSON decoder: `\\/` is an escape there, and the YAML-only checks
    (plain scalars, separators) do not apply; a flow-style file that is no JSON is YAML to both."""
    text = '{"apiVersion": "sglang.ai/v1alpha1", "spec": {"model": {"path": "a\\/b"}, "replicas": 10}}'
    assert parse_documents(text, "f") == [{"apiVersion": "sglang.ai/v1alpha1", "spec": {"model": {"path": "a/b"},
                                           "replicas": 10}}]  # fmt: skip
    with pytest.raises(CRFileError, match="the map key 'n' is the boolean false to kubectl"):
        parse_documents("{apiVersion: v1, n: 1}", "f")


def test_document_separators_kubectl_and_yaml_agree_on_are_read() -> None:
    text = "# head\n---\n" + HEAD + "spec: {model: {path: m}}\n--- # a comment\n...\n---   \n"
    assert len(parse_documents(text, "f")) == 1
