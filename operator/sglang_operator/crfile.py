"""Reading an SGLangDeployment from a file a tenant wrote, with every cost bounded, as `kubectl` reads it.

`sglang-operator validate` and `render` take any file: one that is not UTF-8, a YAML "billion laughs" made of
aliases, 20,000 nested brackets or a number of 10,000 digits must each give one clear line, in well under a second
and bounded memory, never a traceback. So the file is read up to `MAX_BYTES`, decoded strictly, and its YAML event
stream is checked before anything is composed: no anchors or aliases (a CR has no use for them, and they are how a
small file expands into gigabytes), no tags beyond YAML's core types (a CR holds JSON values), at most `MAX_DEPTH`
levels of nesting and `MAX_NODES` values, no duplicate keys, no lone surrogate escapes, no numbers of more than
`MAX_NUMBER_CHARS` characters. Only then is the document built, by a loader that reads timestamps as the strings
the API server sees.

A review gate runs `validate` on the file that `kubectl apply -f` then sends, so `validate` must read what kubectl
reads (issue 29, gap 7). kubectl reads a file that parses as JSON with Go's JSON decoder, and any other file by
splitting it at lines that start with `---` and reading each part with go-yaml v2; `validate` reads with PyYAML's
YAML 1.1. Every construct on which they differ is refused, with the line and the construct: a plain scalar that
the two resolve to different values (`y`, `0o10`, `1e3`, `1:30`, `! 12`; see `kubeyaml`), a merge key `<<` (the
two disagree on which value wins), a map key that is not a string to either, `=`, the escape `\\/` (PyYAML only),
`%YAML`/`%TAG` directives and `---` lines that kubectl splits on where YAML sees no document start, and a JSON file
whose numbers PyYAML reads otherwise (`1e3`).
"""

import json
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import yaml

from .api.constants import API_VERSION, KIND
from .api.rule import FieldError
from .kubeyaml import Scalar, describe, kubectl_scalar, same_value

MAX_BYTES = 1 << 20
"""The largest CR file read (the API server's own limit on an object is 1.5 MiB of JSON; real CRs are a few KiB)."""
MAX_DEPTH = 64
"""Nesting levels of mappings and sequences; the deepest real CR field (a node affinity term) is about 12."""
MAX_NODES = 10_000
"""Scalars, lists and maps in the file (the examples have at most a few hundred): building each costs Python time,
and 1 MiB of `[1,1,1,...]` is half a million of them."""
MAX_NUMBER_CHARS = 100
"""Characters of a number: far beyond any bound a field has, far below what takes time to convert."""
STDIN = "-"
PLACEHOLDER_UID = "00000000-0000-0000-0000-000000000000"

_CORE_TAGS = frozenset(
    f"tag:yaml.org,2002:{name}" for name in ("str", "int", "float", "bool", "null", "map", "seq")
) | {"!"}
_TIMESTAMP_TAG = "tag:yaml.org,2002:timestamp"
_JSON_TAGS = {f"tag:yaml.org,2002:{name}": name for name in ("str", "int", "float", "bool", "null")}
"""The tags of scalars both readers turn into a JSON value (PyYAML also resolves `<<` and `=` to tags of its own)."""
_SURROGATE = re.compile("[\ud800-\udfff]")
_ESCAPE = re.compile(r"\\(.)", re.DOTALL)
_SEPARATOR = "---"
"""kubectl splits a YAML file at every line that starts with this (k8s.io/apimachinery's YAMLReader)."""

_BaseLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class CRFileError(Exception):
    """The file cannot be read as one SGLangDeployment (exit 2): the message names the file and, where known, the
    line."""


def _without_timestamps(resolvers: dict[Any, list[tuple[str, Any]]]) -> dict[Any, list[tuple[str, Any]]]:
    return {first: [(tag, rx) for tag, rx in entries if tag != _TIMESTAMP_TAG] for first, entries in resolvers.items()}


def loader_class(base: type[yaml.SafeLoader] = _BaseLoader) -> type[yaml.SafeLoader]:
    """A safe loader on `base` (libyaml's when installed) that reads `2024-01-01` as a string, as the API server
    does, instead of a date no spec field takes."""
    return type(
        "CRLoader",
        (base,),
        {"yaml_implicit_resolvers": _without_timestamps(yaml.SafeLoader.yaml_implicit_resolvers)},
    )


CRLoader = loader_class()


