"""Issue 29, gap 11: a CR's `prometheusAuth.headers` are a short allowlist of tenant headers, and none of them goes
to the operator's own default Prometheus unless the admin allows it. Checked against a real server on 127.0.0.1
playing Prometheus, which records every request and header it receives."""

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any, ClassVar

import pytest
from kubernetes import client

from sglang_operator.api.spec import AutoscalingSpec, SGLangDeploymentSpec
from sglang_operator.api.validation import parse_spec
from sglang_operator.autoscaling import autoscale_pass as loop
from sglang_operator.autoscaling.autoscale_pass import autoscale_once, read_metrics
from sglang_operator.doctor.doctor_pass import evaluate
from sglang_operator.settings import (
    ENV_ALLOW_PROMETHEUS_HEADERS_TO_DEFAULT,
    ENV_PROMETHEUS_URL,
    DefaultPrometheus,
    OperatorSettings,
    load_settings,
)
from tests.integration.prometheus.test_client import HEALTHY, FakePrometheus, NoSecrets


@pytest.fixture
def fake() -> Iterator[FakePrometheus]:
    """A Prometheus on 127.0.0.1 answering every default query, recording each request's headers."""
    server = FakePrometheus(HEALTHY)
    server.thread.start()
    yield server
    server.server.shutdown()
    server.server.server_close()


REFUSED = (
    "spec.autoscaling.prometheusAuth.headers: not sent to the operator's default Prometheus, whose settings do not "
    "allow tenant headers (--allow-prometheus-headers-to-default); remove the headers, or set "
    "spec.autoscaling.prometheusURL to a Prometheus the operator allows"
)
TENANT_HEADERS = [{"X-Scope-OrgID": "team-b"}, {"x-scope-orgid": "team-b"}, {"THANOS-TENANT": "team-b"}]


@pytest.mark.parametrize("headers", TENANT_HEADERS)
def test_tenant_headers_never_reach_the_operators_default_prometheus(
    fake: FakePrometheus, monkeypatch: pytest.MonkeyPatch, headers: dict[str, str]
) -> None:
    settings = OperatorSettings(default_prometheus=DefaultPrometheus(url=fake.url))
    auth = {"headers": headers, "bearerTokenSecretRef": {"name": "prom"}}
    spec = AutoscalingSpec.model_validate({"enabled": True, "prometheusAuth": auth})
    samples, error = read_metrics(NoSecrets(), "team-a", "chat", spec, 1000.0, settings)  # type: ignore[arg-type]
    assert (samples, error) == (None, REFUSED)
    assert fake.queries == []  # no request at all, and no Secret read (NoSecrets)


@pytest.mark.parametrize("headers", TENANT_HEADERS)
def test_the_admin_may_allow_tenant_headers_to_the_default_prometheus(
    fake: FakePrometheus, monkeypatch: pytest.MonkeyPatch, headers: dict[str, str]
) -> None:
    settings = load_settings({ENV_PROMETHEUS_URL: fake.url, ENV_ALLOW_PROMETHEUS_HEADERS_TO_DEFAULT: "true"})
    spec = AutoscalingSpec.model_validate({"enabled": True, "prometheusAuth": {"headers": headers}})
    samples, error = read_metrics(NoSecrets(), "team-a", "chat", spec, 1000.0, settings)  # type: ignore[arg-type]
    assert error is None and samples is not None
    (name, value), *_ = headers.items()
    assert fake.headers and all({k.lower(): v for k, v in h.items()}[name.lower()] == value for h in fake.headers)


def test_a_crs_own_allowed_prometheus_gets_its_tenant_header(
    fake: FakePrometheus, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = OperatorSettings(allowed_prometheus_urls=(fake.url,))
    spec = AutoscalingSpec.model_validate(
        {"enabled": True, "prometheusURL": fake.url, "prometheusAuth": {"headers": {"X-Scope-OrgID": "team-a"}}}
    )
    samples, error = read_metrics(NoSecrets(), "team-a", "chat", spec, 1000.0, settings)  # type: ignore[arg-type]
    assert error is None and samples is not None
    assert {h["X-Scope-OrgID"] for h in fake.headers} == {"team-a"}


class RecordingWriter:
    """Stands in for `runtime.writer.Writer`: records the status the pass writes."""

    written: ClassVar[list[dict[str, Any]]] = []

    def __init__(self, api: Any) -> None:
        pass

    def patch_status(self, namespace: str, name: str, status: dict[str, Any], resource_version: str) -> bool:
        RecordingWriter.written.append(status)
        return True

    def event(self, *args: Any, **kwargs: Any) -> None:
        pass


def body(autoscaling: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "team-a", "name": "chat", "uid": "u1", "generation": 3, "resourceVersion": "7"},
        "spec": {"model": {"path": "m"}, "autoscaling": {"enabled": True, **autoscaling}},
        "status": {"readyReplicas": 1, "replicas": 1},
    }


def test_the_autoscaler_reports_the_refusal_in_metrics_available(
    fake: FakePrometheus, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = OperatorSettings(default_prometheus=DefaultPrometheus(url=fake.url))
    monkeypatch.setattr(loop, "Writer", RecordingWriter)
    RecordingWriter.written.clear()
    cr = body({"prometheusAuth": {"headers": {"X-Scope-OrgID": "team-b"}}})
    now = datetime(2026, 1, 1, tzinfo=UTC)
    autoscale_once(client.ApiClient(), settings, "team-a", "chat", now=now, body=cr, pods=[])
    (status,) = RecordingWriter.written
    (available,) = [c for c in status["conditions"] if c["type"] == "MetricsAvailable"]
    assert (available["status"], available["message"]) == ("False", REFUSED)
    assert fake.queries == []


def test_the_doctor_sends_no_tenant_header_to_the_default_prometheus(
    fake: FakePrometheus, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = OperatorSettings(default_prometheus=DefaultPrometheus(url=fake.url))
    cr = body({"prometheusAuth": {"headers": {"X-Scope-OrgID": "team-b"}}})
    spec = SGLangDeploymentSpec.model_validate(cr["spec"])
    evaluation = evaluate(client.ApiClient(), cr, spec, [], settings, now=1000.0, read_secret=lambda ns, n: None)
    assert evaluation.metrics is None and fake.queries == []


@pytest.mark.parametrize(
    "name",
    ["Host", "Content-Length", "Transfer-Encoding", "Cookie", "X-Forwarded-For", "Authorization", "X-Scope-OrgIDx"],
)
def test_a_header_outside_the_allowlist_is_refused_and_never_sent(
    fake: FakePrometheus, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """Even a CR the API server let through (an older CRD) is refused by the operator's own parse: no request."""
    settings = OperatorSettings(allowed_prometheus_urls=(fake.url,))
    monkeypatch.setattr(loop, "Writer", RecordingWriter)
    cr = body({"prometheusURL": fake.url, "prometheusAuth": {"headers": {name: "1"}}})
    spec, errors = parse_spec(cr["spec"])
    assert (
        spec is None
        and [e.field for e in errors]
        and all(e.field == "spec.autoscaling.prometheusAuth.headers" for e in errors)
    )
    result = autoscale_once(client.ApiClient(), settings, "team-a", "chat", body=cr, pods=[])
    assert result.decision is None and fake.queries == []
