"""What a released SGLang wheel accepts, read from the source inside the wheel without importing it.

Importing `sglang.srt.server_args` needs torch and a GPU stack; the argument definitions are plain Python, so
`ast` reads them: every `parser.add_argument(...)` in `ServerArgs.add_cli_args` (all of them up to 0.5.13, the
few left over after that) and, from 0.5.14, the annotated fields `add_cli_args_from_dataclass` turns into flags
(`name: A[T, "help"]` or `A[T, Arg(...)]`: on `ServerArgs` itself, and from 0.5.20 on the namespace classes of
`arg_groups/fields/*` listed in `_INPUT_NAMESPACES`). The field rules mirror `arg_groups/arg_utils.py`
(`--field-name` plus `aliases`, `no_cli` skipped, `Literal` -> choices, `List` -> nargs "+", `bool` ->
store_true, an action wins). Choices are evaluated from literals and module-level constants, across imports
inside the wheel; choices computed at run time (the reasoning parsers, a set built from the environment) are
recorded as `None`, meaning "any value".

Wheels are downloaded once with `pip download --no-deps` into a cache outside the repository
(`$SGLANG_OPERATOR_WHEEL_CACHE`, default `~/.cache/sglang-operator/wheels`).
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

# Every release on PyPI from the oldest to the newest supported one (post releases included: each is checked on
# its own, so a post release that differs from its base release is caught).
RELEASES: tuple[str, ...] = (
    "0.5.9",
    "0.5.10",
    "0.5.10.post1",
    "0.5.11",
    "0.5.12",
    "0.5.12.post1",
    "0.5.13",
    "0.5.13.post1",
    "0.5.14",
    "0.5.15",
    "0.5.15.post1",
    "0.5.16",
    "0.5.17",
    "0.5.18",
    "0.5.19",
    "0.5.20",
    "0.5.21",
    "0.5.22",
    "0.5.23",
)
CACHE_ENV = "SGLANG_OPERATOR_WHEEL_CACHE"
WHEEL_TARGET = (
    "--platform",
    "manylinux_2_34_x86_64",
    "--python-version",
    "311",
    "--implementation",
    "cp",
    "--abi",
    "cp311",
)
SERVER_ARGS = "sglang/srt/server_args.py"
HTTP_SERVER = "sglang/srt/entrypoints/http_server.py"
# Routes whose presence per release the operator or the simulator depends on.
TRACKED_ENDPOINTS = ("/ready", "/health", "/health_generate", "/get_load", "/server_info")


class WheelDownloadError(RuntimeError):
    """The wheel is not cached and `pip download` failed (no network, no such release)."""


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "sglang-operator" / "wheels")


def _cached(version: str, directory: Path) -> Path | None:
    for path in sorted(directory.glob(f"sglang-{version}-*.whl")):
        return path
    return None


def wheel(version: str, directory: Path | None = None) -> Path:
    """The release's wheel, downloaded into the cache on first use."""
    directory = directory or cache_dir()
    found = _cached(version, directory)
    if found:
        return found
    directory.mkdir(parents=True, exist_ok=True)
    # Later releases ship CPython 3.11 manylinux wheels only; ask for those whatever runs the tests (the Python
    # source inside is the same), so a CI on another Python or platform reads the same files.
    command = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
        *WHEEL_TARGET, "-q", f"sglang=={version}", "-d", str(directory),
    ]  # fmt: skip
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    except subprocess.TimeoutExpired as e:
        raise WheelDownloadError(f"pip download sglang=={version} took more than 600 s") from e
    found = _cached(version, directory)
    if done.returncode != 0 or found is None:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise WheelDownloadError(
            f"cannot download sglang=={version} from PyPI into {directory} (the compatibility matrix needs the "
            f"released wheels; pre-fill the cache or set {CACHE_ENV}): {' / '.join(tail)}"
        )
    return found