def display_name(path: str) -> str:
    return "<stdin>" if path == STDIN else path


def read_text(path: str, stdin: BinaryIO | None = None) -> str:
    """The file's text: at most MAX_BYTES, strict UTF-8 (a leading byte-order mark is dropped)."""
    name = display_name(path)
    try:
        if path == STDIN:
            data = (stdin or sys.stdin.buffer).read(MAX_BYTES + 1)
        else:
            with Path(path).open("rb") as handle:
                data = handle.read(MAX_BYTES + 1)
    except OSError as exc:
        raise CRFileError(f"cannot read {name}: {exc.strerror or exc}") from exc
    if len(data) > MAX_BYTES:
        raise CRFileError(f"{name}: larger than {MAX_BYTES} bytes: a CR is a few KiB; is this the right file?")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise CRFileError(
            f"{name}: not UTF-8 text: byte 0x{data[exc.start]:02x} at line {line} (offset {exc.start}); "
            "save the file as UTF-8"
        ) from exc


def _line(event: yaml.Event) -> str:
    mark = event.start_mark
    return f"line {mark.line + 1}" if mark is not None else "somewhere"


def _looks_numeric(event: yaml.ScalarEvent, loader: yaml.SafeLoader) -> bool:
    if not event.implicit[0]:
        return False  # quoted: a string whatever it holds
    tag = loader.resolve(yaml.ScalarNode, event.value, (True, False))  # type: ignore[no-untyped-call]
    return tag in ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")


def _events(text: str, loader_cls: type[yaml.SafeLoader]) -> Iterator[yaml.Event]:
    loader = loader_cls(text)
    try:
        while loader.check_event():
            yield loader.get_event()  # type: ignore[no-untyped-call]
    finally:
        loader.dispose()


@dataclass
class _Frame:
    mapping: bool
    expect_key: bool = True
    keys: set[str] = field(default_factory=set)


def _check_key(frame: _Frame, event: yaml.Event, name: str) -> bool:
    """In a mapping, nodes alternate key, value: a key must be a scalar, and appear once (the API server refuses a
    duplicate field; YAML loaders silently keep the last). Says whether `event` is a key."""
    if not frame.mapping:
        return False
    is_key, frame.expect_key = frame.expect_key, not frame.expect_key
    if not is_key:
        return False
    if not isinstance(event, yaml.ScalarEvent):
        raise CRFileError(f"{name}: {_line(event)}: a map key must be a plain string, not a list or a map")
    if event.value in frame.keys:
        raise CRFileError(f"{name}: {_line(event)}: the key {event.value[:60]!r} appears twice in one map; keep one")
    frame.keys.add(event.value)
    return True


def _kind(value: Scalar) -> str:
    """go-yaml's tag for a value `kubectl_scalar` returned."""
    if isinstance(value, bool):
        return "bool"
    if value is None:
        return "null"
    return {int: "int", float: "float"}.get(type(value), "str")


def _validate_reading(loader: yaml.SafeLoader, tag: str, value: str) -> tuple[bool, Any]:
    """(True, what PyYAML builds of `value` under `tag`), or (False, None) where it cannot (`0b_`, `!!bool y`)."""
    try:
        return True, loader.construct_object(yaml.ScalarNode(tag, value))
    except (ValueError, KeyError, TypeError, yaml.YAMLError):
        return False, None


