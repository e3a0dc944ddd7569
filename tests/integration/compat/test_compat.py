"""The compatibility matrix, checked against the released SGLang wheels and the pinned smg.

Needs the wheels (downloaded once from PyPI into the cache, `tests/support/compat/wheels.py`); without network
and with a cold cache the first test fails and says so, it is never skipped. No GPU, no torch: the wheels are
read, not imported.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
from collections.abc import Iterator

import pytest

from sglang_operator.api.releases import (
    ATTN_DP_FLAG_SINCE,
    MOE_A2A_BACKEND_SINCE,
    NEWEST_SUPPORTED,
    OLDEST_SUPPORTED,
    READY_ENDPOINT_SINCE,
    format_version,
    parse_version,
    supported,
)
from sglang_sim import args as sim_args
from sglang_sim import sglang_releases, versions
from tests.support.compat import generate, samples
from tests.support.compat.wheels import RELEASES, Release, WheelDownloadError, release, version_key, wheel


def test_every_supported_wheel_is_available() -> None:
    """The download step: a missing network with a cold cache fails here, by name (CI has PyPI access)."""
    missing = []
    for version in RELEASES:
        try:
            wheel(version)
        except WheelDownloadError as e:
            missing.append(str(e))
    assert not missing, "\n".join(missing)


@pytest.fixture(scope="module")
def releases() -> list[Release]:
    try:
        return [release(v) for v in RELEASES]
    except WheelDownloadError as e:
        pytest.fail(str(e))


def test_releases_cover_the_supported_range() -> None:
    assert list(RELEASES) == sorted(RELEASES, key=version_key)
    assert parse_version(RELEASES[0]) == OLDEST_SUPPORTED and parse_version(RELEASES[-1]) == NEWEST_SUPPORTED
    assert all(supported(v) for v in RELEASES)
    base = {format_version(parse_version(v)) for v in RELEASES}
    assert base == {f"0.5.{patch}" for patch in range(OLDEST_SUPPORTED[2], NEWEST_SUPPORTED[2] + 1)}


def _first(releases: list[Release], holds: object) -> tuple[int, int, int] | None:
    """The first release where `holds` becomes true; None if never. Also asserts it stays true afterwards."""
    flags = [bool(holds(r)) for r in releases]  # type: ignore[operator]
    if True not in flags:
        return None
    start = flags.index(True)
    assert all(flags[start:]), [r.version for r, f in zip(releases, flags, strict=True) if not f and r.version]
    return parse_version(releases[start].version)


def test_attn_dp_flag_since_matches_the_wheels(releases: list[Release]) -> None:
    assert _first(releases, lambda r: "--attn-dp-size" in r.by_option()) == ATTN_DP_FLAG_SINCE
    # The older dialect the operator renders before it exists everywhere before it.
    assert all("--enable-dp-attention" in r.by_option() for r in releases)


def test_ready_endpoint_since_matches_the_wheels(releases: list[Release]) -> None:
    assert _first(releases, lambda r: "/ready" in r.endpoints) == READY_ENDPOINT_SINCE
    assert all("/health" in r.endpoints for r in releases)


@pytest.mark.parametrize("backend", sorted(MOE_A2A_BACKEND_SINCE))
def test_moe_a2a_backend_since_matches_the_wheels(releases: list[Release], backend: str) -> None:
    first = _first(releases, lambda r: backend in (r.by_option()["--moe-a2a-backend"].choices or ()))
    assert first == MOE_A2A_BACKEND_SINCE[backend], f"{backend}: the wheels first accept it in {first}"


def test_every_backend_a_release_accepts_is_in_the_api(releases: list[Release]) -> None:
    accepted = {c for r in releases for c in r.by_option()["--moe-a2a-backend"].choices or ()}
    assert accepted == set(MOE_A2A_BACKEND_SINCE)


@functools.cache
def _parser(release_: Release) -> argparse.ArgumentParser:
    return versions.build_parser(_rows(release_), release_.prog)


def _parse(release_: Release, argv: tuple[str, ...]) -> str | None:
    """argparse's complaint when the release's own parser refuses `argv`, else None."""
    parser = _parser(release_)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            parser.parse_args(list(argv))
        except SystemExit:
            return err.getvalue().strip().splitlines()[-1]
    return None


def _rows(release_: Release) -> list[sglang_releases.FlagRow]:
    return [
        (release_.version, f.options, f.dest, f.action, f.nargs, f.type, f.choices, f.required, f.error)
        for f in release_.flags
    ]


def _sglang_commands() -> Iterator[samples.Command]:
    yield from (c for c in samples.all_commands() if c.program == "sglang")


def test_every_rendered_sglang_command_parses_on_its_release(releases: list[Release]) -> None:
    """Examples, golden files and the sample of valid specs: each worker command is parsed by the parser the
    release builds (its option strings, value counts, int/float types and choices); one failure per release shown."""
    by_version = {r.version: r for r in releases}
    failures: dict[str, str] = {}
    count = 0
    for command in _sglang_commands():
        count += 1
        problem = _parse(by_version[command.version], command.argv)
        if problem and command.version not in failures:
            failures[command.version] = f"{command.origin}: {' '.join(command.argv)}\n  -> {problem}"
    assert count > 1000
    assert not failures, "\n".join(failures.values())


def test_samples_cover_every_release_backend_and_dialect() -> None:
    seen = {(c.version, a) for c in _sglang_commands() for a in c.argv}
    for version in RELEASES:
        for backend, since in MOE_A2A_BACKEND_SINCE.items():
            if backend != "none" and parse_version(version) >= since:
                assert (version, backend) in seen, (version, backend)
        dialect = "--attn-dp-size" if parse_version(version) >= ATTN_DP_FLAG_SINCE else "--enable-dp-attention"
        assert (version, dialect) in seen


def test_the_checker_refuses_what_a_release_refuses(releases: list[Release]) -> None:
    """The check can fail: flags and values a release does not have are refused by its parser."""
    by_version = {r.version: r for r in releases}
    assert "unrecognized arguments: --attn-dp-size 2" in (
        _parse(by_version["0.5.21"], ("--model-path", "m", "--attn-dp-size", "2")) or ""
    )
    assert "invalid choice: 'deepep_v2'" in (
        _parse(by_version["0.5.18"], ("--model-path", "m", "--moe-a2a-backend", "deepep_v2")) or ""
    )
    assert "invalid int value" in (_parse(by_version["0.5.9"], ("--model-path", "m", "--tp-size", "two")) or "")


def test_every_rendered_router_command_parses_with_smg() -> None:
    """smg 1.13.0's own launcher parser (`smg launch` hands its arguments to `parse_router_args`); nothing starts."""
    from smg.launch_router import parse_router_args

    commands = [c for c in samples.all_commands() if c.program == "smg"]
    assert len({c.argv for c in commands}) >= 5
    for argv in sorted({c.argv for c in commands}):
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            try:
                parse_router_args(list(argv))
            except SystemExit:
                pytest.fail(f"smg refuses {' '.join(argv)}: {err.getvalue().strip().splitlines()[-1]}")


