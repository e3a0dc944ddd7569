"""`bench/routing.py`: trace prompts as simulator prompts, the simulator's cache against a direct count, a smoke run.

The cache checks replay the shipped Mooncake trace's `hash_ids` three ways: through the simulator's
`PrefixCache` (with the keys the simulator computes from the benchmark's prompt text), through the simulator's
engine as one replica, and through `routing_model.direct_lru_hit_rate`, a separate LRU count over id tuples.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench.routing_model import (
    BLOCK_CHARS,
    SCALE,
    Outcome,
    TraceRequest,
    block_text,
    coefficient_of_variation,
    direct_lru_hit_rate,
    hit_tokens,
    load_trace,
    matched_blocks,
    percentile,
    prompt_text,
    render_table,
    router_counters,
    sample_families,
    sim_output_tokens,
    summarize,
)
from sglang_sim.engine import Engine, EngineConfig, Job
from sglang_sim.prefix_cache import PrefixCache
from sglang_sim.tokens import BLOCK_TOKENS, CHARS_PER_TOKEN, prompt_from_text

REPO = Path(__file__).resolve().parents[3]
MOONCAKE = REPO.parent / "shared" / "traces" / "mooncake_synthetic_trace.jsonl"
AZURE = REPO.parent / "shared" / "traces" / "AzureLLMInferenceTrace_code.csv"
SMG = Path(sys.executable).parent / "smg"
needs_trace = pytest.mark.skipif(not MOONCAKE.exists(), reason="the shipped Mooncake trace is not here")


@pytest.fixture(scope="module")
def mooncake() -> list[TraceRequest]:
    return load_trace(MOONCAKE)


def test_one_trace_block_is_one_simulator_block() -> None:
    assert BLOCK_CHARS == BLOCK_TOKENS * CHARS_PER_TOKEN and SCALE == 512 // BLOCK_TOKENS
    texts = [block_text(b) for b in range(2000)]
    assert all(len(t) == BLOCK_CHARS for t in texts)
    assert len({t[:8] for t in texts}) == len(texts)  # different ids differ within their first characters
    assert block_text(7) == block_text(7)  # deterministic (no per-process hash seed)


def test_equal_leading_blocks_give_equal_text_and_equal_cache_keys() -> None:
    a, b = (1, 2, 3, 4, 5), (1, 2, 3, 9, 5)
    ta, tb = prompt_text(a), prompt_text(b)
    shared = next(i for i, (x, y) in enumerate(zip(ta, tb, strict=True)) if x != y)
    assert shared == 3 * BLOCK_CHARS  # the router's tree sees exactly the 3 shared blocks
    pa, pb = prompt_from_text(ta), prompt_from_text(tb)
    assert pa.num_tokens == len(a) * BLOCK_TOKENS and len(pa.block_keys) == len(a)
    assert pa.block_keys[:3] == pb.block_keys[:3] and pa.block_keys[3] != pb.block_keys[3]
    assert pa.block_keys[4] != pb.block_keys[4]  # a block's key includes everything before it


def test_cached_tokens_map_back_to_blocks_and_trace_tokens() -> None:
    r = TraceRequest(0.0, 1300, 10, (1, 2, 3))  # 2 full blocks and 276 tokens
    assert matched_blocks(0) == 0 and matched_blocks(32) == 2
    assert matched_blocks(3 * BLOCK_TOKENS - 1) == 3  # the simulator never reports the last token cached
    assert hit_tokens(r, 2) == 1024 and hit_tokens(r, 3) == 1299
    assert sim_output_tokens(1) == 1 and sim_output_tokens(64) == 2 and sim_output_tokens(65) == 3


@needs_trace
def test_family_sampling_keeps_every_kept_request_s_reuse(mooncake: list[TraceRequest]) -> None:
    def hits(trace: list[TraceRequest]) -> dict[int, int]:
        seen: set[tuple[int, ...]] = set()
        out = {}
        for r in trace:
            n = 0
            while n < len(r.blocks) and r.blocks[: n + 1] in seen:
                n += 1
            out[id(r)] = n
            seen.update(r.blocks[: i + 1] for i in range(len(r.blocks)))
        return out

    full = hits(mooncake)
    kept = sample_families(mooncake, 4, 1)
    assert 0.2 < len(kept) / len(mooncake) < 0.3
    assert hits(kept) == {k: full[k] for k in hits(kept)}
    assert sample_families(mooncake, 1) == mooncake


@needs_trace
def test_unbounded_hit_rate_is_the_documented_ceiling(mooncake: list[TraceRequest]) -> None:
    # traces/README.md: with unbounded caches the prefix-hit ceiling is about 65 % of tokens
    assert direct_lru_hit_rate(mooncake, 10**9) == pytest.approx(0.65, abs=0.01)
    assert direct_lru_hit_rate(mooncake, 0) == 0.0


def _prefix_cache_hit_rate(trace: list[TraceRequest], capacity_blocks: int) -> float:
    cache = PrefixCache(capacity_blocks * BLOCK_TOKENS, BLOCK_TOKENS)
    hit = total = 0
    for r in trace:
        keys = prompt_from_text(prompt_text(r.blocks)).block_keys
        hit += hit_tokens(r, cache.match(keys))
        cache.insert(keys)
        total += r.input_tokens
    return hit / total


@needs_trace
@pytest.mark.parametrize("capacity_blocks", [250, 1000, 4000])
def test_simulator_prefix_cache_matches_the_direct_count(mooncake: list[TraceRequest], capacity_blocks: int) -> None:
    trace = sample_families(mooncake, 2)
    sim = _prefix_cache_hit_rate(trace, capacity_blocks)
    assert sim == direct_lru_hit_rate(trace, capacity_blocks)  # the same count, exactly
    assert 0.02 < sim < 0.66


@needs_trace
def test_one_simulated_replica_reports_the_direct_count(mooncake: list[TraceRequest]) -> None:
    """The engine one replica runs: requests one after another, hit rate from each request's cached_tokens."""
    trace = sample_families(mooncake, 4)
    capacity_blocks = 1000
    engine = Engine(
        EngineConfig(num_ranks=1, max_running_per_rank=1, max_total_tokens_per_rank=capacity_blocks * BLOCK_TOKENS,
                     prefill_tokens_per_s=1e6, decode_tokens_per_s=1e6),
        start=0.0,
    )  # fmt: skip
    outcomes = []
    for i, r in enumerate(trace):
        engine.submit(Job(f"r{i}", prompt_from_text(prompt_text(r.blocks)), sim_output_tokens(r.output_tokens)), i)
        (sched,) = engine.admit(float(i))
        engine.finish(sched.rid, i + 0.5)
        outcomes.append(Outcome(i, True, 0.0, sched.cached_tokens))
    result = summarize(trace, outcomes, [len(trace)], time_scale=1.0)
    assert result.hit_rate == pytest.approx(direct_lru_hit_rate(trace, capacity_blocks), abs=1e-12)
    # a bounded cache: well under the 4x cache, which is at most the unbounded count
    assert result.hit_rate < direct_lru_hit_rate(trace, 4 * capacity_blocks) <= direct_lru_hit_rate(trace, 10**9)