def _reading_problem(event: yaml.ScalarEvent, loader: yaml.SafeLoader, is_key: bool) -> str | None:
    """Why `validate` (PyYAML, YAML 1.1) and kubectl (go-yaml v2) read this scalar differently, or None: only
    plain scalars and tagged ones can differ; a quoted one is the same string to both."""
    value, tag = event.value, event.tag
    shown = repr(value[:40])
    if tag is None and not event.implicit[0]:
        return None
    if tag is None or tag == "!":
        kubectl: Scalar = kubectl_scalar(value) if tag is None else value  # go-yaml never resolves `!` scalars
        tag = loader.resolve(yaml.ScalarNode, value, (True, False))  # type: ignore[no-untyped-call]
        what = f"the unquoted {shown}" if event.tag is None else f"the '!'-tagged {shown}"
        if tag == "tag:yaml.org,2002:merge":
            return (
                "the YAML merge key '<<' is not accepted: validate and kubectl's reader disagree on which value wins "
                "where a merged key is also written out; write the keys out (or quote '<<' if you mean the string)"
            )
        if tag not in _JSON_TAGS:
            return f"{what} is YAML 1.1's {tag.rpartition(':')[2]!r} type to validate and a string to kubectl: quote it"
    else:
        name = _JSON_TAGS[tag]
        if name == "str":
            return None
        kubectl = kubectl_scalar(value)
        what = f"!!{name} {shown}"
        if not (_kind(kubectl) == name or (name == "float" and _kind(kubectl) == "int")):
            return f"{what}: kubectl reads {shown} as {describe(kubectl)} and refuses the tag; write the value plainly"
    readable, validate = _validate_reading(loader, tag, value)
    if not readable:
        return f"{what} is {describe(kubectl)} to kubectl and no value to validate (YAML 1.1): quote it"
    if is_key and not (isinstance(validate, str) and isinstance(kubectl, str)):
        who, reading = ("validate", validate) if not isinstance(validate, str) else ("kubectl", kubectl)
        return f"the map key {shown} is {describe(reading)} to {who}, not a string: quote the key"
    if not same_value(validate, kubectl):
        return (
            f"{what} is {describe(kubectl)} to kubectl and {describe(validate)} to validate (YAML 1.1 readers differ "
            "on it): quote it if you mean the string, or write it as both read it (true, false, null, 10, 0.5)"
        )
    return None


def _escape_problem(event: yaml.ScalarEvent, text: str) -> str | None:
    """The escape `\\/` in a double-quoted scalar is '/' to PyYAML and an error to go-yaml (the one escape they
    disagree on; `\\'` is an error to PyYAML)."""
    if event.style != '"' or "/" not in event.value or event.start_mark is None or event.end_mark is None:
        return None
    raw = text[event.start_mark.index : event.end_mark.index]
    if any(match.group(1) == "/" for match in _ESCAPE.finditer(raw)):
        return "the escape \\/ in a double-quoted string is '/' to validate and an error to kubectl: write / alone"
    return None


def _separators(text: str, name: str) -> set[int]:
    """The offsets of the lines at which kubectl cuts a YAML file into documents: each line that starts with `---`,
    before any YAML is parsed (it refuses anything after the dashes but a comment)."""
    offset = 0
    separators: set[int] = set()
    for line in text.split("\n"):
        if line.startswith(_SEPARATOR):
            rest = line[len(_SEPARATOR) :].strip()
            if rest and not rest.startswith("#"):
                raise CRFileError(
                    f"{name}: line {text[:offset].count(chr(10)) + 1}: kubectl refuses a '---' line with more than a "
                    f"comment after it ({rest[:30]!r}): put the document on the next line"
                )
            separators.add(offset)
        offset += len(line) + 1
    return separators


def _check_separators(text: str, name: str, separators: set[int], document_starts: set[int]) -> None:
    """YAML starts a document at `---` followed by a space or a line break, after any line break (`\\u2028` too):
    kubectl and YAML must cut the file at the same places."""
    for start in sorted(separators ^ document_starts):
        line = f"{name}: line {text[:start].count(chr(10)) + 1}"
        if start in separators:
            raise CRFileError(f"{line}: kubectl starts a new document at this '---' line and YAML does not")
        raise CRFileError(
            f"{line}: YAML starts a document here and kubectl does not (a '---' after a line break other than "
            "\\n): start each document on a line of its own"
        )


def check_events(
    text: str, name: str, loader_cls: type[yaml.SafeLoader] = CRLoader, *, kubectl_yaml: bool = True
) -> None:
    """Refuse, before composing anything, what would make composing unbounded or the result no JSON value, and
    (`kubectl_yaml`: kubectl reads the file as YAML, not as JSON) what go-yaml reads otherwise. Stops at the first
    problem, so a 20,000-deep file costs no more than 65 levels of it."""
    resolver = loader_cls("")
    frames: list[_Frame] = []  # one per open mapping or sequence
    nodes = 0
    separators = _separators(text, name) if kubectl_yaml else set()
    document_starts: set[int] = set()
    for event in _events(text, loader_cls):
        if isinstance(event, yaml.DocumentStartEvent):
            _check_document_start(event, name, document_starts)
        if isinstance(event, yaml.NodeEvent):
            nodes += 1
            _check_node(event, name, nodes)
        is_key = bool(frames) and isinstance(event, yaml.NodeEvent) and _check_key(frames[-1], event, name)
        if isinstance(event, yaml.MappingStartEvent | yaml.SequenceStartEvent):
            frames.append(_Frame(mapping=isinstance(event, yaml.MappingStartEvent)))
            if len(frames) > MAX_DEPTH:
                raise CRFileError(
                    f"{name}: {_line(event)}: nested deeper than {MAX_DEPTH} levels: no CR field is that deep"
                )
        elif isinstance(event, yaml.MappingEndEvent | yaml.SequenceEndEvent):
            frames.pop()
        elif isinstance(event, yaml.ScalarEvent):
            _check_scalar(event, text, name, resolver, is_key, kubectl_yaml)
    if kubectl_yaml:
        _check_separators(text, name, separators, document_starts)


