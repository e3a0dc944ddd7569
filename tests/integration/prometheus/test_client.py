"""`prometheus.py` against a tiny HTTP server on 127.0.0.1 that answers Prometheus' `/api/v1/query` JSON.

The server is a test double for the HTTP layer only: the real client library builds the requests and parses the
answers. A real Prometheus is exercised by the e2e tests.
"""

import base64
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
from kubernetes import client

from sglang_operator.api.spec import AutoscalingSpec, AutoscalingWindows, BurstyTraffic, ServiceLevel, SustainedRise
from sglang_operator.autoscaling.autoscale_pass import read_metrics
from sglang_operator.prometheus.client import (
    Credentials,
    Queries,
    Target,
    connect,
    fetch_samples,
    read_samples,
)
from sglang_operator.prometheus.credentials import ca_file
from sglang_operator.settings import ENV_ALLOWED_PROMETHEUS_URLS, DefaultPrometheus, OperatorSettings, load_settings
from tests.support.router.fakehttp import Reply, serving

Answer = tuple[int, Any]  # (HTTP status, JSON body)


def vector(*values: str | float) -> Answer:
    result = [{"metric": {}, "value": [1700000000.0, str(v)]} for v in values]
    return 200, {"status": "success", "data": {"resultType": "vector", "result": result}}


EMPTY = vector()


def matrix(*series: list[tuple[float, float | str]]) -> Answer:
    result = [{"metric": {}, "values": [[t, str(v)] for t, v in points]} for points in series]
    return 200, {"status": "success", "data": {"resultType": "matrix", "result": result}}


class FakePrometheus:
    """Answers each query with the first rule whose key occurs in it; records every query."""

    def __init__(self, rules: dict[str, Answer], hang: threading.Event | None = None) -> None:
        self.rules = rules
        self.hang = hang
        self.queries: list[str] = []
        self.headers: list[dict[str, str]] = []  # each request's headers
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                url = urlparse(self.path)
                query = parse_qs(url.query).get("query", [""])[0]
                fake.queries.append(query)
                fake.headers.append(dict(self.headers.items()))
                if fake.hang is not None:
                    fake.hang.wait(10)  # released by the test's teardown
                status, body = fake.answer(url.path, query)
                data = json.dumps(body).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (the timeout test)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True)

    def answer(self, path: str, query: str) -> Answer:
        if path != "/api/v1/query":
            return 404, {"status": "error", "error": "not found"}
        for key, answer in self.rules.items():
            if key in query:
                return answer
        return EMPTY


@pytest.fixture
def prometheus() -> Iterator[Callable[..., FakePrometheus]]:
    started: list[FakePrometheus] = []

    def start(rules: dict[str, Answer], hang: threading.Event | None = None) -> FakePrometheus:
        fake = FakePrometheus(rules, hang)
        fake.thread.start()
        started.append(fake)
        return fake

    yield start
    for fake in started:
        if fake.hang is not None:
            fake.hang.set()
        fake.server.shutdown()
        fake.server.server_close()


# Keys that pick out each default query (see Queries.render).
HEALTHY = {
    "[120s])))[": matrix([(985.0, 40.0), (1000.0, 42.0)]),  # the stable rate's series (a subquery)
    "time() -": vector(4.5),
    "max_over_time((sum(sglang:num_queue_reqs": vector(7),
    "[600s:15s]": vector(130.0),  # the bursty-traffic rule's busiest rate
    "max_over_time(": vector(90.0),
    "[120s]))": vector(42.0),  # the stable rate (router first)
    "[30s]))": vector(55.0),  # the burst rate
    "[300s]))": vector(38.0),  # the bursty-traffic rule's mean rate
    "[60s]))": vector(66.0),  # the bursty-traffic rule's burst rate
    "e2e_request_latency_seconds_sum": vector(1.25),
    "num_running_reqs": vector(40),
    "num_queue_reqs": vector(3),
    "DCGM_FI_DEV_GPU_UTIL": vector(71.5),
}
TARGET = Target("team-a", "chat")
WINDOWS = AutoscalingWindows()


