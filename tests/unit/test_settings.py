"""Prometheus URLs and host paths are compared parsed, part by part (issue 29, gap 2), never as raw prefixes.

Under `--allow-prometheus-url http://prometheus.monitoring.svc:9090` the old prefix check took
`...:9090?query=<tenant's PromQL>&`, `...:9090/#` and `.../team-a/../team-b`; `settings.parse_base_url` refuses
queries, fragments, user info, `%`, backslashes and dot or empty segments, and compares scheme, host and port
(lower-case, default ports) and the path segment by segment. The same tables are sent to the chart's admission
policy on a real API server (`e2e/tests/test_admission_policy.py`), which must agree.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sglang_operator.api.validation import parse_spec
from sglang_operator.settings import BaseURL, OperatorSettings, PodPolicy, parse_base_url
from tests.support.hostile.cases_urls import ALLOWED_HOST_PATHS, ALLOWED_URLS, CASES, HOST_PATHS, URLS
from tests.support.hostile.cli_runner import names_field, problems, run_cli, write
from tests.support.hostile.model import POLICY, Hostile

SETTINGS = OperatorSettings(
    pod_policy=PodPolicy(allowed_host_paths=ALLOWED_HOST_PATHS), allowed_prometheus_urls=ALLOWED_URLS
)


@pytest.mark.parametrize(("url", "allowed", "why"), URLS, ids=[u for u, _, _ in URLS])
def test_prometheus_urls(url: str, allowed: bool, why: str) -> None:
    assert SETTINGS.prometheus_url_allowed(url) is allowed, why


@pytest.mark.parametrize(("path", "allowed", "why"), HOST_PATHS, ids=[p for p, _, _ in HOST_PATHS])
def test_host_paths(path: str, allowed: bool, why: str) -> None:
    assert SETTINGS.pod_policy.host_path_allowed(path) is allowed, why


def test_parse_base_url_normalises() -> None:
    assert parse_base_url("HTTPS://Mimir.Example.:443/a/b/") == BaseURL("https", "mimir.example", 443, ("a", "b"))
    assert parse_base_url("http://[::1]:9090") == BaseURL("http", "::1", 9090, ())
    assert [parse_base_url(u) for u in ("http://h:99999", "http://:80", "http://h/a b", "http://h/é")] == [None] * 4


def test_an_allowed_prefix_that_is_no_plain_url_allows_nothing() -> None:
    settings = OperatorSettings(allowed_prometheus_urls=("http://prom:9090/?x=", "http://prom:9090/a/../b"))
    assert not settings.prometheus_url_allowed("http://prom:9090/?x=1")
    assert not settings.prometheus_url_allowed("http://prom:9090/b")


def _args() -> list[str]:
    return [
        *(arg for url in ALLOWED_URLS for arg in ("--allow-prometheus-url", url)),
        *(arg for path in ALLOWED_HOST_PATHS for arg in ("--allow-host-path", path)),
    ]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_validate_refuses_under_the_allowed_prefixes(case: Hostile, tmp_path: Path) -> None:
    """Each case, with the admin's allowed lists given: refused naming the field (the schema's rule for a query,
    fragment, user info or backslash; the settings for the rest, which the schema admits)."""
    path = write(tmp_path, f"{case.id}.yaml", case.text.encode())
    result = run_cli("validate", "-f", path, *_args())
    found = problems(result, path)
    assert result.rc == 1, f"accepted: {case.why}"
    assert any(names_field(field, case.field) and case.fragment in message for field, message in found), found
    if case.refused_by == POLICY:
        assert parse_spec(case.doc["spec"], strict=True)[1] == []
