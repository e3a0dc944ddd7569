"""Every example validates as written, with the operator settings its first lines name, and needs each of them.

An example that only an admin's setting admits says so in a header line, `# Operator settings: --flag value ...`,
as `sglang-operator validate` and `run` spell them, so a newcomer who copies it knows what to ask for.
"""

import shlex
from pathlib import Path

import pytest

from sglang_operator import cli
from tests.conftest import EXAMPLES

HEADER = "# Operator settings:"


def settings_of(example: Path) -> list[str]:
    """The flags the example's header names (none where it has no such line before its first YAML line)."""
    for line in example.read_text().splitlines():
        if not line.startswith("#"):
            return []
        if line.startswith(HEADER):
            return shlex.split(line.removeprefix(HEADER))
    return []


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_each_example_validates_with_the_settings_its_header_names(
    example: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["validate", "-f", str(example), *settings_of(example)]) == 0, capsys.readouterr().err


@pytest.mark.parametrize("example", [p for p in EXAMPLES if settings_of(p)], ids=lambda p: p.name)
def test_each_named_setting_is_needed(example: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Without its settings the example is refused, naming the setting: the header is no decoration."""
    flags = settings_of(example)
    assert cli.main(["validate", "-f", str(example)]) == 1
    refused = capsys.readouterr().err
    assert all(flag in refused for flag in flags if flag.startswith("--")), refused


def test_three_examples_name_their_settings() -> None:
    """Those that `validate` refused with the default settings before they said which they need (issue 37)."""
    named = {p.name for p in EXAMPLES if settings_of(p)}
    assert {"autoscaling.yaml", "deepseek-v3-dpa.yaml", "deepseek-v3-pd.yaml"} <= named