def test_smg_dry_parse_can_fail() -> None:
    from smg.launch_router import parse_router_args

    with contextlib.redirect_stderr(io.StringIO()), pytest.raises(SystemExit):
        parse_router_args(["--no-such-router-flag"])


def test_the_simulators_table_is_the_wheels(releases: list[Release]) -> None:
    """testing/sglang_sim/sglang_releases.py holds exactly what the wheels say (data, not text)."""
    expected = generate.table_rows(releases)
    rows = {(r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8]): r[0] for r in sglang_releases.FLAGS}
    assert len(rows) == len(sglang_releases.FLAGS)
    assert rows == {
        (f.options, f.dest, f.action, f.nargs, f.type, f.choices, f.required, f.error): generate.spans(v)
        for f, v in expected
    }
    assert sglang_releases.RELEASES == RELEASES
    for r in releases:
        assert versions.prog_of(r.version) == r.prog
        for endpoint in ("/ready", "/get_load"):
            assert versions.serves(endpoint, r.version) == (endpoint in r.endpoints), (endpoint, r.version)


def test_the_simulators_checks_are_the_releases(releases: list[Release]) -> None:
    """Each start-up check the simulator applies for a release is in that release's source with the same message;
    a check it does not apply there (pplx before 0.5.22, flashinfer before 0.5.13) is not."""
    introduced: dict[str, str] = {}
    for r in releases:
        for name, message in sim_args.messages(parse_version(r.version)).items():
            if message is not None:
                introduced.setdefault(name, message)
                assert any(message in text for text in r.messages), f"{r.version}: {name}: {message!r} not found"
    for r in releases:
        for name, message in sim_args.messages(parse_version(r.version)).items():
            if message is None:
                assert not any(introduced[name] in text for text in r.messages), f"{r.version} already checks {name}"


def test_committed_files_match_the_generator() -> None:
    for path, text in generate.outputs().items():
        assert path.read_text() == text, f"{path} is stale: run .venv/bin/python -m tests.support.compat.generate"
