"""The per-role PromQL of a prefill/decode fleet (`prometheus/roles.py`): the newest readings beside the peaks, the
handshake queues as they persisted, the role's measure over the bursty rule's windows and as a series, its SLO
reading and queue peak; and a reading of them through a Prometheus on 127.0.0.1."""

from collections.abc import Iterator
from typing import Any

import pytest

from sglang_operator.api.spec import AutoscalingSpec, BurstyTraffic, Role, ServiceLevel, SustainedRise
from sglang_operator.prometheus.client import Queries, Target, connect
from sglang_operator.prometheus.roles import RoleQueries, read_role_samples
from tests.integration.prometheus.test_client import FakePrometheus, matrix, vector

SPEC = AutoscalingSpec()
TARGET = Target("team-a", "chat")


def role(name: str) -> str:
    return f'namespace="team-a",sglang_deployment="chat",sglang_component="worker",engine_type="{name}"'


def render(name: Role, **rules: Any) -> dict[str, str]:
    promql: dict[str, str] = RoleQueries().render(TARGET, name, SPEC.windows, Queries(), **rules)
    return promql


P, D = role("prefill"), role("decode")
UNCACHED_60 = (
    f"sum(rate(sglang:prompt_tokens_total{{{P}}}[60s]))"
    f" - (sum(rate(sglang:cached_tokens_total{{{P}}}[60s])) or vector(0))"
)
RUNNING = f"sum(sglang:num_running_reqs{{{D}}})"


def test_the_newest_readings_are_read_beside_the_peaks() -> None:
    # A subquery's points sit on multiples of its step (15 s), so the peaks below end up to a step before the newest
    # scrape; the newest reading is an instant query the decision counts in the peak.
    prefill, decode = render("prefill"), render("decode")
    assert prefill["uncached_tokens_burst"] == (
        f"sum(rate(sglang:prompt_tokens_total{{{P}}}[30s])) - (sum(rate(sglang:cached_tokens_total{{{P}}}[30s]))"
        " or vector(0))"
    )
    assert (
        prefill["uncached_tokens_peak"].startswith("max_over_time((")
        and "[120s:15s])" in prefill["uncached_tokens_peak"]
    )
    assert decode["running"] == RUNNING
    assert decode["running_peak"] == f"max_over_time(({RUNNING})[120s:15s])"


def test_a_handshake_queue_is_read_as_it_persisted_over_the_burst_window() -> None:
    # Each server's least raw sample of the last burstSeconds, from servers scraped twice or more in it, summed: no
    # subquery (its points could miss a scrape), and one scrape alone gives no reading.
    prealloc = f"sglang:num_decode_prealloc_queue_reqs{{{D}}}"
    assert render("decode")["prealloc_queued_persisted"] == (
        f"sum(min_over_time({prealloc}[30s]) unless count_over_time({prealloc}[30s]) < 2)"
    )
    assert render("decode")["prealloc_queued"] == f"sum({prealloc})"  # the raw gauge, for status
    bootstrap = render("prefill")["bootstrap_queued_persisted"]
    assert bootstrap.startswith(f"sum(min_over_time(sglang:num_prefill_bootstrap_queue_reqs{{{P}}}[30s]) unless")
    assert " or sum(min_over_time(sglang:num_prefill_prealloc_queue_reqs" in bootstrap  # 0.5.9-0.5.11's name
    windows = SPEC.windows.model_copy(update={"burst_seconds": 10})
    short = RoleQueries().render(TARGET, "decode", windows, Queries())
    assert short["prealloc_queued_persisted"].count("[10s]") == 2