def test_reads_every_signal(prometheus: Callable[..., FakePrometheus]) -> None:
    fake = prometheus(HEALTHY)
    samples, error = read_samples(connect(fake.url, 2), TARGET, WINDOWS, now=1000.0)
    assert error is None
    assert samples is not None
    assert samples.collected_at == 1000.0
    assert samples.age_seconds == 4.5
    assert (samples.qps, samples.qps_burst, samples.qps_peak) == (42.0, 55.0, 90.0)
    assert samples.slot_seconds == 1.25
    assert (samples.running, samples.queued, samples.queued_peak, samples.gpu_utilization) == (40.0, 3.0, 7.0, 71.5)
    assert samples.qps_trend == ((985.0, 40.0), (1000.0, 42.0))
    assert samples.bursty_qps is None and samples.bursty_qps_peak is None  # not asked for
    assert len(fake.queries) == 10


def test_reads_the_bursty_traffic_rates_when_that_rule_is_on(prometheus: Callable[..., FakePrometheus]) -> None:
    fake = prometheus(HEALTHY)
    samples, error = read_samples(connect(fake.url, 2), TARGET, WINDOWS, bursty=BurstyTraffic())
    assert error is None and samples is not None
    assert (samples.qps, samples.qps_burst, samples.qps_peak) == (42.0, 55.0, 90.0)
    assert (samples.bursty_qps, samples.bursty_qps_burst, samples.bursty_qps_peak) == (38.0, 66.0, 130.0)
    assert len(fake.queries) == 13
    off = Queries().render(TARGET, WINDOWS, BurstyTraffic(enabled=False))
    assert not any(name.startswith("bursty_") for name in off)


def test_reads_the_stable_rate_series_when_the_sustained_rise_rule_is_on(
    prometheus: Callable[..., FakePrometheus],
) -> None:
    # The 120 s rate over 7 steps of 60 s plus two resolution steps, at the 15 s resolution (longer than a 300 s
    # quiet lookback); two series (a custom query without its outer sum) add up point by point, NaN points are
    # left out.
    first = [(1000.0, 10.0), (1015.0, 11.0), (1030.0, "NaN")]
    second = [(1000.0, 1.0), (1015.0, 2.0)]
    fake = prometheus({"[450s:15s]": matrix(first, second), **HEALTHY})
    short = AutoscalingWindows(quiet_lookback_seconds=300)
    samples, error = read_samples(connect(fake.url, 2), TARGET, short, rise=SustainedRise(steps=7))
    assert error is None and samples is not None
    assert samples.qps_trend == ((1000.0, 11.0), (1015.0, 13.0))
    assert samples.qps == 42.0
    assert fake.queries[-1].startswith("(sum(rate(smg_router_requests_total{") and "[120s]))" in fake.queries[-1]


@pytest.mark.parametrize(
    ("quiet_lookback", "rise", "span"),
    [
        (600, SustainedRise(), 600),
        (300, SustainedRise(), 300),  # the default four steps: 4 x 60 s + 30 s is under the quiet lookback
        (600, SustainedRise(steps=10), 630),
        (300, SustainedRise(enabled=False), 300),
    ],
)
def test_the_stable_rate_series_covers_the_quiet_lookback_or_the_rise(
    quiet_lookback: int, rise: SustainedRise, span: int
) -> None:
    # The quiet test (`windows.quietMaxRise`) reads the series over the quiet lookback, with or without the
    # sustained-rise rule.
    rendered = Queries().render(TARGET, AutoscalingWindows(quiet_lookback_seconds=quiet_lookback), rise=rise)
    assert rendered["qps_trend"].endswith(f"[120s])))[{span}s:15s]")