@dataclass(frozen=True)
class Flag:
    """One `add_argument` as argparse sees it.

    `action`: store, store_true, store_false, store_const, boolean_optional (`--x` and `--no-x`), append, count or
    error (a retired flag whose action stops the launch). `nargs`: None (one value), "?", "*", "+" or a count;
    "0" for the actions that take no value. `type`: int, float, str or the name of the release's own parser
    function (the simulator implements the ones it needs and reads any string for the rest).
    `choices`: the accepted values, or None for any.
    """

    options: tuple[str, ...]
    dest: str
    action: str
    nargs: str | None
    type: str
    choices: tuple[str, ...] | None
    required: bool
    error: str | None = None

    @property
    def takes_value(self) -> bool:
        return self.nargs != "0"


@dataclass(frozen=True)
class Release:
    version: str
    prog: str
    flags: tuple[Flag, ...]
    endpoints: frozenset[str]
    messages: frozenset[str]  # string literals (f-string pieces) of server_args.py and arg_groups/: check messages

    @cache  # noqa: B019 - releases are few and immutable
    def by_option(self) -> dict[str, Flag]:
        return {option: flag for flag in self.flags for option in self.options_of(flag)}

    @staticmethod
    def options_of(flag: Flag) -> tuple[str, ...]:
        if flag.action != "boolean_optional":
            return flag.options
        return flag.options + tuple("--no-" + o[2:] for o in flag.options if o.startswith("--"))


class Dynamic(Exception):
    """A value only known when the module runs."""


@dataclass
class _Module:
    name: str
    tree: ast.Module
    assigns: dict[str, ast.expr]
    imports: dict[str, tuple[str, str]]  # local name -> (module, name)
    classes: dict[str, ast.ClassDef]


class _Source:
    """The Python files of one wheel, parsed on demand."""

    def __init__(self, path: Path) -> None:
        self.zip = zipfile.ZipFile(path)
        self.names = set(self.zip.namelist())
        self._modules: dict[str, _Module | None] = {}

    def text(self, member: str) -> str:
        return self.zip.read(member).decode("utf-8")

    def module(self, dotted: str) -> _Module | None:
        if dotted not in self._modules:
            self._modules[dotted] = self._load(dotted)
        return self._modules[dotted]

    def _load(self, dotted: str) -> _Module | None:
        base = dotted.replace(".", "/")
        member = next((m for m in (base + ".py", base + "/__init__.py") if m in self.names), None)
        if member is None:
            return None
        tree = ast.parse(self.text(member))
        package = dotted if member.endswith("__init__.py") else dotted.rpartition(".")[0]
        assigns: dict[str, ast.expr] = {}
        imports: dict[str, tuple[str, str]] = {}
        classes: dict[str, ast.ClassDef] = {}
        for node in tree.body:
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        assigns[target.id] = node.value
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
                assigns[node.target.id] = node.value
            elif isinstance(node, ast.ImportFrom):
                source = node.module or ""
                if node.level:
                    parent = package.split(".")
                    parent = parent[: len(parent) - (node.level - 1)]
                    source = ".".join([*parent, source] if source else parent)
                for alias in node.names:
                    imports[alias.asname or alias.name] = (source, alias.name)
            elif isinstance(node, ast.ClassDef):
                classes[node.name] = node
        return _Module(dotted, tree, assigns, imports, classes)

    def lookup(self, module: _Module, name: str, depth: int = 0) -> tuple[_Module, ast.expr | ast.ClassDef]:
        if depth > 8:
            raise Dynamic(name)
        if name in module.assigns:
            return module, module.assigns[name]
        if name in module.classes:
            return module, module.classes[name]
        if name in module.imports:
            source, original = module.imports[name]
            target = self.module(source)
            if target is not None:
                return self.lookup(target, original, depth + 1)
        raise Dynamic(name)

    def evaluate(self, node: ast.expr, module: _Module, depth: int = 0) -> Any:
        """A literal, or an expression over literals and module-level constants; Dynamic otherwise."""
        if depth > 20:
            raise Dynamic("too deep")
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.List | ast.Tuple | ast.Set):
            out: list[Any] = []
            for element in node.elts:
                if isinstance(element, ast.Starred):
                    out.extend(self.evaluate(element.value, module, depth + 1))
                else:
                    out.append(self.evaluate(element, module, depth + 1))
            return out
        if isinstance(node, ast.Dict):
            return {
                self.evaluate(k, module, depth + 1): None for k in node.keys if k is not None
            }  # keys are all a choice list needs
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            return list(self.evaluate(node.left, module, depth + 1)) + list(
                self.evaluate(node.right, module, depth + 1)
            )
        if isinstance(node, ast.Name):
            if node.id in ("int", "float", "str", "bool"):
                return node.id
            owner, value = self.lookup(module, node.id)
            if isinstance(value, ast.ClassDef):
                raise Dynamic(node.id)
            return self.evaluate(value, owner, depth + 1)
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and len(node.args) == 1
            and node.func.id in ("list", "tuple", "sorted", "set", "frozenset")
        ):
            return list(self.evaluate(node.args[0], module, depth + 1))
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "keys"
            and not node.args
        ):
            return list(self.evaluate(node.func.value, module, depth + 1))
        raise Dynamic(ast.dump(node)[:80])


