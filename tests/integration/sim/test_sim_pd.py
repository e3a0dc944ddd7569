"""Prefill/decode disaggregation in the simulator: the releases' flags and messages, a prefill and a decode server
exchanging rooms through the prefill's bootstrap port on 127.0.0.1, the timeouts, the layout checks, the per-role
gauges and the `disagg` section of /v1/loads."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from typing import Any

import aiohttp
import pytest

from sglang_operator.api.releases import parse_version
from sglang_sim import disagg
from sglang_sim.args import ArgsError, messages, parse, resolve
from sglang_sim.server import Simulator

MODEL = ["--model-path", "meta-llama/Llama-3.1-8B-Instruct", "--served-model-name", "llama"]
PREFILL = [*MODEL, "--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port", "0", "--enable-metrics"]
DECODE = [*MODEL, "--disaggregation-mode", "decode", "--enable-metrics"]
DISAGG_KEYS = [
    "mode",
    "prefill_bootstrap_queue_reqs",
    "prefill_inflight_queue_reqs",
    "decode_prealloc_queue_reqs",
    "decode_transfer_queue_reqs",
    "decode_retracted_queue_reqs",
    "kv_transfer_speed_gb_s",
    "kv_transfer_latency_ms",
]


def run(body: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(body())


def resolved(argv: Sequence[str], version: str = "0.5.23") -> Any:
    return resolve(parse([*MODEL, *argv], version), version)


def refused(argv: Sequence[str], version: str = "0.5.23") -> ArgsError:
    with pytest.raises(ArgsError) as e:
        resolved(argv, version)
    return e.value


# --- flags and start-up checks, per release --------------------------------------------------------------------------


def test_pd_flags_resolve_as_the_release_does() -> None:
    a = resolved(["--disaggregation-mode", "prefill"]).args
    assert (a.disaggregation_bootstrap_port, a.disaggregation_transfer_backend) == (8998, "mooncake")
    assert a.load_balance_method == "follow_bootstrap_room"  # auto, on prefill
    assert resolved(["--disaggregation-mode", "decode"]).args.load_balance_method == "round_robin"
    assert (
        resolved(["--disaggregation-mode", "prefill", "--load-balance-method", "round_robin"]).args.load_balance_method
        == "round_robin"
    )
    old = resolved(["--disaggregation-mode", "prefill", "--load-balance-method", "round_robin"], "0.5.9")
    assert old.args.load_balance_method == "follow_bootstrap_room"  # 0.5.9's backward compatibility, with a warning
    assert any("Falling back to 'follow_bootstrap_room'" in n for n in old.notes)
    # decode turns the radix cache off unless asked (0.5.11+)
    assert resolved(["--disaggregation-mode", "decode"]).args.disable_radix_cache
    decode_radix = ["--disaggregation-mode", "decode", "--disaggregation-decode-enable-radix-cache"]
    assert not resolved(decode_radix).args.disable_radix_cache
    tcp = resolved(["--disaggregation-mode", "prefill", "--disaggregation-transfer-backend", "mooncake_tcp"])
    assert tcp.args.disaggregation_transfer_backend == "mooncake"
    ib = resolved(["--disaggregation-mode", "decode", "--disaggregation-ib-device", "mlx5_0,mlx5_1"]).args
    assert ib.disaggregation_ib_device == "mlx5_0,mlx5_1"


def test_a_prefill_refuses_the_fake_backend_from_0_5_10() -> None:
    argv = ["--disaggregation-mode", "prefill", "--disaggregation-transfer-backend", "fake"]
    e = refused(argv)
    assert (e.kind, e.message) == ("AssertionError", "Prefill server does not support 'fake' as the transfer backend")
    assert str(refused(argv, "0.5.10")) == str(e)
    resolved(argv, "0.5.9")  # 0.5.9 starts
    resolved(["--disaggregation-mode", "decode", "--disaggregation-transfer-backend", "fake"])  # decode may
    radix_fake = ["--disaggregation-mode", "decode", "--disaggregation-decode-enable-radix-cache", *argv[2:]]
    assert refused(radix_fake).message == (
        "--disaggregation-decode-enable-radix-cache is incompatible with --disaggregation-transfer-backend fake"
    )
    resolved(radix_fake, "0.5.13")  # the check is 0.5.14's


def test_0_5_9_decode_tp_flags_and_its_divisibility_assertion() -> None:
    v = "0.5.9"
    e = refused(["--disaggregation-mode", "prefill", "--tp", "2", "--disaggregation-decode-tp", "3"], v)
    assert (e.kind, e.message) == (
        "AssertionError",
        "Different tp size is supported only when one tp is multiple of the other. decode_tp=3, prefill_tp=2",
    )
    ok = resolved(["--disaggregation-mode", "prefill", "--tp", "2", "--disaggregation-decode-tp", "4"], v).args
    assert (ok.disaggregation_decode_tp, ok.disaggregation_decode_dp, ok.disaggregation_prefill_pp) == (4, 1, 1)
    assert resolved(["--disaggregation-mode", "prefill", "--tp", "4"], v).args.disaggregation_decode_tp == 4
    e = refused(["--disaggregation-mode", "decode", "--disaggregation-decode-tp", "2"], v)
    assert e.message == "Cannot set --disaggregation-decode-tp for the decode engine."
    e = refused(["--disaggregation-mode", "decode", "--disaggregation-decode-dp", "2"], v)
    assert e.message == "Cannot set --disaggregation-decode-dp for the decode engine."
    with pytest.raises(SystemExit) as exit_:  # later releases have no such flag: argparse, exit 2
        parse([*MODEL, "--disaggregation-decode-tp", "2"], "0.5.10")
    assert exit_.value.code == 2


def test_prefill_complete_needs_mooncake_and_tp_1_from_0_5_22() -> None:
    policy = ["--disaggregation-decode-allocation-policy", "prefill_complete"]
    head = "--disaggregation-decode-allocation-policy prefill_complete does not yet support "
    e = refused(["--disaggregation-mode", "prefill", *policy, "--disaggregation-transfer-backend", "nixl"])
    assert (e.kind, e.message) == ("ValueError", head + "transfer backends other than Mooncake")
    # the release reads attention TP from the already-reset enable_dp_attention: any tp > 1 fails, attention DP or not
    e = refused(["--disaggregation-mode", "decode", *policy, "--tp", "2", "--attn-dp-size", "2"])
    assert e.message == head + "attention tensor parallelism greater than one"
    e = refused([*policy, "--tp", "2"])
    assert e.message == head + "aggregated serving, attention tensor parallelism greater than one"
    ok = resolved(["--disaggregation-mode", "prefill", *policy, "--disaggregation-transfer-backend", "mooncake_tcp"])
    assert ok.args.disaggregation_decode_allocation_policy == "prefill_complete"
    assert str(refused(["--disaggregation-mode", "prefill", *policy, "--pp-size", "2"], "0.5.22")).endswith(
        "pipeline or attention context parallelism"
    )
    with pytest.raises(SystemExit):
        parse([*MODEL, *policy], "0.5.21")


def test_the_pd_messages_by_release() -> None:
    new, old = messages(parse_version("0.5.23")), messages(parse_version("0.5.9"))
    assert old["pd_prefill_fake"] is None and new["pd_prefill_fake"] is not None
    assert new["pd_tp_multiple"] is None and old["pd_tp_multiple"] is not None
    assert messages(parse_version("0.5.21"))["pd_prefill_complete"] is None


# --- a prefill and a decode server -----------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def pd_pair(
    kit: Any,
    prefill_args: Sequence[str] = (),
    decode_args: Sequence[str] = (),
    prefill_env: dict[str, str] | None = None,
    decode_env: dict[str, str] | None = None,
    version: str = "0.5.23",
) -> AsyncIterator[tuple[Simulator, Simulator]]:
    async with (
        kit.run([*PREFILL, *prefill_args], prefill_env, version=version) as p,
        kit.run([*DECODE, *decode_args], decode_env, version=version) as d,
    ):
        await kit.wait_until(lambda: p.bootstrap is not None and p.bootstrap.registered > 0, what="ranks registered")
        yield p, d


def pd_fields(p: Simulator, room: int) -> dict[str, Any]:
    assert p.bootstrap is not None
    return {"bootstrap_host": "127.0.0.1", "bootstrap_port": p.bootstrap.bound_port, "bootstrap_room": room}


async def post(s: aiohttp.ClientSession, url: str, body: Any) -> tuple[int, Any]:
    async with s.post(url, json=body) as r:
        return r.status, await r.json(content_type=None)


async def get(s: aiohttp.ClientSession, url: str) -> tuple[int, Any]:
    async with s.get(url) as r:
        text = await r.text()
        return r.status, json.loads(text) if r.content_type == "application/json" else text


async def sse(s: aiohttp.ClientSession, url: str, body: Any) -> list[Any]:
    events: list[Any] = []
    async with s.post(url, json=body) as r:
        assert r.status == 200
        async for raw in r.content:
            line = raw.decode().strip()
            if line.startswith("data: "):
                data = line[len("data: ") :]
                events.append(data if data == "[DONE]" else json.loads(data))
    return events


def metric(text: str, name: str) -> float:
    """The sum of a metric's samples (0 when absent)."""
    pattern = re.compile(rf"^{re.escape(name)}(?:\{{[^}}]*\}})? (\S+)$", re.M)
    return sum(float(v) for v in pattern.findall(text))