@pytest.mark.parametrize(("answer", "ratio"), [(vector(0.031), 0.031), (vector("NaN"), None), (EMPTY, None)])
def test_reads_the_share_of_requests_over_the_slo(
    prometheus: Callable[..., FakePrometheus], answer: Answer, ratio: float | None
) -> None:
    # NaN: no request admitted in the lookback (0/0); no series: no bucket at the bound (or no histogram at all).
    fake = prometheus({"queue_time_seconds_bucket": answer, **HEALTHY})
    samples, error = read_samples(connect(fake.url, 2), TARGET, WINDOWS, slo=ServiceLevel())
    assert error is None and samples is not None
    assert samples.slo_miss_ratio == ratio
    workers = 'namespace="team-a",sglang_deployment="chat",sglang_component="worker"'
    assert fake.queries[-1] == (
        f'clamp_min(1 - sum(rate(sglang:queue_time_seconds_bucket{{{workers},le="1.0"}}[600s]))'
        f" / sum(rate(sglang:queue_time_seconds_count{{{workers}}}[600s])), 0)"
    )


def test_the_slo_bound_is_written_as_the_histogram_labels_it() -> None:
    # The Prometheus Python client (SGLang's) writes bucket bounds as Python floats: le="0.5", le="2.0".
    half = Queries().render(TARGET, AutoscalingWindows(quiet_lookback_seconds=900), slo=ServiceLevel(queue_seconds=0.5))
    assert 'le="0.5"}[900s]))' in half["slo_miss_ratio"]
    assert 'le="2.0"}' in Queries().render(TARGET, WINDOWS, slo=ServiceLevel(queue_seconds=2))["slo_miss_ratio"]
    assert "slo_miss_ratio" not in Queries().render(TARGET, WINDOWS, slo=ServiceLevel(enabled=False))
    assert "slo_miss_ratio" not in Queries().render(TARGET, WINDOWS)


def test_a_malformed_series_is_an_error_not_an_exception(prometheus: Callable[..., FakePrometheus]) -> None:
    fake = prometheus({**HEALTHY, "[120s])))[": vector(3.0)})  # a vector where a matrix belongs
    samples, error = read_samples(connect(fake.url, 2), TARGET, WINDOWS, rise=SustainedRise())
    assert samples is not None and samples.qps_trend is None and samples.qps == 42.0
    assert error is not None and error == "qps_trend query failed: unexpected answer (malformed series)"


def test_default_queries_select_the_deployment_by_its_pod_labels(prometheus: Callable[..., FakePrometheus]) -> None:
    fake = prometheus(HEALTHY)
    read_samples(connect(fake.url, 2), TARGET, WINDOWS)
    workers = 'namespace="team-a",sglang_deployment="chat",sglang_component="worker"'
    routers = 'namespace="team-a",sglang_deployment="chat",sglang_component="router"'
    by_kind = dict(zip(Queries().render(TARGET, WINDOWS), fake.queries, strict=True))
    assert f"smg_router_requests_total{{{routers}}}[120s]" in by_kind["qps"]
    assert f"sglang:num_requests_total{{{workers}}}[120s]" in by_kind["qps"]  # fallback without a router
    assert "[120s:15s]" in by_kind["qps_peak"]
    assert by_kind["queued_peak"] == f"max_over_time((sum(sglang:num_queue_reqs{{{workers}}}))[600s:15s])"
    # A lookback shorter than one step still renders a valid subquery range (one step).
    short = AutoscalingWindows(quiet_lookback_seconds=5)
    assert "[15s:15s]" in Queries().render(TARGET, short)["queued_peak"]
    assert f"sglang:queue_time_seconds_sum{{{workers}}}[600s]" in by_kind["slot_seconds"]
    assert 'DCGM_FI_DEV_GPU_UTIL{namespace="team-a"}' in by_kind["gpu_utilization"]
    assert by_kind["age_seconds"] == 'time() - max(timestamp(up{namespace="team-a",sglang_deployment="chat"}))'


def test_label_names_are_configurable(prometheus: Callable[..., FakePrometheus]) -> None:
    fake = prometheus(HEALTHY)
    queries = Queries().with_changes(namespace_label="kubernetes_namespace", deployment_label="app_instance")
    read_samples(connect(fake.url, 2), TARGET, WINDOWS, queries)
    assert all('kubernetes_namespace="team-a"' in q for q in fake.queries)
    assert any('app_instance="chat"' in q for q in fake.queries)
    with pytest.raises(ValueError):
        Queries().with_changes(no_such_setting="x")