def test_the_role_s_measure_is_read_for_the_policy_s_rules() -> None:
    prefill = render("prefill", bursty=BurstyTraffic(), rise=SustainedRise(), slo=ServiceLevel())
    assert prefill["bursty_mean"] == UNCACHED_60.replace("[60s]", "[300s]")
    assert prefill["bursty_burst"] == UNCACHED_60
    assert prefill["bursty_peak"] == f"max_over_time(({UNCACHED_60})[600s:15s])"
    assert prefill["trend"].endswith("or vector(0)))[600s:15s]") and "[120s]" in prefill["trend"]
    assert prefill["slo_miss_ratio"] == (
        f'clamp_min(1 - sum(rate(sglang:queue_time_seconds_bucket{{{P},le="1.0"}}[600s]))'
        f" / sum(rate(sglang:queue_time_seconds_count{{{P}}}[600s])), 0)"
    )
    assert prefill["queued_peak"].startswith(f"max_over_time((sum(sglang:num_queue_reqs{{{P}}}) + (sum(min_over_time(")
    assert prefill["queued_peak"].endswith(" or vector(0)))[600s:15s])")
    decode = render("decode", bursty=BurstyTraffic(), rise=SustainedRise(steps=12), slo=ServiceLevel())
    mean = f"avg_over_time(({RUNNING})[60s:15s])"
    assert decode["bursty_mean"] == f"avg_over_time(({RUNNING})[300s:15s])"
    assert decode["bursty_peak"] == f"max_over_time(({mean})[600s:15s])"
    assert decode["trend"] == f"(avg_over_time(({RUNNING})[120s:15s]))[750s:15s]"  # 12 steps of 60 s + two of 15 s
    assert 'engine_type="decode"' in decode["slo_miss_ratio"]
    assert all('engine_type="decode"' in query for query in decode.values())


def test_a_rule_that_is_off_sends_no_query() -> None:
    off = render("decode", bursty=BurstyTraffic(enabled=False), rise=SustainedRise(enabled=False),
                 slo=ServiceLevel(enabled=False))  # fmt: skip
    assert not {"bursty_mean", "bursty_burst", "bursty_peak", "slo_miss_ratio"} & set(off)
    assert off["trend"].endswith("[600s:15s]")  # the quiet lookback still reads it
    assert not {"bursty_mean", "slo_miss_ratio"} & set(render("prefill"))


@pytest.fixture
def fake() -> Iterator[FakePrometheus]:
    server = FakePrometheus(
        {
            "[120s:15s]))[600s:15s]": matrix([(880.0, 30.0), (940.0, 35.0), (1000.0, 40.0)]),
            "max_over_time((sum(sglang:num_queue_reqs": vector(5.0),  # before the rule its query also matches
            "min_over_time(sglang:num_decode_prealloc_queue_reqs": vector(3.0),
            "max_over_time((avg_over_time": vector(120.0),
            "[300s:15s]": vector(40.0),
            "[60s:15s]": vector(90.0),
            "timestamp(": vector(2.0),
            "avg_over_time((sum(sglang:num_running_reqs": vector(40.0),
            "max_over_time((sum(sglang:num_running_reqs": vector(44.0),
            "queue_time_seconds_bucket": vector(0.02),
            "sglang:num_running_reqs": vector(50.0),
            "num_decode_prealloc_queue_reqs": vector(9.0),
        }
    )
    server.thread.start()
    yield server
    server.server.shutdown()
    server.server.server_close()


def test_a_reading_has_the_role_s_series_and_rule_readings(fake: FakePrometheus) -> None:
    reading = read_role_samples(
        connect(fake.url, 2), TARGET, "decode", SPEC.windows, now=1000.0,
        bursty=BurstyTraffic(), rise=SustainedRise(), slo=ServiceLevel(),
    )  # fmt: skip
    samples = reading.samples
    assert samples is not None, reading.error
    assert samples.trend == ((880.0, 30.0), (940.0, 35.0), (1000.0, 40.0))
    assert (samples.running, samples.running_mean, samples.running_peak) == (50.0, 40.0, 44.0)
    assert (samples.bursty_mean, samples.bursty_burst, samples.bursty_peak) == (40.0, 90.0, 120.0)
    assert (samples.prealloc_queued, samples.prealloc_queued_persisted) == (9.0, 3.0)
    assert (samples.queued_peak, samples.slo_miss_ratio) == (5.0, 0.02)