async def scrape(s: aiohttp.ClientSession, sim: Simulator) -> str:
    async with s.get(f"http://127.0.0.1:{sim.port}/metrics") as r:
        return await r.text()


async def disagg_of(s: aiohttp.ClientSession, sim: Simulator) -> tuple[dict[str, Any], dict[str, Any]]:
    status, body = await get(s, f"http://127.0.0.1:{sim.port}/v1/loads?include=core,disagg")
    assert status == 200
    (entry,) = body["loads"]
    return entry, entry["disaggregation"]


def test_a_room_is_handed_from_prefill_to_decode(kit: Any, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)

    async def body() -> None:
        async with pd_pair(kit) as (p, d), aiohttp.ClientSession() as s:
            pu, du = kit.url(p), kit.url(d)
            req = {"text": "hello " * 40, "sampling_params": {"max_new_tokens": 12}, **pd_fields(p, 101)}
            (ps, pb), (ds, db) = await asyncio.gather(post(s, pu + "/generate", req), post(s, du + "/generate", req))
            assert (ps, ds) == (200, 200)
            assert db["meta_info"]["completion_tokens"] == 12  # the client's answer: decode's
            assert db["meta_info"]["finish_reason"] == {"type": "length", "length": 12}
            assert pb["meta_info"]["completion_tokens"] == 1  # prefill: max_new_tokens forced to 1
            assert pb["meta_info"]["finish_reason"] == {"type": "length", "length": 0}
            assert pb["output_ids"] == db["output_ids"][:1]  # decode continues from prefill's first token
            chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5, **pd_fields(p, 102)}
            (ps, pc), (ds, dc) = await asyncio.gather(
                post(s, pu + "/v1/chat/completions", chat), post(s, du + "/v1/chat/completions", chat)
            )
            assert (ps, ds) == (200, 200)
            assert dc["usage"]["completion_tokens"] == 5 and pc["usage"]["completion_tokens"] == 1
            assert pc["choices"][0]["finish_reason"] == "length"
            stream = {**chat, "stream": True, **pd_fields(p, 103)}
            pe, de = await asyncio.gather(
                sse(s, pu + "/v1/chat/completions", stream), sse(s, du + "/v1/chat/completions", stream)
            )
            assert de[-1] == "[DONE]" and pe[-1] == "[DONE]"
            assert (
                "".join(e["choices"][0]["delta"].get("content", "") for e in de[:-1])
                == dc["choices"][0]["message"]["content"]
            )
            # each request counted once by each role (plus its warmup), and no failure
            for sim in (p, d):
                text = await scrape(s, sim)
                assert metric(text, "sglang:num_requests_total") == 1 + 3
                assert metric(text, "sglang:num_bootstrap_failed_reqs_total") == 0
                assert metric(text, "sglang:num_transfer_failed_reqs_total") == 0
            ptext, dtext = await scrape(s, p), await scrape(s, d)
            assert metric(ptext, "sglang:time_to_first_token_seconds_count") == 0  # prefill observes no TTFT
            assert metric(dtext, "sglang:time_to_first_token_seconds_count") == 1 + 3
            assert metric(ptext, "sglang:kv_transfer_latency_ms_count") == 3  # each transfer, on prefill
            assert metric(dtext, "sglang:kv_transfer_latency_ms_count") == 0
            assert not p.bootstrap.rooms  # type: ignore[union-attr]

    run(body)
    for room in (101, 102, 103):
        lines = [r.getMessage() for r in caplog.records if f"bootstrap_room={room}" in r.getMessage()]
        assert sorted(re.findall(r"disaggregation_mode=(\w+)", " ".join(lines))) == ["decode", "prefill"], lines


