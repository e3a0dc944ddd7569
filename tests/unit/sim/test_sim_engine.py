"""The pure engine model, driven with injected time (no sleeping)."""

from __future__ import annotations

import pytest

from sglang_sim.engine import BusyTracker, Engine, EngineConfig, Job
from sglang_sim.prefix_cache import PrefixCache
from sglang_sim.tokens import BLOCK_TOKENS, prompt_from_ids, prompt_from_text


def cfg(**kw: object) -> EngineConfig:
    base: dict[str, object] = {
        "num_ranks": 1,
        "max_running_per_rank": 2,
        "max_total_tokens_per_rank": 100_000,
        "prefill_tokens_per_s": 1000.0,
        "decode_tokens_per_s": 100.0,
    }
    base.update(kw)
    return EngineConfig(**base)


def job(rid: str, tokens: int = 100, out: int = 10, seed: int = 0) -> Job:
    return Job(rid, prompt_from_ids([seed * 1_000_000 + i for i in range(tokens)]), out)


def test_concurrency_cap_and_fifo_queue() -> None:
    e = Engine(cfg(), start=0.0)
    for rid in ("a", "b", "c"):
        e.submit(job(rid), 0.0)
    assert [s.rid for s in e.admit(0.0)] == ["a", "b"]
    (load,) = e.loads(0.0)
    assert (load.num_running_reqs, load.num_waiting_reqs) == (2, 1)
    assert e.admit(0.5) == []  # still full
    e.finish("a", 1.0)
    (c,) = e.admit(1.0)
    assert c.rid == "c" and c.queue_time == pytest.approx(1.0)


def test_prefill_and_decode_timing() -> None:
    e = Engine(cfg(), start=0.0)
    e.submit(job("a", tokens=1000, out=11), 2.0)
    (s,) = e.admit(2.0)
    assert s.first_token_at == pytest.approx(3.0)  # 1000 tokens at 1000 tok/s
    assert s.ttft == pytest.approx(1.0)
    assert s.finish_at == pytest.approx(3.1)  # 10 more tokens at 100 tok/s
    assert [s.tokens_done(t) for t in (2.5, 3.0, 3.05, 3.1, 9.0)] == [0, 1, 6, 11, 11]
    (load,) = e.loads(3.05)
    assert load.num_used_tokens == 1006
    assert load.gen_throughput == pytest.approx(100.0)
    assert load.token_usage == pytest.approx(1006 / 100_000)


def test_prefix_cache_hits_shorten_prefill() -> None:
    e = Engine(cfg(max_running_per_rank=8), start=0.0)
    shared = [7] * 320  # 20 blocks
    e.submit(Job("a", prompt_from_ids(shared + [1] * 40), 4), 0.0)
    e.submit(Job("b", prompt_from_ids(shared + [2] * 40), 4), 0.0)
    a, b = e.admit(0.0)
    assert a.cached_tokens == 0
    assert b.cached_tokens == 320  # the shared 20 blocks; the diverging tail is computed
    assert b.first_token_at == pytest.approx(40 / 1000)
    (load,) = e.loads(0.0)
    assert load.cache_hit_rate == pytest.approx(320 / 720)


def test_full_prompt_hit_still_computes_the_last_token() -> None:
    e = Engine(cfg(), start=0.0)
    p = prompt_from_text("x" * 4 * BLOCK_TOKENS * 2)  # exactly 2 blocks of text
    e.submit(Job("a", p, 1), 0.0)
    e.admit(0.0)
    e.finish("a", 1.0)
    e.submit(Job("b", p, 1), 1.0)
    (b,) = e.admit(1.0)
    assert b.cached_tokens == p.num_tokens - 1


def test_radix_cache_can_be_disabled() -> None:
    e = Engine(cfg(prefix_cache=False), start=0.0)
    for rid in ("a", "b"):
        e.submit(job(rid, seed=1), 0.0)
    assert [s.cached_tokens for s in e.admit(0.0)] == [0, 0]


def test_in_process_dp_scales_concurrency_round_robin() -> None:
    e = Engine(cfg(num_ranks=2, max_running_per_rank=1), start=0.0)
    assert [e.submit(job(r), 0.0) for r in "abcd"] == [0, 1, 0, 1]
    admitted = e.admit(0.0)
    assert sorted((s.rid, s.dp_rank) for s in admitted) == [("a", 0), ("b", 1)]
    assert [(r.num_running_reqs, r.num_waiting_reqs) for r in e.loads(0.0)] == [(1, 1), (1, 1)]


def test_total_requests_dispatch_picks_the_least_loaded_rank() -> None:
    e = Engine(cfg(num_ranks=2, max_running_per_rank=4, dispatch="total_requests"), start=0.0)
    e.submit(job("a"), 0.0)
    e.submit(job("b"), 0.0)
    e.admit(0.0)
    e.finish("a", 0.5)
    assert e.submit(job("c"), 0.5) == 0