def _check_document_start(event: yaml.DocumentStartEvent, name: str, document_starts: set[int]) -> None:
    """No directive; an explicit `---` start is noted (kubectl must cut the file at the same places)."""
    if event.version is not None or event.tags:
        raise CRFileError(
            f"{name}: {_line(event)}: YAML directives (%YAML, %TAG) are not accepted: kubectl cuts the file "
            "at '---' and reads a directive apart from its document; leave them out"
        )
    if event.explicit and event.start_mark is not None:
        document_starts.add(event.start_mark.index)


def _check_node(event: yaml.NodeEvent, name: str, nodes: int) -> None:
    """A bounded number of values, no anchor or alias, only the core tags."""
    if nodes > MAX_NODES:
        raise CRFileError(
            f"{name}: {_line(event)}: more than {MAX_NODES} values (scalars, lists and maps): a CR has a few "
            "hundred; is this the right file?"
        )
    anchor = getattr(event, "anchor", None)
    if isinstance(event, yaml.AliasEvent) or anchor is not None:
        raise CRFileError(
            f"{name}: {_line(event)}: YAML anchors and aliases (&{anchor}, *{anchor}) are not accepted: "
            "a CR has no need for them; write the value out"
        )
    tag = getattr(event, "tag", None)
    if tag is not None and tag not in _CORE_TAGS:
        raise CRFileError(
            f"{name}: {_line(event)}: the YAML tag {tag[:60]!r} is not accepted: a CR holds strings, numbers, "
            "booleans, lists and maps only"
        )


def _check_scalar(
    event: yaml.ScalarEvent, text: str, name: str, resolver: yaml.SafeLoader, is_key: bool, kubectl_yaml: bool
) -> None:
    """Text only (no lone surrogate), numbers of bounded length, and (for kubectl's YAML) one reading."""
    if _SURROGATE.search(event.value):
        raise CRFileError(
            f"{name}: {_line(event)}: a \\ud800-\\udfff escape (a lone UTF-16 surrogate) is not text; "
            "write the character itself"
        )
    if len(event.value) > MAX_NUMBER_CHARS and _looks_numeric(event, resolver):
        raise CRFileError(
            f"{name}: {_line(event)}: a number of {len(event.value)} characters is not accepted: no field "
            "takes one that large"
        )
    problem = (_reading_problem(event, resolver, is_key) or _escape_problem(event, text)) if kubectl_yaml else None
    if problem:
        raise CRFileError(f"{name}: {_line(event)}: {problem}")


def _no_constant(word: str) -> Any:
    raise ValueError(f"{word} is no JSON")


def _kubectl_json(text: str) -> tuple[bool, Any]:
    """(True, the value) where kubectl reads `text` as JSON: it starts with `{` and Go's JSON decoder takes it whole
    (else kubectl reads it as YAML); Python's decoder, without NaN and Infinity, takes the same texts."""
    if not text.lstrip().startswith("{"):
        return False, None
    try:
        return True, json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError):
        return False, None


def _difference(validate: Any, kubectl: Any, path: str) -> str | None:
    """The first place where two readings of one document differ ('' for the document itself), or None."""
    if isinstance(validate, dict) and isinstance(kubectl, dict):
        if list(validate) != list(kubectl):
            return path or "the document"
        return next(
            (d for k in kubectl if (d := _difference(validate[k], kubectl[k], f"{path}.{k}".lstrip("."))) is not None),
            None,
        )
    if isinstance(validate, list) and isinstance(kubectl, list):
        if len(validate) != len(kubectl):
            return path or "the document"
        return next(
            (
                d
                for i, (a, b) in enumerate(zip(validate, kubectl, strict=True))
                if (d := _difference(a, b, f"{path}[{i}]")) is not None
            ),
            None,
        )
    if isinstance(validate, dict | list) or isinstance(kubectl, dict | list) or not same_value(validate, kubectl):
        return path or "the document"
    return None