def _choices(source: _Source, node: ast.expr | None, module: _Module) -> tuple[str, ...] | None:
    if node is None:
        return None
    try:
        values = source.evaluate(node, module)
    except Dynamic:
        return None
    return tuple(str(v) for v in values)


def _type_name(node: ast.expr | None) -> str:
    """int, float, str, or the name of the release's own value parser (`human_readable_int`, ...)."""
    if node is None:
        return "str"
    try:
        return _dotted(node).rpartition(".")[2]
    except Dynamic:
        return "str"  # a lambda or a call: reads any string as far as the simulator can tell


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return _dotted(node.value) + "." + node.attr
    if isinstance(node, ast.Constant):
        return str(node.value)
    raise Dynamic(ast.dump(node)[:80])


# Custom actions in the releases: (action kind, nargs when the call gives none).
_CUSTOM_ACTIONS = {
    "DeprecatedAction": ("store_const", "0"),
    "DeprecatedStoreTrueAction": ("store_true", "0"),
    "DeprecatedStoreConstAction": ("store_const", "0"),
    "DeprecatedAliasStoreAction": ("store", None),
    "LoRAPathAction": ("store", None),
    "BooleanOptionalAction": ("boolean_optional", "0"),
}
_NO_VALUE = {"store_true": "store_true", "store_false": "store_false", "store_const": "store_const", "count": "count"}


def _action(node: ast.expr | None, kwargs: dict[str, ast.expr], source: _Source, module: _Module) -> tuple[str, str]:
    """(action kind, default nargs) of an `action=` value; an unknown custom action is an error to look at."""
    if node is None:
        return "store", ""
    name = _dotted(node).rpartition(".")[2]
    if name in _NO_VALUE:
        return _NO_VALUE[name], "0"
    if name in ("store", "append"):
        return name, ""
    if name in _CUSTOM_ACTIONS:
        kind, nargs = _CUSTOM_ACTIONS[name]
        if name == "DeprecatedAction" and "error_message" in kwargs:
            return "error", "0"
        return kind, nargs or ""
    raise ValueError(f"unknown argparse action {name!r}: teach tests/support/compat/wheels.py what it takes")


def _nargs(node: ast.expr | None, default: str, source: _Source, module: _Module) -> str | None:
    if node is None:
        return default or None
    value = source.evaluate(node, module)
    return None if value is None else str(value)


def _from_add_argument(call: ast.Call, source: _Source, module: _Module) -> Flag:
    options = tuple(str(source.evaluate(a, module)) for a in call.args)
    kwargs = {k.arg: k.value for k in call.keywords if k.arg}
    action, default_nargs = _action(kwargs.get("action"), kwargs, source, module)
    dest = (
        str(source.evaluate(kwargs["dest"], module))
        if "dest" in kwargs
        else next((o for o in options if o.startswith("--")), options[0]).lstrip("-").replace("-", "_")
    )
    required = bool(source.evaluate(kwargs["required"], module)) if "required" in kwargs else False
    error = None
    if action == "error":
        try:
            error = str(source.evaluate(kwargs["error_message"], module))
        except Dynamic:
            error = "this argument is no longer supported"
    return Flag(
        options=options,
        dest=dest,
        action=action,
        nargs=_nargs(kwargs.get("nargs"), default_nargs, source, module),
        type=_type_name(kwargs.get("type")),
        choices=_choices(source, kwargs.get("choices"), module),
        required=required,
        error=error,
    )


