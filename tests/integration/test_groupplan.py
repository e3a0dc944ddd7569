"""`sglang-operator plan --group ...`: per-group and total capacity of a mix of shapes, and the split of a load."""

import json
import subprocess

import pytest

from sglang_operator.groupplan import GroupArgError, parse_group, plan_groups
from tests.integration.test_cli import run


def plan(*args: str) -> subprocess.CompletedProcess[str]:
    return run("plan", *args)


def test_the_seed_mix_per_group_and_total() -> None:
    done = plan("--group", "tp=4,count=1,maxRunningRequests=16,name=a", "--group",
                "tp=2,count=2,maxRunningRequests=8,name=b", "-o", "json")  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert [(g["name"], g["replicas"], g["concurrency"], g["gpus"]) for g in result["groups"]] == [
        ("a", 1, 16, 4),
        ("b", 2, 16, 4),
    ]
    assert (result["totalConcurrency"], result["totalGPUs"]) == (32, 8)


def test_a_load_gets_the_autoscalers_split() -> None:
    groups = [parse_group("tp=4,count=1,concurrency=16,max=2", 0), parse_group("tp=2,count=2,concurrency=8,max=4", 1)]
    result = plan_groups(groups, qps=20, latency=1.0, headroom=0.2)
    assert result["neededConcurrency"] == 24 and result["covered"]
    # tp=4 and tp=2 serve 4 requests per GPU each: the tie goes to the group given first
    assert result["split"] == {"group0": 2, "group1": 0} and not result["splitShort"]
    text = plan("--group", "tp=4,count=1,concurrency=16", "--qps", "100", "--latency", "1").stdout
    assert "does not cover it" in text and "short" in text


def test_attention_dp_divides_max_running_requests_as_sglang_does() -> None:
    shape, _ = parse_group("tp=8,attentionDP=8,maxRunningRequests=256", 0)
    assert (shape.concurrency, shape.gpus) == (256, 8)
    shape, _ = parse_group("tp=2,dp=2,maxRunningRequests=16", 0)
    assert (shape.concurrency, shape.gpus) == (32, 4)


@pytest.mark.parametrize("bad", ["tq=4", "tp=0", "tp=-1", "tp=4,count=999999", "tp", "count=1e3"])
def test_bad_groups_are_named(bad: str) -> None:
    with pytest.raises(GroupArgError, match="--group"):
        parse_group(bad, 0)
    done = plan("--group", bad)
    assert done.returncode == 2 and "--group" in done.stderr and not done.stdout