def parse_documents(text: str, name: str, loader_cls: type[yaml.SafeLoader] = CRLoader) -> list[Any]:
    """The non-empty YAML documents of `text`, after `check_events`."""
    is_json, kubectl = _kubectl_json(text)
    try:
        check_events(text, name, loader_cls, kubectl_yaml=not is_json)
        documents = [doc for doc in yaml.load_all(text, Loader=loader_cls) if doc is not None]
    except yaml.reader.ReaderError as exc:
        line = text[: exc.position].count("\n") + 1
        code = ord(exc.character) if isinstance(exc.character, str) else int(exc.character)
        raise CRFileError(
            f"{name}: invalid YAML at line {line}: the character #x{code:04x} is not allowed: YAML takes no "
            "control characters but tab and newline; write it as an escape in a double-quoted string"
        ) from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        context, context_mark = getattr(exc, "context", None), getattr(exc, "context_mark", None)
        if context and context_mark is not None:
            problem += f" ({context} at line {context_mark.line + 1})"
        raise CRFileError(f"{name}: invalid YAML{where}: {problem}") from exc
    if is_json and (path := _difference(documents[0] if len(documents) == 1 else documents, kubectl, "")):
        raise CRFileError(
            f"{name}: kubectl reads a file that starts with '{{' as JSON, and reads {path} otherwise than validate "
            "(YAML 1.1: 1e3 is a string, 1.0e3 too): write numbers as decimals (1000, 0.5)"
        )
    return documents


def _brief(value: Any) -> str:
    text = repr(value) if not isinstance(value, dict | list) else type(value).__name__
    return text if len(text) <= 60 else text[:57] + "..."


@dataclass(frozen=True)
class CRMeta:
    name: str
    namespace: str
    uid: str


@dataclass(frozen=True)
class LoadedCR:
    """One SGLangDeployment read from `source`: its metadata (with what is wrong with it) and its raw `.spec`."""

    source: str
    meta: CRMeta
    raw_spec: Any
    meta_errors: list[FieldError] = field(default_factory=list)
    """(field, message) of metadata that is not what the API server accepts at all (not a map, not strings)."""


def _metadata(doc: dict[Any, Any]) -> tuple[CRMeta, list[FieldError]]:
    raw = doc.get("metadata")
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        return CRMeta("", "default", PLACEHOLDER_UID), [
            FieldError("metadata", f"must be an object with at least a name (got {_brief(raw)}).")
        ]
    errors: list[FieldError] = []
    values: dict[str, str] = {}
    for key, default in (("name", ""), ("namespace", "default"), ("uid", PLACEHOLDER_UID)):
        value = raw.get(key)
        if value is None or value == "":
            values[key] = default
        elif isinstance(value, str):
            values[key] = value
        else:
            values[key] = default
            errors.append(FieldError(f"metadata.{key}", f"must be a string (got {_brief(value)})."))
    return CRMeta(values["name"], values["namespace"], values["uid"]), errors


def load_cr(path: str, stdin: BinaryIO | None = None, loader_cls: type[yaml.SafeLoader] = CRLoader) -> LoadedCR:
    """Read exactly one SGLangDeployment from `path` ('-': stdin). Raises CRFileError for anything that is not one
    (exit 2); what is wrong inside a CR is left to validation (exit 1)."""
    name = display_name(path)
    documents = parse_documents(read_text(path, stdin), name, loader_cls)
    if len(documents) != 1 or not isinstance(documents[0], dict):
        found = f"{len(documents)} documents" if len(documents) != 1 else f"a {type(documents[0]).__name__}"
        raise CRFileError(f"{name}: expected exactly one {KIND} object, found {found}")
    doc = documents[0]
    if doc.get("kind") != KIND or doc.get("apiVersion") != API_VERSION:
        raise CRFileError(
            f"{name}: expected kind {KIND} and apiVersion {API_VERSION}, "
            f"got kind {_brief(doc.get('kind'))} and apiVersion {_brief(doc.get('apiVersion'))}"
        )
    meta, meta_errors = _metadata(doc)
    return LoadedCR(source=name, meta=meta, raw_spec=doc.get("spec"), meta_errors=meta_errors)