def _subscript_parts(node: ast.Subscript) -> list[ast.expr]:
    return list(node.slice.elts) if isinstance(node.slice, ast.Tuple) else [node.slice]


def _unwrap_optional(node: ast.expr) -> ast.expr:
    if isinstance(node, ast.Subscript) and _dotted(node.value).rpartition(".")[2] == "Optional":
        return node.slice
    if isinstance(node, ast.Subscript) and _dotted(node.value).rpartition(".")[2] == "Union":
        parts = [p for p in _subscript_parts(node) if not (isinstance(p, ast.Constant) and p.value is None)]
        return parts[0] if len(parts) == 1 else node
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        parts = [p for p in (node.left, node.right) if not (isinstance(p, ast.Constant) and p.value is None)]
        return parts[0] if len(parts) == 1 else node
    return node


def _head(node: ast.expr) -> str:
    try:
        return _dotted(node.value if isinstance(node, ast.Subscript) else node).rpartition(".")[2]
    except Dynamic:
        return ""


def _from_field(node: ast.AnnAssign, source: _Source, module: _Module) -> Flag | None:
    """The flag `add_cli_args_from_dataclass` makes of one annotated field, or None (no Arg, no_cli)."""
    ann = node.annotation
    if not (isinstance(ann, ast.Subscript) and _head(ann) in ("A", "Annotated")):
        return None
    assert isinstance(node.target, ast.Name)
    name = node.target.id
    raw, *meta = _subscript_parts(ann)
    arg: dict[str, ast.expr] | None = None
    for item in meta:
        if isinstance(item, ast.Constant) and isinstance(item.value, str):
            arg = {}
            break
        if isinstance(item, ast.Call) and _head(item.func) == "Arg":
            arg = {k.arg: k.value for k in item.keywords if k.arg}
            break
    if arg is None:
        return None

    def value(key: str) -> Any:
        return source.evaluate(arg[key], module) if key in arg else None

    if value("no_cli"):
        return None
    cli_name = value("cli_name") or "--" + name.replace("_", "-")
    options = (cli_name, *(value("aliases") or ()))
    has_default = node.value is not None
    if "action" in arg:
        action_kwargs = {}
        if "action_kwargs" in arg and isinstance(arg["action_kwargs"], ast.Dict):
            action_kwargs = {
                str(source.evaluate(k, module)): v
                for k, v in zip(arg["action_kwargs"].keys, arg["action_kwargs"].values, strict=True)
                if k
            }
        action, default_nargs = _action(arg["action"], action_kwargs, source, module)
        return Flag(
            options, name, action, _nargs(action_kwargs.get("nargs"), default_nargs, source, module),
            "str", _choices(source, action_kwargs.get("choices"), module), False,
        )  # fmt: skip
    inner = _unwrap_optional(raw)
    choices = _choices(source, arg.get("choices"), module)
    typed = _type_name(arg["type_parser"]) if "type_parser" in arg else None
    if isinstance(inner, ast.Subscript) and _head(inner) == "Literal":
        literal = tuple(str(source.evaluate(v, module)) for v in _subscript_parts(inner))
        first = _subscript_parts(inner)[0]
        kind = type(source.evaluate(first, module)).__name__
        return Flag(options, name, "store", None, typed or _scalar(kind), choices or literal, False)
    if isinstance(inner, ast.Subscript) and _head(inner) in ("List", "list") and "type_parser" not in arg:
        element = _subscript_parts(inner)[0]
        return Flag(options, name, "store", value("nargs") or "+", _scalar(_head(element)), choices, False)
    if _head(inner) == "bool":
        return Flag(options, name, "store_true", "0", "str", None, False)
    required = value("required") is True or (value("required") is None and not has_default)
    return Flag(options, name, "store", value("nargs"), typed or _scalar(_head(inner)), choices, required)


