"""Run `sglang-operator` in-process on bytes, the way the console script runs it, and time it.

In-process because the corpus and the fuzzers run thousands of inputs: a new interpreter per input would cost half a
second each. `tests/integration/test_cli.py` covers the installed console script itself.
"""

from __future__ import annotations

import contextlib
import io
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sglang_operator import cli


@dataclass(frozen=True)
class Result:
    rc: int
    out: str
    err: str
    seconds: float

    @property
    def lines(self) -> list[str]:
        return self.err.splitlines()


class _Stdin:
    """sys.stdin as the CLI reads it (`sys.stdin.buffer`)."""

    def __init__(self, data: bytes) -> None:
        self.buffer = io.BytesIO(data)


def _stream(errors: str) -> io.TextIOWrapper:
    """An output stream that encodes as a UTF-8 terminal does, so that text no terminal can take (a lone surrogate)
    fails here as it would there."""
    return io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors=errors, write_through=True)


def _text(stream: io.TextIOWrapper) -> str:
    raw = stream.buffer
    assert isinstance(raw, io.BytesIO)
    return raw.getvalue().decode("utf-8")


def run_cli(*args: str, stdin: bytes | None = None) -> Result:
    out, err = _stream("strict"), _stream("backslashreplace")  # CPython's own defaults for stdout and stderr
    saved_stdin: Any = sys.stdin
    if stdin is not None:
        sys.stdin = _Stdin(stdin)  # type: ignore[assignment]
    start = time.perf_counter()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = cli.main(list(args))
            except SystemExit as exc:  # argparse's own exit on bad arguments, as the console script exits
                rc = exc.code if isinstance(exc.code, int) else 2
    finally:
        sys.stdin = saved_stdin
    return Result(rc, _text(out), _text(err), time.perf_counter() - start)


def run_on_bytes(command: str, data: bytes, *extra: str) -> Result:
    return run_cli(command, "-f", "-", *extra, stdin=data)


def write(tmp: Path, name: str, data: bytes) -> str:
    path = tmp / name
    path.write_bytes(data)
    return str(path)


def problems(result: Result, source: str) -> list[tuple[str, str]]:
    """(field, message) of each `error: <source>: <field>: <message>` line; a line of another shape is kept whole
    as its field, so that an assertion on fields shows it."""
    found = []
    for line in result.lines:
        rest = line.removeprefix(f"error: {source}: ")
        field, _, message = rest.partition(": ")
        found.append((field, message) if rest != line else (line, ""))
    return found


def names_field(field: str, expected: str) -> bool:
    """`field` is `expected` or inside it (`spec.template.spec.containers[0].image` is inside
    `spec.template.spec.containers`)."""
    return field == expected or field.startswith((expected + ".", expected + "["))
