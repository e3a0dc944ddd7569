"""The pure half of `bench/scale.py`: metric lines, percentiles, readiness lags, registration, ratios, output."""

from __future__ import annotations

import pytest

from bench.scale_model import (
    JSON_KEYS,
    FleetTimes,
    RunResult,
    metric_by_label,
    metric_by_labels,
    metric_sum,
    per_minute,
    percentile,
    ratios,
    ready_lags,
    registration_latencies,
    render_table,
    samples,
    top_rates,
)

METRICS = """# HELP apiserver_flowcontrol_dispatched_requests_total x
# TYPE apiserver_flowcontrol_dispatched_requests_total counter
apiserver_flowcontrol_dispatched_requests_total{flow_schema="exempt",priority_level="exempt"} 100
apiserver_flowcontrol_dispatched_requests_total{flow_schema="operator-a",priority_level="exempt"} 7
apiserver_flowcontrol_dispatched_requests_total_other{flow_schema="operator-a"} 1000
apiserver_request_total{code="200",verb="GET"} 5
apiserver_request_total{code="201",verb="POST"} 2.5e+01
sglang_operator_kubernetes_requests_total{code="200",verb="get"} 3
sglang_operator_kubernetes_requests_total{code="404",verb="get"} 1
sglang_operator_kubernetes_requests_total{code="200",verb="patch"} 2
odd{a="x\\"y",b="}"} 1
"""


def test_metric_lines_are_matched_by_exact_name_and_labels() -> None:
    name = "apiserver_flowcontrol_dispatched_requests_total"
    assert metric_sum(METRICS, name, {"flow_schema": "operator-a"}) == 7  # not the *_other series
    assert metric_sum(METRICS, name) == 107
    assert metric_sum(METRICS, "apiserver_request_total") == 30
    assert metric_sum(METRICS, "missing_total") == 0
    assert metric_by_label(METRICS, "sglang_operator_kubernetes_requests_total", "verb") == {"get": 4, "patch": 2}
    assert list(samples(METRICS, "odd")) == [({"a": 'x"y', "b": "}"}, 1.0)]


def test_per_minute_refuses_what_is_not_a_counter_window() -> None:
    assert per_minute(10, 40, 30) == 60
    with pytest.raises(ValueError):
        per_minute(40, 10, 30)  # a restart reset the counter
    with pytest.raises(ValueError):
        per_minute(1, 2, 0)


def test_percentile_interpolates_like_numpy() -> None:
    assert percentile([], 50) is None
    assert percentile([3.0], 99) == 3.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile(list(map(float, range(101))), 99) == pytest.approx(99.0)
    assert percentile([0.0, 10.0], 99) == pytest.approx(9.9)


def test_ready_lag_is_cr_ready_after_its_last_pod_and_never_negative() -> None:
    fleets = [
        FleetTimes("a", pods_ready=100.0, cr_ready=103.5),
        FleetTimes("b", pods_ready=100.0, cr_ready=99.9),  # the bench saw the CR first
        FleetTimes("c", pods_ready=None, cr_ready=50.0),  # pods never all Ready: no lag
        FleetTimes("d", pods_ready=100.0, cr_ready=None),  # CR never Ready: no lag
    ]
    assert ready_lags(fleets) == [3.5, 0.0]


def test_registration_needs_every_router_of_the_fleet() -> None:
    ready = {"http://w1": 10.0, "http://w2": 10.0, "http://w3": 10.0, "http://w4": 10.0}
    listed = {
        "http://w1": [10.5, 12.0],  # the slower router decides
        "http://w2": [9.0],  # listed before the bench saw Ready
        "http://w3": [11.0, None],  # one router does not list it
    }
    latencies, missing = registration_latencies(ready, listed)
    assert latencies == [2.0, 0.0]
    assert missing == ["http://w3", "http://w4"]


def test_ratios_json_and_table() -> None:
    run = RunResult(n=200, real=10, light=190, all_ready_s=30.0, register_p99_s=3.0, register_running_p99_s=1.0,
                    api_requests_per_min=100.0, api_requests_per_cr_per_min=0.5, rss_mib=150.0, handover_s=None,
                    notes=["a note"])  # fmt: skip
    assert ratios(run) == {"all_ready": 0.5, "register_p99": 1.5, "register_running_p99": 0.5, "api_per_cr": 0.5,
                           "rss": 0.5, "handover": None}  # fmt: skip
    doc = run.as_json()
    assert tuple(doc)[: len(JSON_KEYS)] == JSON_KEYS and doc["notes"] == ["a note"]
    table = render_table([run])
    assert "| 200 | 10/190 | 0/200 | 30.0 (-) | -/3.00 | -/1.00 | 100.0 (0.50; -) |" in table
    assert "| 200 | 0.50 | 1.50 ! | 0.50 | 0.50 | 0.50 | - |" in table  # '!' marks the missed target
    assert "- N=200: a note" in table


def test_busiest_series_between_two_scrapes() -> None:
    before = metric_by_labels(METRICS, "apiserver_request_total", ("verb", "code"))
    assert before == {("GET", "200"): 5.0, ("POST", "201"): 25.0}
    after = {("GET", "200"): 35.0, ("POST", "201"): 25.0, ("PUT", "200"): 10.0}
    assert top_rates(before, after, 30.0, 5) == [(("GET", "200"), 60.0), (("PUT", "200"), 20.0)]  # unchanged: left out
    assert top_rates(before, after, 30.0, 1) == [(("GET", "200"), 60.0)]