def test_label_values_are_escaped() -> None:
    rendered = Queries().render(Target('we"ird', "x\\y"), WINDOWS)
    assert 'namespace="we\\"ird"' in rendered["qps"]
    assert 'sglang_deployment="x\\\\y"' in rendered["qps"]


def test_no_series_and_nan_are_missing_values(prometheus: Callable[..., FakePrometheus]) -> None:
    # A fleet at zero: only the router reports; 0/0 slot time is NaN.
    rules = {"[120s])))[": matrix(), "time() -": vector(3), "[120s]))": vector(2.0), "e2e_request": vector("NaN")}
    fake = prometheus(rules)
    samples, error = read_samples(connect(fake.url, 2), TARGET, WINDOWS)
    assert error is None and samples is not None
    assert samples.qps == 2.0 and samples.qps_trend is None
    assert samples.slot_seconds is None
    assert samples.running is None and samples.gpu_utilization is None


@pytest.mark.parametrize(
    ("rules", "message"),
    [
        ({"time() -": (500, {"status": "error", "error": "boom"})}, "age_seconds query failed"),
        ({"[120s]))": (400, {"status": "error", "error": "bad query"})}, "qps query failed"),
        ({"[120s]))": (200, {"status": "success", "data": {"result": [{"metric": {}}]}})}, "malformed sample"),
    ],
)
def test_essential_failures_give_no_samples(
    prometheus: Callable[..., FakePrometheus], rules: dict[str, Answer], message: str
) -> None:
    fake = prometheus({**HEALTHY, **rules})
    samples, error = read_samples(connect(fake.url, 2), TARGET, WINDOWS)
    assert samples is None
    assert error is not None and message in error


def test_optional_failure_keeps_the_rest(prometheus: Callable[..., FakePrometheus]) -> None:
    fake = prometheus({**HEALTHY, "DCGM_FI_DEV_GPU_UTIL": (400, {"status": "error", "error": "parse error"})})
    samples, error = read_samples(connect(fake.url, 2), TARGET, WINDOWS)
    assert samples is not None and samples.qps == 42.0 and samples.gpu_utilization is None
    assert error is not None and "gpu_utilization query failed" in error


def test_timeout_is_reported_not_raised(prometheus: Callable[..., FakePrometheus]) -> None:
    fake = prometheus(HEALTHY, hang=threading.Event())
    samples, error = read_samples(connect(fake.url), TARGET, WINDOWS, timeout_seconds=0.2)
    assert samples is None
    assert error == "age_seconds query failed: timed out after 0.2s"
    assert len(fake.queries) == 1  # gave up at once instead of waiting out every query


def test_unreachable_prometheus_is_reported(prometheus: Callable[..., FakePrometheus]) -> None:
    fake = prometheus(HEALTHY)
    url = fake.url
    fake.server.shutdown()
    fake.server.server_close()
    samples, error = fetch_samples(url, "team-a", "chat", AutoscalingSpec(), now=5.0, timeout_seconds=1)
    assert samples is None
    assert error == f"age_seconds query failed: GET {url}/api/v1/query: connection refused"


def test_fetch_samples_wires_the_spec_windows(prometheus: Callable[..., FakePrometheus]) -> None:
    fake = prometheus({"[90s])))[": matrix([(1000.0, 42.0)]), **HEALTHY})
    spec = AutoscalingSpec.model_validate(
        {
            "windows": {"rateSeconds": 90, "peakLookbackSeconds": 300, "quietLookbackSeconds": 120},
            "burstyTraffic": {"rateSeconds": 420, "burstSeconds": 45, "peakLookbackSeconds": 900},
            "sustainedRise": {"stepSeconds": 30, "steps": 5},
            "slo": {"queueSeconds": 2},
        }
    )
    samples, error = fetch_samples(fake.url, "team-a", "chat", spec, now=5.0)
    assert error is None and samples is not None
    assert any("[90s]" in q for q in fake.queries)
    assert any("[300s:15s]" in q for q in fake.queries)
    assert any("[420s]" in q for q in fake.queries)
    assert any("[45s]" in q and "[900s:15s]" in q for q in fake.queries)
    assert any("[90s]))" in q and q.endswith(")[180s:15s]") for q in fake.queries)  # 5 x 30 s + 2 x 15 s
    assert any('le="2.0"}[120s]))' in q for q in fake.queries)  # over the quiet lookback