def test_the_bootstrap_routes(kit: Any) -> None:
    async def body() -> None:
        async with pd_pair(kit, ["--tp", "2", "--dp", "2"]) as (p, _), aiohttp.ClientSession() as s:
            assert p.bootstrap is not None
            # bound to --host (the local cluster gives each pod its own address), not 0.0.0.0
            assert p.bootstrap._runner is not None and p.bootstrap._runner.addresses[0][0] == "127.0.0.1"
            b = f"http://127.0.0.1:{p.bootstrap.bound_port}"
            assert await get(s, b + "/health") == (200, "OK")
            q = "prefill_dp_rank=-1&prefill_cp_rank=-1&target_tp_rank=-1&target_pp_rank=-1"
            status, info = await get(s, f"{b}/route?{q}")
            assert status == 200
            assert (info["attn_tp_size"], info["dp_size"], info["pp_size"], info["page_size"]) == (2, 2, 1, 1)
            assert (info["kv_cache_dtype"], info["follow_bootstrap_room"]) == ("bfloat16", True)
            assert info["prefill_http_port"] == p.port
            status, rank = await get(
                s, f"{b}/route?prefill_dp_rank=1&prefill_cp_rank=0&target_tp_rank=1&target_pp_rank=0"
            )
            assert status == 200 and rank == {"rank_ip": "127.0.0.1", "rank_port": p.bootstrap.bound_port}
            assert (await get(s, f"{b}/route?prefill_dp_rank=5&prefill_cp_rank=0&target_tp_rank=0&target_pp_rank=0"))[
                0
            ] == 404
            assert await get(s, f"{b}/route?prefill_dp_rank=0") == (400, "Missing inputs for bootstrap server.")
            async with s.post(f"{b}/register_dp_rank", json={"bootstrap_room": 77, "dp_rank": 1}) as r:
                assert r.status == 200
            assert await post(s, f"{b}/query_dp_ranks", {"bootstrap_rooms": [77, 78]}) == (200, {"77": 1})
            async with s.delete(f"{b}/route") as r:
                assert r.status == 405

    run(body)


