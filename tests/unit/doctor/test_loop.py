"""When the doctor's daemon runs, and how often (read from the raw spec kopf hands over; nothing in it may crash it)."""

from typing import Any

import pytest

from sglang_operator.doctor.loop import _enabled, interval_seconds

FINDING = {"type": "SlowStart", "pod": "p", "evidence": "e", "action": "a", "since": "t"}


@pytest.mark.parametrize(
    ("spec", "status", "runs"),
    [
        ({}, {}, True),  # on by default
        ({"diagnostics": {"enabled": False}}, {}, False),
        ({"diagnostics": {"enabled": False}}, {"diagnostics": {"findings": [FINDING]}}, True),  # to clear them
        ({"diagnostics": {"enabled": False}}, {"diagnostics": {"findings": [], "tracking": []}}, False),
        ({"diagnostics": "garbage"}, None, True),
    ],
)
def test_the_loop_runs_while_enabled_or_while_findings_remain_to_clear(
    spec: dict[str, Any], status: Any, runs: bool
) -> None:
    """The supervisor's condition for the doctor's loop, read from the CR as the watch shows it."""
    assert _enabled({"spec": spec, "status": status}) is runs
    assert _enabled({"spec": spec}) is (runs and status != {"diagnostics": {"findings": [FINDING]}})


@pytest.mark.parametrize(
    ("value", "seconds"), [(None, 30.0), (10, 10.0), (1, 5.0), (10**9, 3600.0), (True, 30.0), ("7", 30.0)]
)
def test_the_interval_is_clamped_and_defaulted(value: Any, seconds: float) -> None:
    assert interval_seconds({"diagnostics": {"intervalSeconds": value}}) == seconds