def test_kv_budget_holds_back_admission() -> None:
    e = Engine(cfg(max_running_per_rank=8, max_total_tokens_per_rank=250), start=0.0)
    e.submit(job("a", tokens=100, out=50), 0.0)
    e.submit(job("b", tokens=100, out=50, seed=1), 0.0)
    assert [s.rid for s in e.admit(0.0)] == ["a"]  # 150 + 150 > 250
    e.finish("a", 1.0)
    assert [s.rid for s in e.admit(1.0)] == ["b"]


def test_oversized_request_runs_alone_instead_of_deadlocking() -> None:
    e = Engine(cfg(max_total_tokens_per_rank=50), start=0.0)
    e.submit(job("a", tokens=100), 0.0)
    assert [s.rid for s in e.admit(0.0)] == ["a"]


def test_abort_queued_and_running() -> None:
    e = Engine(cfg(max_running_per_rank=1), start=0.0)
    e.submit(job("a"), 0.0)
    e.submit(job("b"), 0.0)
    e.admit(0.0)
    assert e.abort("b", 0.1)  # queued
    assert e.abort("a", 0.2)  # running
    assert not e.abort("a", 0.3)
    assert e.in_flight == 0


def test_flush_cache_refused_while_busy() -> None:
    e = Engine(cfg(), start=0.0)
    e.submit(job("a"), 0.0)
    e.admit(0.0)
    assert not e.flush_cache()
    e.finish("a", 1.0)
    assert e.flush_cache()
    e.submit(job("b"), 2.0)
    (b,) = e.admit(2.0)
    assert b.cached_tokens == 0


def test_busy_fraction_over_the_window() -> None:
    e = Engine(cfg(stats_window_s=10.0), start=0.0)
    e.submit(job("a"), 0.0)
    e.admit(0.0)
    e.finish("a", 5.0)
    (load,) = e.loads(10.0)
    assert load.busy_fraction == pytest.approx(0.5)
    (load,) = e.loads(20.0)
    assert load.busy_fraction == 0.0


def test_busy_tracker_counts_an_open_interval() -> None:
    t = BusyTracker(window=4.0, start=0.0)
    t.set(True, 8.0)
    assert t.fraction(10.0) == pytest.approx(0.5)
    assert BusyTracker(window=4.0, start=0.0).fraction(0.0) == 0.0  # nothing observed yet: idle


def test_busy_tracker_forgets_intervals_older_than_the_window() -> None:
    t = BusyTracker(window=1.0, start=0.0)
    for i in range(1000):
        t.set(True, float(i))
        t.set(False, i + 0.5)
    assert len(t.spans) <= 2
    assert t.fraction(1000.0) == pytest.approx(0.5)


def test_utilization_follows_sglang_formula() -> None:
    e = Engine(cfg(max_running_per_rank=4, max_total_tokens_per_rank=1000), start=0.0)
    e.submit(job("a", tokens=100, out=1), 0.0)
    e.admit(0.0)
    (load,) = e.loads(0.0)
    assert load.utilization == pytest.approx(max(1 / 4, (100 / 1000) / 0.9))


def test_prefix_cache_evicts_leaves_first() -> None:
    c = PrefixCache(capacity_tokens=3 * BLOCK_TOKENS, block_tokens=BLOCK_TOKENS)
    c.insert([b"r", b"r-a"])
    c.insert([b"r", b"r-b"])  # touches the shared root after leaf r-b
    assert len(c) == 3
    c.insert([b"x"])  # evicts the least recently used leaf r-a, not the root
    assert c.match([b"r", b"r-b"]) == 2
    assert c.match([b"r", b"r-a"]) == 1
    assert c.cached_tokens == 3 * BLOCK_TOKENS


def test_text_prompts_share_blocks_only_on_identical_prefixes() -> None:
    sys_prompt = "You are a helpful assistant. " * 10
    a = prompt_from_text(sys_prompt + "question one")
    b = prompt_from_text(sys_prompt + "another question")
    shared = (len(sys_prompt) // 4) // BLOCK_TOKENS
    assert a.block_keys[:shared] == b.block_keys[:shared]
    assert a.num_tokens == (len(sys_prompt) + len("question one") + 3) // 4


def test_pinned_dp_rank_bypasses_dispatch() -> None:
    e = Engine(cfg(num_ranks=2), start=0.0)
    assert e.submit(Job("a", prompt_from_ids([1]), 1, dp_rank=1), 0.0) == 1
    assert e.submit(job("b"), 0.0) == 0  # round robin continues from rank 0
    with pytest.raises(ValueError, match="out of range"):
        e.submit(Job("c", prompt_from_ids([1]), 1, dp_rank=2), 0.0)