def test_a_prefill_answers_503_until_its_ranks_register(kit: Any) -> None:
    async def body() -> None:
        env = {"SGLANG_SIM_STARTUP_SECONDS": "30"}
        async with kit.run(PREFILL, env, wait_up=False) as p, aiohttp.ClientSession() as s:
            assert p.bootstrap is not None
            b = f"http://127.0.0.1:{p.bootstrap.bound_port}"
            assert await get(s, b + "/health") == (200, "OK")  # the bootstrap server listens at once
            q = "prefill_dp_rank=-1&prefill_cp_rank=-1&target_tp_rank=-1&target_pp_rank=-1"
            assert await get(s, f"{b}/route?{q}") == (
                503,
                "Prefill server not fully registered yet (0 workers registered).",
            )

    run(body)


def test_warmup_and_the_fake_host_stay_local_and_a_room_is_required(kit: Any) -> None:
    async def body() -> None:
        async with kit.run(DECODE) as d, aiohttp.ClientSession() as s:  # Up: its warmup needed no prefill
            u = kit.url(d)
            fake = {
                "text": "hi",
                "sampling_params": {"max_new_tokens": 3},
                "bootstrap_host": "2.2.2.2",
                "bootstrap_room": 0,
            }
            status, out = await post(s, u + "/generate", fake)
            assert status == 200 and out["meta_info"]["completion_tokens"] == 3
            status, out = await post(s, u + "/generate", {"text": "hi"})
            assert status == 400
            assert re.fullmatch(
                r"Invalid request: Disaggregated request received without bootstrap room id\. req\.rid='[0-9a-f]+'",
                out["error"]["message"],
            )
            _, section = await disagg_of(s, d)
            assert list(section) == DISAGG_KEYS and section["mode"] == "decode"

    run(body)