def test_malformed_url_is_reported() -> None:
    samples, error = fetch_samples("not a url", "team-a", "chat", AutoscalingSpec(), now=5.0, timeout_seconds=1)
    assert samples is None and error is not None


def test_credentials_go_with_every_query(prometheus: Callable[..., FakePrometheus]) -> None:
    fake = prometheus(HEALTHY)
    bearer = Credentials(headers=(("Authorization", "Bearer s3cret"), ("X-Scope-OrgID", "team-a")))
    samples, error = read_samples(connect(fake.url, 2, bearer), TARGET, WINDOWS)
    assert error is None and samples is not None and samples.qps == 42.0
    assert fake.headers and all(
        h["Authorization"] == "Bearer s3cret" and h["X-Scope-OrgID"] == "team-a" for h in fake.headers
    )
    fake.headers.clear()
    read_samples(connect(fake.url, 2, Credentials(basic=("reader", "pw"))), TARGET, WINDOWS)
    assert {h["Authorization"] for h in fake.headers} == {"Basic " + base64.b64encode(b"reader:pw").decode()}
    fake.headers.clear()
    read_samples(connect(fake.url, 2), TARGET, WINDOWS)  # no credentials: no Authorization header
    assert fake.headers and not any("Authorization" in h for h in fake.headers)


def test_credentials_never_print_a_secret() -> None:
    shown = repr(Credentials(headers=(("Authorization", "Bearer s3cret"),), basic=("reader", "pw"), verify=False))
    assert "s3cret" not in shown and "pw" not in shown and "Authorization" in shown


def test_an_unauthorised_answer_is_an_error_with_no_samples(prometheus: Callable[..., FakePrometheus]) -> None:
    fake = prometheus({"": (401, {"status": "error", "error": "unauthorized"})})
    samples, error = read_samples(connect(fake.url, 2), TARGET, WINDOWS)
    assert samples is None and error is not None and "401" in error