def _scalar(name: str) -> str:
    return name if name in ("int", "float") else "str"


def _find_function(tree: ast.AST, name: str) -> ast.FunctionDef | None:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    return None


def _add_argument_calls(node: ast.AST) -> Iterator[ast.Call]:
    for call in ast.walk(node):
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "add_argument":
            yield call


def _field_classes(source: _Source, module: _Module) -> list[tuple[_Module, ast.ClassDef]]:
    classes = [(module, module.classes["ServerArgs"])]
    if "_INPUT_NAMESPACES" in module.assigns:
        listed = module.assigns["_INPUT_NAMESPACES"]
        assert isinstance(listed, ast.List | ast.Tuple)
        for element in listed.elts:
            assert isinstance(element, ast.Name)
            owner, found = source.lookup(module, element.id)
            assert isinstance(found, ast.ClassDef), element.id
            classes.append((owner, found))
    return classes


def _prog(server_args: ast.Module) -> str:
    """`prepare_server_args`' parser name: argparse prints it in every usage error."""
    prepare = _find_function(server_args, "prepare_server_args")
    if prepare is not None:
        for call in ast.walk(prepare):
            if isinstance(call, ast.Call) and _head(call.func) == "ArgumentParser":
                for keyword in call.keywords:
                    if keyword.arg == "prog" and isinstance(keyword.value, ast.Constant):
                        return str(keyword.value.value)
    return "launch_server.py"  # argparse's default: the basename of `python -m sglang.launch_server`'s argv[0]


def _routes(source: _Source) -> frozenset[str]:
    """Paths routed in the HTTP server: `@app.get("/x")`, `@app.api_route("/x", ...)`, `app.add_api_route(...)`."""
    tree = ast.parse(source.text(HTTP_SERVER))
    found: set[str] = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("get", "post", "put", "api_route", "add_api_route", "route")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and node.args[0].value.startswith("/")
        ):
            found.add(node.args[0].value)
    return frozenset(found)


def _strings(source: _Source) -> frozenset[str]:
    """Every string literal, and every literal piece of an f-string, in the argument modules."""
    found: set[str] = set()
    for member in sorted(source.names):
        if member == SERVER_ARGS or (member.startswith("sglang/srt/arg_groups/") and member.endswith(".py")):
            for node in ast.walk(ast.parse(source.text(member))):
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    found.add(node.value)
    return frozenset(found)


def read_release(version: str, path: Path) -> Release:
    """A release's launch flags (what `sglang.launch_server` parses) and HTTP routes, from its wheel."""
    source = _Source(path)
    module = source.module("sglang.srt.server_args")
    assert module is not None, f"{path} has no {SERVER_ARGS}"
    add_cli_args = _find_function(module.classes["ServerArgs"], "add_cli_args")
    assert add_cli_args is not None, f"{path}: ServerArgs.add_cli_args not found"
    flags = [_from_add_argument(call, source, module) for call in _add_argument_calls(add_cli_args)]
    if any(_head(c.func) == "add_cli_args_from_dataclass" for c in ast.walk(add_cli_args) if isinstance(c, ast.Call)):
        fields: dict[str, Flag | None] = {}  # a class body may annotate a name twice (0.5.15): the last one counts
        for owner, cls in _field_classes(source, module):
            for node in cls.body:
                if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                    fields[node.target.id] = _from_field(node, source, owner)
        flags += [flag for flag in fields.values() if flag is not None]
    routes = _routes(source)
    return Release(
        version=version,
        prog=_prog(module.tree),
        flags=tuple(sorted(flags, key=lambda f: f.options)),
        endpoints=frozenset(e for e in TRACKED_ENDPOINTS if e in routes),
        messages=_strings(source),
    )


@cache
def release(version: str) -> Release:
    return read_release(version, wheel(version))


def version_key(version: str) -> tuple[int, ...]:
    """`0.5.15.post1` sorts after `0.5.15` and before `0.5.16`."""
    match = re.fullmatch(r"(\d+)\.(\d+)\.(\d+)(?:\.post(\d+))?", version)
    assert match, version
    return tuple(int(g or 0) for g in match.groups())