def test_decode_aborts_a_room_whose_kv_never_comes(kit: Any) -> None:
    async def body() -> None:
        env = {"SGLANG_DISAGGREGATION_WAITING_TIMEOUT": "1"}
        async with pd_pair(kit, decode_env=env) as (p, d), aiohttp.ClientSession() as s:
            req = {"text": "hi", **pd_fields(p, 7)}  # the router never reached the prefill
            t0 = asyncio.get_running_loop().time()
            status, out = await post(s, kit.url(d) + "/generate", req)
            assert 1.0 <= asyncio.get_running_loop().time() - t0 < 5
            assert status == 500 and (out["object"], out["type"], out["code"]) == ("error", "500", 500)
            assert re.fullmatch(
                r"Decode transfer failed for request rank=0 decode_req\.req\.rid='[0-9a-f]+' "
                r"decode_req\.req\.bootstrap_room=7 with exception KVTransferError\(bootstrap_room=7\): "
                r"Request 7 timed out after 1\.\ds in KVPoll\.WaitingForInput",
                out["message"],
            ), out["message"]
            text = await scrape(s, d)
            assert metric(text, "sglang:num_transfer_failed_reqs_total") == 1
            assert metric(text, "sglang:num_requests_total") == 1 + 1  # warmup; an aborted request still finishes
            await kit.wait_until(lambda: not p.bootstrap.rooms, what="the abort notification closed the room")  # type: ignore[union-attr]
            stream = await sse(
                s,
                kit.url(d) + "/v1/chat/completions",
                {"messages": [{"role": "user", "content": "x"}], "stream": True, **pd_fields(p, 8)},
            )
            assert stream[-1] == "[DONE]"
            err = stream[-2]["error"]
            assert (err["type"], err["code"]) == ("INTERNAL_SERVER_ERROR", 500) and "KVPoll.WaitingForInput" in err[
                "message"
            ]

    run(body)


def test_prefill_aborts_a_room_no_decode_asks_for(kit: Any) -> None:
    async def body() -> None:
        env = {"SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT": "1"}
        async with pd_pair(kit, prefill_env=env) as (p, d), aiohttp.ClientSession() as s:
            status, out = await post(s, kit.url(p) + "/generate", {"text": "hi", **pd_fields(p, 9)})
            assert status == 500
            assert re.fullmatch(
                r"Prefill bootstrap failed for request rank=0 req\.rid='[0-9a-f]+' req\.bootstrap_room=9 with "
                r"exception KVTransferError\(bootstrap_room=9\): "
                r"Request 9 timed out after 1\.\ds in KVPoll\.Bootstrapping",
                out["message"],
            ), out["message"]
            assert metric(await scrape(s, p), "sglang:num_bootstrap_failed_reqs_total") == 1
            # a decode that asks for the room afterwards learns it failed, at once
            status, out = await post(s, kit.url(d) + "/generate", {"text": "hi", **pd_fields(p, 9)})
            assert status == 500 and out["message"].endswith("Failed due to an unknown reason from another rank")

    run(body)


