"""`sglang-operator doctor`'s output: a table of findings (or one line saying there are none) and `-o json`."""

import json

from sglang_operator.cli import build_parser
from sglang_operator.doctor.report import render

REPORT = {
    "namespace": "team-a",
    "name": "chat",
    "windowSeconds": 600,
    "findings": [
        {"type": "SlowReplica", "replica": "1", "pod": "chat-abc-1-0", "node": "node-2",
         "evidence": "inter-token latency 41 ms vs 10 ms", "action": "check the GPU of node node-2"},
        {"type": "SlowScaleUp", "replica": "", "pod": "", "node": "",
         "evidence": "scale-up 1 -> 2 took 300s", "action": "keep warm replicas"},
    ],
    "unknown": {"CacheHitSpread": "cache_hit_rate: HTTP 500"},
    "reported": [],
}  # fmt: skip


def test_the_table_aligns_columns_and_names_unknown_signals() -> None:
    assert render(REPORT, "table").splitlines() == [
        "TYPE          REPLICA   POD            NODE     EVIDENCE                             ACTION",
        "SlowReplica   1         chat-abc-1-0   node-2   inter-token latency 41 ms vs 10 ms   "
        "check the GPU of node node-2",
        "SlowScaleUp   -         -              -        scale-up 1 -> 2 took 300s            keep warm replicas",
        "unknown: CacheHitSpread: cache_hit_rate: HTTP 500",
    ]


def test_a_healthy_fleet_prints_one_line_and_json_round_trips() -> None:
    healthy = {**REPORT, "findings": [], "unknown": {}}
    assert render(healthy, "table") == "No findings for sgld team-a/chat over 600s.\n"
    assert json.loads(render(REPORT, "json")) == REPORT


def test_the_subcommand_takes_a_name_a_namespace_and_an_output_format() -> None:
    args = build_parser().parse_args(["doctor", "chat", "-n", "team-a", "-o", "json"])
    assert (args.name, args.namespace, args.output, args.prometheus_url) == ("chat", "team-a", "json", None)
