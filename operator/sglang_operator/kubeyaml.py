"""What `kubectl` makes of an unquoted YAML value, so that `validate` can refuse a file the two read differently.

`kubectl apply -f` reads YAML with sigs.k8s.io/yaml (1.6.0 in kubectl 1.37), which parses with go-yaml v2
(go.yaml.in/yaml/v2 2.4) and resolves each plain scalar by its `resolve` function; `validate` reads with PyYAML's
YAML 1.1 resolvers. The two disagree on many spellings: `y` and `n` are booleans to go-yaml only, `0o10`, `0X1F`,
`1e3`, `.5e3`, `-.5`, `08` and `0b-1` are numbers to go-yaml only, `1:30` is a number to PyYAML only, `! 12` is the
string "12" to go-yaml and the integer 12 to PyYAML. A review gate that runs `validate` on the file `kubectl` then
applies must see what the API server gets, so `crfile` compares both readings of every plain scalar and refuses the
file where they differ. This module is the go-yaml half: a port of `resolve` (resolve.go) and of the parts of Go's
`strconv.ParseInt`/`ParseUint`/`ParseFloat` it relies on, checked against the Go library on a table of spellings
(`tests/unit/test_kubeyaml.py`) and against `kubectl create --dry-run=server` (`e2e/tests/test_yaml_readings.py`).

Timestamps are left out on purpose: go-yaml resolves `2001-12-14` as a timestamp, then hands it to an `interface{}`
as the original string, which is what the port returns for anything it does not read as a number, boolean or null.
"""

import math
import re
from string import ascii_letters
from typing import Any

import yaml

Scalar = str | bool | int | float | None
"""A JSON value as kubectl sends it (go-yaml's int, int64 and uint64 are all `int` here)."""

_WORDS: dict[str, Scalar] = {
    **dict.fromkeys(("y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"), True),
    **dict.fromkeys(("n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"), False),
    **dict.fromkeys(("", "~", "null", "Null", "NULL"), None),
    **dict.fromkeys((".nan", ".NaN", ".NAN"), math.nan),
    **dict.fromkeys((".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF"), math.inf),
    **dict.fromkeys(("-.inf", "-.Inf", "-.INF"), -math.inf),
}
"""go-yaml's resolveMap (its `<<` entry is unreachable: `<` has no hint, so `<<` resolves as a string)."""

_HINTS = {**dict.fromkeys("+-", "S"), **dict.fromkeys("0123456789", "D"), **dict.fromkeys("yYnNtTfFoO~", "M"), ".": "."}
"""go-yaml's resolveTable: the first character decides which readings are tried; any other is a string."""

_YAML_STYLE_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?")
_DOT_FLOAT = re.compile(r"\.[0-9_]+([eE][-+]?[0-9][0-9_]*)?")
"""What Go's ParseFloat accepts of a string that starts with `.` (digits with underscores, an exponent)."""

_INT64 = 1 << 63
_UINT64 = 1 << 64


def _parse_uint(text: str, base: int) -> int | None:
    """Go's strconv.ParseUint(text, base, 64): base 0 takes the 0b/0o/0x prefixes (either case) and a leading 0
    as octal; no sign; None where Go returns an error (a syntax error, or more than 64 bits)."""
    if not text:
        return None
    if base == 0:
        base = 10
        if text[0] == "0":
            prefix = text[1:2].lower()
            if len(text) >= 3 and prefix in ("b", "o", "x"):
                base, text = {"b": 2, "o": 8, "x": 16}[prefix], text[2:]
            else:
                base, text = 8, text[1:]
    value = 0
    for char in text:
        if "0" <= char <= "9":
            digit = ord(char) - ord("0")
        elif char in ascii_letters:
            digit = ord(char.lower()) - ord("a") + 10
        else:
            return None
        if digit >= base:
            return None
        value = value * base + digit
    return value if value < _UINT64 else None


def _parse_int(text: str, base: int) -> int | None:
    """Go's strconv.ParseInt(text, base, 64): an optional sign, then ParseUint, within int64."""
    negative = text[:1] == "-"
    magnitude = _parse_uint(text[1:] if text[:1] in ("+", "-") else text, base)
    if magnitude is None or magnitude > _INT64 or (magnitude == _INT64 and not negative):
        return None
    return -magnitude if negative else magnitude