def test_unequal_page_size_kills_the_decode_at_its_first_transfer(kit: Any, caplog: pytest.LogCaptureFixture) -> None:
    async def body() -> None:
        async with pd_pair(kit, ["--page-size", "16"]) as (p, d), aiohttp.ClientSession() as s:
            assert not d.stopped
            status, _ = await post(s, kit.url(d) + "/generate", {"text": "hi", **pd_fields(p, 11)})
            assert status == 500
            assert d.stopped and d.exit_code == 1 and not p.stopped

    run(body)
    crash = "\n".join(r.getMessage() for r in caplog.records if "Scheduler hit an exception" in r.getMessage())
    assert (
        "RuntimeError: Page size mismatch: prefill server has page_size=16, but decode server has page_size=1. "
        "Both servers must use the same --page-size value." in crash
    )


@pytest.mark.parametrize(("version", "dies"), [("0.5.23", True), ("0.5.9", False)])
def test_unequal_kv_cache_dtype(kit: Any, caplog: pytest.LogCaptureFixture, version: str, dies: bool) -> None:
    async def body() -> None:
        async with (
            pd_pair(kit, ["--kv-cache-dtype", "fp8_e4m3"], version=version) as (p, d),
            aiohttp.ClientSession() as s,
        ):
            req = {"text": "hi", "sampling_params": {"max_new_tokens": 2}, **pd_fields(p, 12)}
            if dies:
                status, _ = await post(s, kit.url(d) + "/generate", req)
                assert status == 500 and d.stopped and d.exit_code == 1
            else:  # 0.5.9 compares page sizes only
                (ps, _), (ds, _) = await asyncio.gather(
                    post(s, kit.url(p) + "/generate", req), post(s, kit.url(d) + "/generate", req)
                )
                assert (ps, ds) == (200, 200) and not d.stopped

    run(body)
    if dies:
        assert any(
            "KV cache dtype mismatch: prefill server has kv_cache_dtype=fp8_e4m3, but decode server has "
            "kv_cache_dtype=bfloat16. Both servers must use the same --kv-cache-dtype value." in r.getMessage()
            for r in caplog.records
        )


@pytest.mark.parametrize("version", ["0.5.23", "0.5.9"])
def test_unequal_dtype_goes_unnoticed_as_in_sglang(kit: Any, version: str) -> None:
    """Issue 37: `--dtype float16` on prefill beside a bf16 decode, KV dtype auto: SGLang compares the KV dtype
    strings (`auto` on both; 0.5.9 compares page sizes only) and hands the fp16 pages over, so neither side fails.
    The simulator does the same; only the operator's single `disaggregation.dtype` keeps the roles alike."""

    async def body() -> None:
        async with (
            pd_pair(kit, ["--dtype", "float16"], ["--dtype", "bfloat16"], version=version) as (p, d),
            aiohttp.ClientSession() as s,
        ):
            req = {"text": "hi", "sampling_params": {"max_new_tokens": 2}, **pd_fields(p, 13)}
            (ps, _), (ds, _) = await asyncio.gather(
                post(s, kit.url(p) + "/generate", req), post(s, kit.url(d) + "/generate", req)
            )
            assert (ps, ds) == (200, 200) and not d.stopped and not p.stopped

    run(body)


