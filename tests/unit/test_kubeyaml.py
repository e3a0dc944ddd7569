"""`kubeyaml.kubectl_scalar` reads a plain YAML scalar as kubectl does.

The table is what sigs.k8s.io/yaml 1.6.0 (go.yaml.in/yaml/v2 2.4.4, kubectl 1.37's reader) made of `v: <spelling>`,
printed by a small Go program over `yaml.YAMLToJSON` (the port was also compared with it on 124,000 spellings made
of digits, signs, dots, underscores, colons and the letters b/o/x/e); `e2e/tests/test_yaml_readings.py` checks the
refusals against kubectl itself.
"""

from __future__ import annotations

import math

import pytest
import yaml

from sglang_operator.crfile import parse_documents
from sglang_operator.kubeyaml import KubectlDumper, describe, kubectl_dumper, kubectl_scalar, same_value

# fmt: off
GO_YAML = [
    ("y", True), ("Y", True), ("n", False), ("N", False), ("yes", True), ("No", False), ("on", True), ("OFF", False),
    ("true", True), ("False", False), ("tRUE", "tRUE"), ("~", None), ("null", None), ("NULL", None), ("", None),
    ("0o10", 8), ("0O10", 8), ("0X1F", 31), ("0x1F", 31), ("0B11", 3), ("0b11", 3), ("010", 8), ("08", 8.0),
    ("0_8", 8.0), ("1_000", 1000), ("1e3", 1000.0), ("1E3", 1000.0), ("1.0e3", 1000.0), ("1.0e+3", 1000.0),
    (".5e3", 500.0), (".5", 0.5), ("-.5", -0.5), ("+.5", 0.5), ("1.", 1.0), ("1:30", "1:30"), ("-1:30", "-1:30"),
    ("190:20:30.15", "190:20:30.15"), ("0b-1", -1), ("0b_", "0b_"), ("2001-12-14", "2001-12-14"),
    ("2001-12-14t21:59:43.10-05:00", "2001-12-14t21:59:43.10-05:00"), ("9223372036854775807", 2**63 - 1),
    ("9223372036854775808", 2**63), ("18446744073709551615", 2**64 - 1), ("18446744073709551616", 2.0**64),
    ("+12", 12), ("-0", 0), ("=", "="), ("<<", "<<"), ("abc", "abc"), (".5_0", 0.5), ("._5", "._5"),
    ("1e400", "1e400"), ("0x", "0x"), ("-", "-"),
]
# fmt: on


@pytest.mark.parametrize(("spelling", "expected"), GO_YAML, ids=[repr(s) for s, _ in GO_YAML])
def test_reads_as_go_yaml_does(spelling: str, expected: object) -> None:
    got = kubectl_scalar(spelling)
    assert type(got) is type(expected) and same_value(got, expected), got  # type: ignore[arg-type]


def test_non_finite_words() -> None:
    assert kubectl_scalar(".inf") == math.inf and kubectl_scalar("-.Inf") == -math.inf
    assert math.isnan(kubectl_scalar(".nan"))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        (8, 8.0, True),
        (True, 1, False),
        (None, "", False),
        ("1", 1, False),
        (math.nan, math.nan, True),
        (0, False, False),
    ],
)
def test_same_value_is_one_json_value(a: object, b: object, same: bool) -> None:
    assert same_value(a, b) is same  # type: ignore[arg-type]


def test_describe() -> None:
    assert [describe(v) for v in (True, None, 8.0, 0.5, "1:30")] == [
        "the boolean true", "null", "the number 8", "the number 0.5", "the string '1:30'",
    ]  # fmt: skip


@pytest.mark.parametrize("spelling", [s for s, _ in GO_YAML])
def test_the_dumper_writes_strings_kubectl_reads_as_strings(spelling: str) -> None:
    """What `render` prints (and the hostile corpus writes) is read alike by kubectl and `validate`: a string
    kubectl would read as a number or a boolean is quoted, as a key and as a value."""
    for dumper in (KubectlDumper, kubectl_dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper))):
        text = yaml.dump({spelling: spelling, "list": [spelling]}, Dumper=dumper)
        assert parse_documents(text, "f") == [{spelling: spelling, "list": [spelling]}], text
