"""Reading an SGLangDeployment from a file a tenant wrote, with every cost bounded.

`sglang-operator validate` and `render` take any file: one that is not UTF-8, a YAML "billion laughs" made of
aliases, 20,000 nested brackets or a number of 10,000 digits must each give one clear line, in well under a second
and bounded memory, never a traceback. So the file is read up to `MAX_BYTES`, decoded strictly, and its YAML event
stream is checked before anything is composed: no anchors or aliases (a CR has no use for them, and they are how a
small file expands into gigabytes), no tags beyond YAML's core types (a CR holds JSON values), at most `MAX_DEPTH`
levels of nesting and `MAX_NODES` values, no duplicate keys, no lone surrogate escapes, no numbers of more than
`MAX_NUMBER_CHARS` characters. Only then is the document built, by a loader that reads timestamps as the strings
the API server sees.
"""

import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import yaml

from .api.constants import API_VERSION, KIND
from .api.rule import FieldError

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
_SURROGATE = re.compile("[\ud800-\udfff]")

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


def _check_key(frame: _Frame, event: yaml.Event, name: str) -> None:
    """In a mapping, nodes alternate key, value: a key must be a scalar, and appear once (the API server refuses a
    duplicate field; YAML loaders silently keep the last)."""
    if not frame.mapping:
        return
    is_key, frame.expect_key = frame.expect_key, not frame.expect_key
    if not is_key:
        return
    if not isinstance(event, yaml.ScalarEvent):
        raise CRFileError(f"{name}: {_line(event)}: a map key must be a plain string, not a list or a map")
    if event.value in frame.keys:
        raise CRFileError(f"{name}: {_line(event)}: the key {event.value[:60]!r} appears twice in one map; keep one")
    frame.keys.add(event.value)


def check_events(text: str, name: str, loader_cls: type[yaml.SafeLoader] = CRLoader) -> None:
    """Refuse, before composing anything, what would make composing unbounded or the result no JSON value. Stops at
    the first problem, so a 20,000-deep file costs no more than 65 levels of it."""
    resolver = loader_cls("")
    frames: list[_Frame] = []  # one per open mapping or sequence
    nodes = 0
    for event in _events(text, loader_cls):
        if isinstance(event, yaml.NodeEvent):
            nodes += 1
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
        if frames and isinstance(event, yaml.NodeEvent):
            _check_key(frames[-1], event, name)
        if isinstance(event, yaml.MappingStartEvent | yaml.SequenceStartEvent):
            frames.append(_Frame(mapping=isinstance(event, yaml.MappingStartEvent)))
            if len(frames) > MAX_DEPTH:
                raise CRFileError(
                    f"{name}: {_line(event)}: nested deeper than {MAX_DEPTH} levels: no CR field is that deep"
                )
        elif isinstance(event, yaml.MappingEndEvent | yaml.SequenceEndEvent):
            frames.pop()
        elif isinstance(event, yaml.ScalarEvent):
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


def parse_documents(text: str, name: str, loader_cls: type[yaml.SafeLoader] = CRLoader) -> list[Any]:
    """The non-empty YAML documents of `text`, after `check_events`."""
    try:
        check_events(text, name, loader_cls)
        return [doc for doc in yaml.load_all(text, Loader=loader_cls) if doc is not None]
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