def test_per_role_gauges_and_disagg_loads_during_a_transfer(kit: Any) -> None:
    # 100 prompt tokens x 128 KiB at 87.4 kB/s: 150 s, x0.01 time scale = 1.5 s of transfer
    slow = {"SGLANG_SIM_KV_TRANSFER_GBPS": "0.0000874"}
    one_slot = ["--max-running-requests", "1", "--disaggregation-decode-extra-slots", "0"]

    async def body() -> None:
        async with pd_pair(kit, prefill_env=slow, decode_args=one_slot) as (p, d), aiohttp.ClientSession() as s:
            pu, du = kit.url(p), kit.url(d)

            def req(room: int) -> dict[str, Any]:
                return {"input_ids": list(range(100)), "sampling_params": {"max_new_tokens": 4}, **pd_fields(p, room)}

            tasks = [
                asyncio.create_task(post(s, url + "/generate", req(room))) for room in (21, 22) for url in (pu, du)
            ]
            # room 21 is being written; room 22 waits for a decode slot (decode) and for decode's metadata (prefill)
            await kit.wait_until(
                lambda: p.ctx.pd is not None and p.ctx.pd.queues.count("inflight", 0) == 1, 5, "inflight"
            )
            await kit.wait_until(
                lambda: d.ctx.pd is not None and d.ctx.pd.queues.count("prealloc", 0) == 1, 5, "prealloc"
            )
            pe, ps = await disagg_of(s, p)
            de, ds = await disagg_of(s, d)
            assert list(ps) == DISAGG_KEYS and list(ds) == DISAGG_KEYS
            assert ps == {
                "mode": "prefill",
                "prefill_bootstrap_queue_reqs": 1,
                "prefill_inflight_queue_reqs": 1,
                "decode_prealloc_queue_reqs": 0,
                "decode_transfer_queue_reqs": 0,
                "decode_retracted_queue_reqs": 0,
                "kv_transfer_speed_gb_s": 0.0,
                "kv_transfer_latency_ms": 0.0,
            }
            assert (ds["mode"], ds["decode_prealloc_queue_reqs"], ds["decode_transfer_queue_reqs"]) == ("decode", 1, 1)
            assert ds["prefill_bootstrap_queue_reqs"] == ds["prefill_inflight_queue_reqs"] == 0
            assert pe["num_waiting_reqs"] == 1 and de["num_waiting_reqs"] == 2  # as SGLang counts its PD queues
            assert pe["num_used_tokens"] == 100 and de["num_used_tokens"] == 100  # KV held for the transfer
            ptext, dtext = await scrape(s, p), await scrape(s, d)
            assert metric(ptext, "sglang:num_prefill_bootstrap_queue_reqs") == 1
            assert metric(ptext, "sglang:num_prefill_inflight_queue_reqs") == 1
            assert metric(dtext, "sglang:num_decode_prealloc_queue_reqs") == 1
            assert metric(dtext, "sglang:num_decode_transfer_queue_reqs") == 1
            assert metric(ptext, "sglang:num_decode_transfer_queue_reqs") == 0  # every role exports every gauge
            results = await asyncio.gather(*tasks)
            assert [status for status, _ in results] == [200, 200, 200, 200]
            _, ps = await disagg_of(s, p)
            assert ps["prefill_inflight_queue_reqs"] == 0 and 1000 < ps["kv_transfer_latency_ms"] < 5000
            assert ps["kv_transfer_speed_gb_s"] > 0
            assert metric(await scrape(s, p), "sglang:kv_transfer_latency_ms_count") == 2

    run(body)


def test_the_disagg_section_by_release() -> None:
    pd = disagg.PdRankLoad(dp_rank=0, bootstrap=2, inflight=1)
    old = disagg.disagg_section("prefill", "0.5.9", pd)
    assert list(old) == ["mode", "prefill_prealloc_queue_reqs", *DISAGG_KEYS[2:]]
    assert old["prefill_prealloc_queue_reqs"] == 2
    assert disagg.disagg_section("prefill", "0.5.12", pd)["prefill_bootstrap_queue_reqs"] == 2
    assert disagg.disagg_section("null", "0.5.23", None)["mode"] == "null"