def test_a_ca_bundle_is_written_once_under_its_content_hash(tmp_path: Path) -> None:
    first = ca_file("-----BEGIN CERTIFICATE-----\nAAA\n", tmp_path)
    again = ca_file("-----BEGIN CERTIFICATE-----\nAAA\n", tmp_path)
    rotated = ca_file("-----BEGIN CERTIFICATE-----\nBBB\n", tmp_path)
    assert first == again != rotated
    assert first.read_text().endswith("AAA\n") and rotated.read_text().endswith("BBB\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([first.name, rotated.name])  # no partial files


def test_the_operators_token_goes_only_to_its_own_prometheus(
    prometheus: Callable[..., FakePrometheus], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = prometheus(HEALTHY)
    token = tmp_path / "token"
    token.write_text("first\n")
    settings = OperatorSettings(  # the CR below that names its own URL is allowed it
        default_prometheus=DefaultPrometheus(url=fake.url, token_file=str(token)), allowed_prometheus_urls=(fake.url,)
    )
    core = client.CoreV1Api(client.ApiClient())  # never called: no CR here names a Secret

    def authorizations(autoscaling: dict[str, Any], settings: OperatorSettings = settings) -> set[str | None]:
        fake.headers.clear()
        spec = AutoscalingSpec.model_validate(autoscaling)
        samples, error = read_metrics(core, "team-a", "chat", spec, 1000.0, settings)
        assert error is None and samples is not None
        return {h.get("Authorization") for h in fake.headers}

    assert authorizations({"enabled": True}) == {"Bearer first"}  # the operator's default URL: its token
    token.write_text("rotated\n")
    assert authorizations({"enabled": True}) == {"Bearer rotated"}  # read every pass
    assert authorizations({"enabled": True, "prometheusURL": fake.url}) == {None}  # a CR's own URL: never
    tenant = {"enabled": True, "prometheusAuth": {"headers": {"X-Scope-OrgID": "team-a"}}}
    headers_allowed = replace(settings, allow_prometheus_headers_to_default=True)  # tenant headers to the default
    assert authorizations(tenant, headers_allowed) == {None}  # a CR's prometheusAuth replaces the operator's
    assert {h["X-Scope-OrgID"] for h in fake.headers} == {"team-a"}

    token.unlink()
    samples, error = read_metrics(core, "team-a", "chat", AutoscalingSpec(enabled=True), 1000.0, settings)
    assert (
        samples is None and error == f"--prometheus-bearer-token-file: cannot read {token}: No such file or directory"
    )


class NoSecrets:
    """A CoreV1Api stand-in that fails the test if anything reads a Secret."""

    def read_namespaced_secret(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a Secret was read for a URL the operator does not allow")


@pytest.mark.parametrize(
    ("allowed", "url"),
    [
        ("", "{fake}"),  # nothing allowed: only the operator's default URL is used
        ("http://prometheus.monitoring:9090", "{fake}"),
        ("{fake}", "{fake}0"),  # a prefix allows paths under it, not a longer port
    ],
)
def test_a_cr_url_the_operator_does_not_allow_is_never_contacted(
    prometheus: Callable[..., FakePrometheus], monkeypatch: pytest.MonkeyPatch, allowed: str, url: str
) -> None:
    fake = prometheus(HEALTHY)
    settings = load_settings({ENV_ALLOWED_PROMETHEUS_URLS: allowed.format(fake=fake.url)})
    own_url = url.format(fake=fake.url)
    auth = {"bearerTokenSecretRef": {"name": "prom", "key": "token"}}
    spec = AutoscalingSpec.model_validate({"enabled": True, "prometheusURL": own_url, "prometheusAuth": auth})
    samples, error = read_metrics(NoSecrets(), "team-a", "chat", spec, 1000.0, settings)  # type: ignore[arg-type]
    assert samples is None and fake.queries == []
    assert error == (f"prometheusURL {own_url!r} is not allowed by the operator's settings (--allow-prometheus-url)")


def test_an_allowed_cr_url_is_read(prometheus: Callable[..., FakePrometheus], monkeypatch: pytest.MonkeyPatch) -> None:
    fake = prometheus(HEALTHY)
    settings = load_settings({ENV_ALLOWED_PROMETHEUS_URLS: f"http://other:9090,{fake.url}/"})
    spec = AutoscalingSpec.model_validate({"enabled": True, "prometheusURL": fake.url})
    samples, error = read_metrics(NoSecrets(), "team-a", "chat", spec, 1000.0, settings)  # type: ignore[arg-type]
    assert error is None and samples is not None and samples.qps == 42.0


@pytest.mark.parametrize("status", [200, 401, 500])
def test_an_answer_body_never_reaches_the_error(prometheus: Callable[..., FakePrometheus], status: int) -> None:
    leak = {"status": "error", "error": "SECRET-FROM-THE-SERVER", "data": "SECRET-FROM-THE-SERVER"}
    fake = prometheus({"": (status, leak)})
    samples, error = read_samples(connect(fake.url, 2), TARGET, WINDOWS)
    assert samples is None and error is not None
    assert "SECRET" not in error
    assert error.startswith("age_seconds query failed: ")
    assert (f"HTTP {status}" in error) if status != 200 else ("unexpected answer" in error)


def test_a_dripping_prometheus_is_bounded_in_total() -> None:
    answer = Reply(body=json.dumps(vector(1)[1]).encode(), drip_seconds=0.1)
    with serving({("GET", "/api/v1/query"): answer}) as fake:
        start = time.monotonic()
        samples, error = read_samples(connect(fake.url, 1.0), TARGET, WINDOWS, timeout_seconds=1.0)
        elapsed = time.monotonic() - start
    assert samples is None and error == "age_seconds query failed: timed out after 1s"
    assert elapsed < 1.0 + 1.0  # one query, ended by its total deadline (the body alone would drip for 7 s)