def test_azure_csv_gets_fresh_blocks(tmp_path: Path) -> None:
    path = tmp_path / "azure.csv"
    path.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:17:03.9799600,1000,10\n2023-11-16 18:17:04.4799600,512,5\n"
    )
    a, b = load_trace(path)
    assert b.t == pytest.approx(0.5) and a.blocks == (0, 1) and b.blocks == (2,)
    assert direct_lru_hit_rate([a, b], 100) == 0.0


def test_summary_table_and_counters() -> None:
    trace = [TraceRequest(0.0, 1024, 10, (1, 2)), TraceRequest(1.0, 1024, 10, (1, 2)), TraceRequest(2.0, 512, 1, (3,))]
    outcomes = [Outcome(0, True, 0.1, 0), Outcome(1, True, 0.05, 31), Outcome(2, False, None, 0)]
    r = summarize(trace, outcomes, [1, 1], time_scale=0.5)
    assert r.hit_rate == pytest.approx(1023 / 2048)
    assert r.ttft_p50_s == pytest.approx(0.15) and (r.failed, r.load_cv) == (1, 0.0)
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5 and percentile([], 0.5) is None
    assert coefficient_of_variation([2, 0]) == 1.0 and coefficient_of_variation([0, 0]) == 0.0
    table = render_table({"round_robin": r, "cache_aware": r}, ceiling=r.hit_rate * 2)
    assert "| cache_aware | 0.500 | +0 % | 50 % |" in table
    text = (
        'smg_cache_aware_policy_branch_total{branch="tree_match",model="m"} 3\n'
        'smg_cache_aware_policy_branch_total{branch="tree_match",model="n"} 2\n'
        'smg_cache_aware_policy_branch_total{branch="spill",model="m"} 1\nother 5\n'
    )
    assert router_counters(text) == [("spill", 1.0), ("tree_match", 5.0)]


