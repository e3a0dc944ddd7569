"""Which SGLang release the simulator plays, and that release's parser and HTTP routes.

The facts come from `sglang_releases` (generated from the released wheels; `tests/compat` checks it against
them), so the simulator parses exactly like the release: the same option strings, aliases, value counts, int and
float types and choices, the same `prog` in argparse's messages, unknown flags exit 2. `allow_abbrev` stays on as
in SGLang, so `--tp 8` works where it is a unique prefix in that release.

The version comes from `--sim-version X` (before the SGLang flags) or `SGLANG_SIM_VERSION` (the local cluster's
node agent sets it from the image tag), else the default image's release. A post release plays its own row when
the table has it, else its base release.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from functools import cache
from typing import Any

from sglang_operator.api.constants import DEFAULT_SGLANG_VERSION

from .sglang_releases import ENDPOINTS, FLAGS, PROGS, RELEASES, FlagRow

VERSION_ENV = "SGLANG_SIM_VERSION"
VERSION_FLAG = "--sim-version"
DEFAULT_VERSION = DEFAULT_SGLANG_VERSION
_VERSION = re.compile(r"^v?(\d+\.\d+\.\d+)(\.post\d+)?$")


class UnknownVersion(ValueError):
    """A version outside the table: the simulator cannot know what that release accepts."""


def normalize(version: str) -> str:
    """`v0.5.21` -> `0.5.21`; `0.5.15.post1` stays when the table has it, else becomes its base release."""
    match = _VERSION.match(version.strip())
    if not match:
        raise UnknownVersion(f"{version!r} is not an SGLang version (MAJOR.MINOR.PATCH[.postN])")
    full = match.group(1) + (match.group(2) or "")
    for candidate in (full, match.group(1)):
        if candidate in RELEASES:
            return candidate
    raise UnknownVersion(
        f"SGLang {version} is not one the simulator knows ({RELEASES[0]} to {RELEASES[-1]}); "
        "regenerate sim/sglang_releases.py with `python -m tests.support.compat.generate`"
    )


def split_version(argv: Sequence[str], env: Mapping[str, str]) -> tuple[str, list[str]]:
    """(release, the SGLang flags): `--sim-version X` / `--sim-version=X` leads, else the env var, else the default."""
    rest = list(argv)
    chosen = env.get(VERSION_ENV) or DEFAULT_VERSION
    if rest and rest[0] == VERSION_FLAG and len(rest) > 1:
        chosen, rest = rest[1], rest[2:]
    elif rest and rest[0].startswith(VERSION_FLAG + "="):
        chosen, rest = rest[0].split("=", 1)[1], rest[1:]
    return normalize(chosen), rest


def in_releases(spans: str, version: str) -> bool:
    """Whether `version` is in `spans`, comma-separated `first-last` runs of the table's release order."""
    index = RELEASES.index(version)
    for span in spans.split(","):
        first, _, last = span.partition("-")
        if RELEASES.index(first) <= index <= RELEASES.index(last or first):
            return True
    return False


def flags_of(version: str) -> tuple[FlagRow, ...]:
    return tuple(row for row in FLAGS if in_releases(row[0], version))


def prog_of(version: str) -> str:
    return next(prog for prog, spans in PROGS.items() if in_releases(spans, version))


def serves(path: str, version: str) -> bool:
    """Whether the release's HTTP server routes `path` (only the routes the table tracks can be absent)."""
    spans = ENDPOINTS.get(path)
    return spans is None or in_releases(spans, version)


def human_readable_int(value: str) -> int:
    """SGLang's parser for sizes (`--context-length 32k`): SI suffixes k/M/G/T (decimals allowed), IEC Ki/Mi/Gi/Ti."""
    value = value.strip()
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)", value)
    if match:
        number, suffix = match.groups()
        if suffix.endswith("i"):
            if "." in number:
                raise argparse.ArgumentTypeError(f"Decimals are not allowed with IEC suffixes like '{suffix}'.")
            return int(number) * int(1024 ** ("KMGT".index(suffix[0]) + 1))
        return int(Decimal(number) * 1000 ** ("kMGT".index(suffix) + 1))
    try:
        return int(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"invalid human-readable integer: {value!r}") from e


_TYPES: dict[str, Callable[[str], Any]] = {
    "int": int,
    "float": float,
    "str": str,
    "human_readable_int": human_readable_int,
}
"""Value parsers the simulator implements; any other release parser reads the string as is."""


def _type(name: str) -> Callable[[str], Any]:
    return _TYPES.get(name, str)


def build_parser(rows: Sequence[FlagRow], prog: str) -> argparse.ArgumentParser:
    """An argparse parser that accepts what the release's `prepare_server_args` parser accepts.

    Values are parsed with the release's int/float type where it has one (a custom type parser reads any
    string here); retired flags whose action stops the launch fail with the release's message.
    """
    parser = argparse.ArgumentParser(prog=prog, allow_abbrev=True)
    for _spans, options, dest, action, nargs, type_name, choices, required, error in rows:
        kwargs: dict[str, object] = {"dest": dest}
        if action == "error":
            kwargs.update(action=_error_action(error or "this argument is no longer supported"), nargs=0)
        elif action == "boolean_optional":
            kwargs["action"] = argparse.BooleanOptionalAction
        elif action in ("store_true", "store_const", "count"):
            kwargs.update(action="store_const", const=True)
        elif action == "store_false":
            kwargs["action"] = "store_false"
        else:
            if action == "append":
                kwargs["action"] = "append"
            if nargs is not None:
                kwargs["nargs"] = int(nargs) if nargs.isdigit() else nargs
            kwargs["type"] = _type(type_name)
            if choices is not None:
                kwargs["choices"] = [_type(type_name)(c) for c in choices]
            if required:
                kwargs["required"] = True
        parser.add_argument(*options, **kwargs)  # type: ignore[arg-type]
    return parser


def _error_action(message: str) -> type[argparse.Action]:
    class _Retired(argparse.Action):
        def __call__(self, parser: argparse.ArgumentParser, *_: object, **__: object) -> None:
            parser.error(message)

    return _Retired


@cache
def parser_for(version: str) -> argparse.ArgumentParser:
    return build_parser(flags_of(version), prog_of(version))


def since(option: str) -> str | None:
    """The first release that accepts `option` (None when none does)."""
    for version in RELEASES:
        if any(option in row[1] for row in flags_of(version)):
            return version
    return None


def choices_of(option: str, version: str) -> tuple[str, ...] | None:
    for row in flags_of(version):
        if option in row[1]:
            return row[6]
    return None
