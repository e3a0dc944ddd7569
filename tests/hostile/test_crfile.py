"""What `crfile` still reads: the bounds refuse hostile files, never the ordinary ways of writing a CR."""

from __future__ import annotations

import pytest
import yaml

from sglang_operator.crfile import MAX_DEPTH, CRFileError, loader_class, parse_documents

from .cli_runner import run_on_bytes

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
        ("x: 1\ny: !!binary aGk=", "line 2: the YAML tag"),
        ("x: 1\ny: 2\nx: 3", "line 3: the key 'x' appears twice"),
        ("x:\n  y: " + "9" * 101, "line 2: a number of 101 characters"),
    ]:
        with pytest.raises(CRFileError, match=fragment):
            parse_documents(body, "f", loader)