def _underscores_ok(text: str) -> bool:
    """Go's strconv.underscoreOK for a decimal number: each `_` between two digits."""
    last = "^"
    for char in text:
        if "0" <= char <= "9":
            last = "0"
        elif char == "_":
            if last != "0":
                return False
            last = "_"
        elif last == "_":
            return False
        else:
            last = "!"
    return last != "_"


def _finite(text: str) -> float | None:
    """Go's ParseFloat of a decimal `text`: an error (None) where the value overflows a float64."""
    value = float(text.replace("_", ""))
    return None if math.isinf(value) else value


def kubectl_scalar(text: str) -> Scalar:
    """The value kubectl sends for the plain (unquoted, untagged) YAML scalar `text`: go-yaml v2's `resolve`."""
    hint = _HINTS.get(text[:1], "N" if text == "" else "")
    if not hint:
        return text
    if text in _WORDS:
        return _WORDS[text]
    if hint == ".":
        value = _finite(text) if _DOT_FLOAT.fullmatch(text) and _underscores_ok(text) else None
        return text if value is None else value
    if hint not in ("D", "S"):
        return text
    number = _number(text.replace("_", ""))
    return text if number is None else number


def _number(plain: str) -> int | float | None:
    """A digit- or sign-led scalar (underscores removed) as go-yaml reads it: an int, a uint, a YAML float, a
    binary int, in that order; None when none of them (the scalar stays a string)."""
    for number in (_parse_int(plain, 0), _parse_uint(plain, 0)):
        if number is not None:
            return number
    value = _finite(plain) if _YAML_STYLE_FLOAT.fullmatch(plain) else None
    if value is not None:
        return value
    if plain.startswith("0b"):
        return next((n for n in (_parse_int(plain[2:], 2), _parse_uint(plain[2:], 2)) if n is not None), None)
    if plain.startswith("-0b"):
        return _parse_int("-" + plain[3:], 2)
    return None


def same_value(validate: object, kubectl: Scalar) -> bool:
    """Whether two readings are one JSON value: numbers compare by value whatever their type (go-yaml's float 8.0
    is JSON 8), booleans, null and strings only with their own kind."""
    if isinstance(validate, bool) or isinstance(kubectl, bool):
        return type(validate) is type(kubectl) and validate == kubectl
    if validate is None or kubectl is None:
        return validate is kubectl
    if isinstance(validate, str) or isinstance(kubectl, str):
        return isinstance(validate, str) and validate == kubectl
    if isinstance(validate, int | float) and isinstance(kubectl, int | float):
        return validate == kubectl or (math.isnan(validate) and math.isnan(kubectl))
    return False


def describe(value: object) -> str:
    """A reading as a user would name it: `the boolean true`, `the number 8`, `the string '1:30'`, `null`."""
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if value is None:
        return "null"
    if isinstance(value, int | float):
        number = int(value) if isinstance(value, float) and value.is_integer() else value
        return f"the number {number}"
    return f"the string {str(value)[:40]!r}"


def _represent_str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    """A string kubectl would read as something else (`y`, `0o10`, `1e3`) is written quoted; PyYAML quotes only
    those its own YAML 1.1 resolvers would misread."""
    style = "'" if not isinstance(kubectl_scalar(data), str) else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


def kubectl_dumper(base: type[yaml.SafeDumper]) -> type[yaml.SafeDumper]:
    """`base` (a safe dumper, libyaml's or PyYAML's) writing YAML that kubectl and `validate` read alike: what
    `render` prints is piped into `kubectl apply -f -`."""
    representers: dict[Any, Any] = {**base.yaml_representers, str: _represent_str}
    return type("KubectlDumper", (base,), {"yaml_representers": representers})


class KubectlDumper(yaml.SafeDumper):
    """PyYAML's safe dumper writing YAML that kubectl and `validate` read alike (see `kubectl_dumper`)."""


KubectlDumper.add_representer(str, _represent_str)