@needs_trace
@pytest.mark.skipif(not SMG.exists() and shutil.which("smg") is None, reason="smg is not installed")
def test_routing_bench_smoke() -> None:
    """A short run on the real router: two policies and the one-replica ceiling, in the documented JSON shape."""
    out = subprocess.run(
        [sys.executable, str(REPO / "bench" / "routing.py"), "--json", "--policies", "round_robin,cache_aware",
         "--limit", "60", "--rate-scale", "12", "--time-scale", "0.1", "--max-seconds", "30"],
        capture_output=True, text=True, timeout=150, check=True,
    )  # fmt: skip
    result = json.loads(out.stdout)
    assert set(result["policies"]) == {"round_robin", "cache_aware"}
    for r in result["policies"].values():
        assert set(r) >= {"hit_rate", "ttft_p50_s", "ttft_p99_s", "load_cv"}
        assert r["failed"] == 0 and sum(r["per_replica"]) == 60 and r["ttft_p50_s"] > 0
    assert result["policies"]["round_robin"]["load_cv"] == 0.0  # 60 requests over 4 replicas, strictly in turn
    ceiling = result["ceiling"]
    assert ceiling["hit_rate"] == pytest.approx(ceiling["direct_count"], abs=0.02)  # same-time arrivals may swap
    assert all(r["hit_rate"] <= ceiling["hit_rate"] + 1e-9 for r in result["policies"].values())


def test_the_operator_renders_the_benchmark_s_choice() -> None:
    """The router defaults the operator renders are the benchmark's best header-less row (docs/routing.md):
    cache_aware with loads polled every second and smg's own thresholds; `router.args` still override them."""
    from smg.launch_router import parse_router_args

    from bench.routing_model import POLICIES
    from sglang_operator.api.spec import SGLangDeploymentSpec
    from sglang_operator.render.router import router_command

    def parsed(router: dict[str, object]) -> Any:
        command = router_command(SGLangDeploymentSpec.model_validate({"model": {"path": "m"}, "router": router}))
        assert command[:2] == ["smg", "launch"]
        return parse_router_args(command[2:])

    rendered = parsed({})
    best = parse_router_args(POLICIES["cache_aware_lm1"].split())
    smg = parse_router_args([])
    for field in ("policy", "load_monitor_interval", "cache_threshold", "balance_abs_threshold",
                  "balance_rel_threshold", "eviction_interval_secs", "max_tree_size"):  # fmt: skip
        assert getattr(rendered, field) == getattr(best, field), field
    assert (rendered.load_monitor_interval, smg.load_monitor_interval) == (1, 10)
    assert rendered.cache_threshold == smg.cache_threshold and rendered.balance_abs_threshold == 64
    overridden = parsed({"args": ["--load-monitor-interval", "5", "--cache-threshold", "0.5"]})
    assert (overridden.load_monitor_interval, overridden.cache_threshold) == (5, 0.5)