def test_a_0_5_9_pair_in_two_processes(kit: Any, procs: Any) -> None:
    """Two simulator processes playing 0.5.9 exchange a room through the prefill's bootstrap port."""
    prefill_port, decode_port, bootstrap_port = kit.free_port(), kit.free_port(), kit.free_port()
    common = ["--sim-version", "0.5.9", *MODEL, "--host", "127.0.0.1"]
    procs.sim([*common, "--port", str(prefill_port), "--disaggregation-mode", "prefill",
               "--disaggregation-bootstrap-port", str(bootstrap_port)])  # fmt: skip
    procs.sim([*common, "--port", str(decode_port), "--disaggregation-mode", "decode"])
    for port in (prefill_port, decode_port):
        kit.wait_http(f"http://127.0.0.1:{port}/health")
    b = f"http://127.0.0.1:{bootstrap_port}"
    assert kit.http_status(b + "/health") == 200
    assert kit.http_status(b + "/register_dp_rank") == 404  # 0.5.9's bootstrap server has /route and /health only

    async def body() -> None:
        async with aiohttp.ClientSession() as s:
            assert await get(s, f"{b}/route?engine_rank=-1&target_dp_group=-1&target_pp_rank=-1") == (
                200,
                {"prefill_attn_tp_size": 1, "prefill_dp_size": 1, "prefill_pp_size": 1, "prefill_page_size": 1},
            )
            req = {"text": "hi there", "sampling_params": {"max_new_tokens": 6}, "bootstrap_host": "127.0.0.1",
                   "bootstrap_port": bootstrap_port, "bootstrap_room": 5}  # fmt: skip
            (ps, pb), (ds, db) = await asyncio.gather(
                post(s, f"http://127.0.0.1:{prefill_port}/generate", req),
                post(s, f"http://127.0.0.1:{decode_port}/generate", req),
            )
            assert (ps, ds) == (200, 200)
            assert (pb["meta_info"]["completion_tokens"], db["meta_info"]["completion_tokens"]) == (1, 6)
            status, loads = await get(s, f"http://127.0.0.1:{prefill_port}/v1/loads?include=disagg")
            assert status == 200 and "prefill_prealloc_queue_reqs" in loads["loads"][0]["disaggregation"]
            # The core keys come whatever `include` names (SGLang's `LoadSnapshot.to_dict`): a drain reads both.
            assert {"num_running_reqs", "num_waiting_reqs"} <= loads["loads"][0].keys()

    run(body)


def test_requests_fail_while_the_prefill_is_gone_and_succeed_when_it_is_back(kit: Any) -> None:
    bootstrap = kit.free_port()
    prefill = [*MODEL, "--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port", str(bootstrap)]

    async def pair_request(s: aiohttp.ClientSession, p: Simulator, d: Simulator, room: int) -> int:
        req = {"text": "hi", "sampling_params": {"max_new_tokens": 2}, **pd_fields(p, room)}
        (ps, _), (ds, _) = await asyncio.gather(
            post(s, kit.url(p) + "/generate", req), post(s, kit.url(d) + "/generate", req)
        )
        assert ps == ds
        return int(ds)

    async def body() -> None:
        async with kit.run(DECODE) as d, aiohttp.ClientSession() as s:
            async with kit.run(prefill) as p:
                assert await pair_request(s, p, d, 31) == 200
            status, out = await post(
                s,
                kit.url(d) + "/generate",
                {"text": "hi", "bootstrap_host": "127.0.0.1", "bootstrap_port": bootstrap, "bootstrap_room": 32},
            )
            assert status == 500
            assert out["message"].endswith(
                f"Prefill server with bootstrap_addr: 127.0.0.1:{bootstrap} is healthy before, but now it is down. "
                "Request (bootstrap_room: 32) has been marked as failed."
            )
            async with kit.run(prefill) as p:
                assert await pair_request(s, p, d, 33) == 200
            assert not d.stopped

    run(body)


def test_the_bootstrap_down_knob_leaves_the_port_closed_on_its_replicas_only(kit: Any) -> None:
    """The doctor's e2e fault (SGLANG_SIM_BOOTSTRAP_DOWN): the listed replica's prefill serves but its bootstrap port
    refuses; another replica's prefill is untouched."""
    knob = {"SGLANG_SIM_BOOTSTRAP_DOWN": "1", "SGLANG_SIM_BOOTSTRAP_DOWN_REPLICAS": "1"}

    async def body() -> None:
        async with (
            kit.run(PREFILL, {**knob, "SGLANG_SIM_REPLICA": "1"}) as down,
            kit.run(PREFILL, {**knob, "SGLANG_SIM_REPLICA": "0"}) as up,
            aiohttp.ClientSession() as s,
        ):
            assert down.bootstrap is not None and up.bootstrap is not None
            with pytest.raises(aiohttp.ClientConnectionError):
                await get(s, f"http://127.0.0.1:{down.bootstrap.bound_port}/health")
            assert await get(s, f"http://127.0.0.1:{up.bootstrap.bound_port}/health") == (200, "OK")

    run(body)
