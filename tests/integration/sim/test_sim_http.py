"""The HTTP surface, served in-process on 127.0.0.1 and exercised with an aiohttp client."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Coroutine
from typing import Any

import aiohttp
import pytest

MODEL = ["--model-path", "meta-llama/Llama-3.1-8B-Instruct", "--served-model-name", "llama"]


def run(body: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(body())


async def get(s: aiohttp.ClientSession, url: str, **kw: Any) -> tuple[int, Any]:
    async with s.get(url, **kw) as r:
        text = await r.text()
        if r.content_type == "application/json":
            return r.status, json.loads(text)
        return r.status, text


async def post(s: aiohttp.ClientSession, url: str, body: Any, **kw: Any) -> tuple[int, Any]:
    async with s.post(url, json=body, **kw) as r:
        return r.status, await r.json(content_type=None)


async def sse(s: aiohttp.ClientSession, url: str, body: Any) -> list[Any]:
    """POST and collect the `data:` events of a server-sent-event stream ("[DONE]" kept as a string)."""
    events: list[Any] = []
    async with s.post(url, json=body) as r:
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("text/event-stream")
        async for raw in r.content:
            line = raw.decode().strip()
            if line.startswith("data: "):
                data = line[len("data: ") :]
                events.append(data if data == "[DONE]" else json.loads(data))
    return events


def test_starting_then_up(kit: Any) -> None:
    async def body() -> None:
        env = {"SGLANG_SIM_STARTUP_SECONDS": "1", "SGLANG_SIM_TIME_SCALE": "0.3"}  # 0.3 s start, 0.3 s probe
        async with kit.run(MODEL, env, wait_up=False) as sim, aiohttp.ClientSession() as s:
            u = kit.url(sim)
            assert (await get(s, f"{u}/health"))[0] == 503
            assert (await get(s, f"{u}/health_generate"))[0] == 503
            assert (await get(s, f"{u}/ready"))[0] == 503
            assert (await post(s, f"{u}/generate", {"text": "hi"}))[0] == 503
            assert (await get(s, f"{u}/v1/models"))[0] == 200  # info routes answer while starting
            await kit.wait_until(lambda: sim.status == "Up", timeout=5, what="Up")
            assert (await get(s, f"{u}/ready"))[0] == 200
            assert (await get(s, f"{u}/ping"))[0] == 200
            t0 = asyncio.get_running_loop().time()
            assert (await get(s, f"{u}/health"))[0] == 200
            assert asyncio.get_running_loop().time() - t0 >= 0.3  # the generation probe: 1 s, scaled

    run(body)


def test_info_endpoints(kit: Any) -> None:
    async def body() -> None:
        argv = [*MODEL, "--tp", "4", "--dp", "2", "--ep", "4", "--context-length", "8192"]
        async with kit.run(argv) as sim, aiohttp.ClientSession() as s:
            u = kit.url(sim)
            for path in ("/server_info", "/get_server_info"):
                status, info = await get(s, u + path)
                assert status == 200
                assert (info["tp_size"], info["dp_size"], info["attn_dp_size"], info["ep_size"]) == (4, 2, 1, 4)
                assert info["served_model_name"] == "llama" and info["port"] == 0  # as passed on the command line
                assert info["version"] == "0.5.23" and info["context_length"] == 8192
                assert len(info["internal_states"]) == 2
                assert info["scheduler_info"]["max_running_requests"] == 64
            for path in ("/model_info", "/get_model_info"):
                status, mi = await get(s, u + path)
                assert status == 200 and mi["model_path"] == MODEL[1] and mi["is_generation"] is True
                assert mi["architectures"] == ["LlamaForCausalLM"]
            status, models = await get(s, f"{u}/v1/models")
            assert models["object"] == "list"
            assert [(m["id"], m["owned_by"], m["max_model_len"]) for m in models["data"]] == [("llama", "sglang", 8192)]
            assert (await get(s, f"{u}/v1/models/llama"))[1]["id"] == "llama"
            status, err = await get(s, f"{u}/v1/models/other")
            assert status == 404 and err["error"]["code"] == "model_not_found"
            assert await get(s, f"{u}/no/such/path") == (404, {"detail": "Not Found"})
            assert (await get(s, f"{u}/metrics"))[0] == 404  # no --enable-metrics
            assert (await get(s, f"{u}/get_load"))[0] == 404  # removed in 0.5.21

    run(body)


def test_v1_loads(kit: Any) -> None:
    async def body() -> None:
        async with kit.run([*MODEL, "--tp", "4", "--attn-dp-size", "2"]) as sim, aiohttp.ClientSession() as s:
            u = kit.url(sim)
            status, loads = await get(s, f"{u}/v1/loads")
            assert status == 200
            assert (loads["version"], loads["num_accelerators"], loads["accelerator"]) == ("0.5.23", 2, "NVIDIA H200")
            assert [e["dp_rank"] for e in loads["loads"]] == [0, 1]
            entry = loads["loads"][0]
            assert entry["max_running_requests"] == 64  # no flag: the default is per scheduler, never divided
            assert {"num_running_reqs", "num_waiting_reqs", "token_usage", "memory", "queues"} <= entry.keys()
            _, core = await get(s, f"{u}/v1/loads", params={"include": "core", "dp_rank": "1"})
            assert [e["dp_rank"] for e in core["loads"]] == [1] and "memory" not in core["loads"][0]
            assert (await get(s, f"{u}/v1/loads", params={"include": "bogus"}))[0] == 400
            status, text = await get(s, f"{u}/v1/loads", params={"format": "prometheus"})
            assert 'sglang_num_running_reqs{dp_rank="1"} 0' in text

    run(body)


def test_generate_native(kit: Any) -> None:
    async def body() -> None:
        async with kit.run(MODEL) as sim, aiohttp.ClientSession() as s:
            u = kit.url(sim)
            req = {"text": "The capital of France is", "sampling_params": {"max_new_tokens": 6}}
            status, out = await post(s, f"{u}/generate", req)
            assert status == 200
            assert len(out["output_ids"]) == 6 and isinstance(out["text"], str) and out["text"]
            meta = out["meta_info"]
            assert meta["finish_reason"] == {"type": "length", "length": 6}
            assert (meta["prompt_tokens"], meta["completion_tokens"]) == (6, 6)
            assert (await post(s, f"{u}/generate", req))[1]["text"] == out["text"]  # deterministic
            _, dflt = await post(s, f"{u}/generate", {"input_ids": [1, 2, 3]})
            assert dflt["meta_info"]["completion_tokens"] == 16 and dflt["meta_info"]["finish_reason"]["type"] == "stop"
            _, batch = await post(s, f"{u}/generate", {"text": ["a", "b"], "sampling_params": {"max_new_tokens": 2}})
            assert [len(b["output_ids"]) for b in batch] == [2, 2]
            events = await sse(s, f"{u}/generate", {**req, "stream": True})
            assert events[-1] == "[DONE]"
            chunks = events[:-1]
            assert chunks[-1]["text"] == out["text"]  # cumulative text
            assert [c["meta_info"]["finish_reason"] for c in chunks[:-1]] == [None] * (len(chunks) - 1)
            status, err = await post(s, f"{u}/generate", {"sampling_params": {}})
            assert status == 400 and "should be provided" in err["error"]["message"]

    run(body)


def test_context_length_is_enforced(kit: Any) -> None:
    async def body() -> None:
        async with kit.run([*MODEL, "--context-length", "16"]) as sim, aiohttp.ClientSession() as s:
            status, err = await post(s, f"{kit.url(sim)}/generate", {"text": "x" * 100})
            assert status == 400 and "longer than the model's context length (16 tokens)" in err["error"]["message"]
            status, err = await post(s, f"{kit.url(sim)}/v1/completions", {"model": "llama", "prompt": "x" * 100})
            assert status == 400 and err["object"] == "error" and err["code"] == 400

    run(body)


def test_openai_chat_and_completions(kit: Any) -> None:
    async def body() -> None:
        async with kit.run(MODEL) as sim, aiohttp.ClientSession() as s:
            u = kit.url(sim)
            msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello there!"}]
            status, chat = await post(s, f"{u}/v1/chat/completions", {"model": "llama", "messages": msgs})
            assert status == 200 and chat["object"] == "chat.completion" and chat["model"] == "llama"
            (choice,) = chat["choices"]
            assert choice["message"]["role"] == "assistant" and choice["finish_reason"] == "stop"
            assert chat["usage"]["completion_tokens"] == 16
            assert chat["usage"]["total_tokens"] == chat["usage"]["prompt_tokens"] + 16
            req = {"model": "llama", "messages": msgs, "max_tokens": 5, "stream": True}
            events = await sse(s, f"{u}/v1/chat/completions", {**req, "stream_options": {"include_usage": True}})
            assert events[-1] == "[DONE]"
            assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
            assert all(e["object"] == "chat.completion.chunk" for e in events[:-1])
            assert events[-2]["choices"] == [] and events[-2]["usage"]["completion_tokens"] == 5
            assert events[-3]["choices"][0]["finish_reason"] == "length"
            streamed = "".join(e["choices"][0]["delta"].get("content", "") for e in events[1:-2])
            _, full = await post(s, f"{u}/v1/chat/completions", {**req, "stream": False})
            assert streamed == full["choices"][0]["message"]["content"]
            status, comp = await post(
                s, f"{u}/v1/completions", {"model": "llama", "prompt": "Once upon", "max_tokens": 3}
            )
            assert status == 200 and comp["object"] == "text_completion" and comp["usage"]["completion_tokens"] == 3
            events = await sse(
                s, f"{u}/v1/completions", {"model": "llama", "prompt": "Once upon", "max_tokens": 3, "stream": True}
            )
            assert "".join(e["choices"][0]["text"] for e in events[:-1]) == comp["choices"][0]["text"]
            assert events[-2]["choices"][0]["finish_reason"] == "length"

    run(body)


def test_metrics_names_and_dcgm(kit: Any) -> None:
    async def body() -> None:
        env = {"POD_NAME": "llama-0-0", "POD_NAMESPACE": "team"}
        async with kit.run([*MODEL, "--enable-metrics", "--tp", "2"], env) as sim, aiohttp.ClientSession() as s:
            u = kit.url(sim)
            await post(s, f"{u}/generate", {"text": "hello " * 40, "sampling_params": {"max_new_tokens": 3}})
            await post(s, f"{u}/generate", {"text": "hello " * 40, "sampling_params": {"max_new_tokens": 3}})
            async with s.get(f"{u}/metrics") as r:
                assert r.status == 200 and r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
                text = await r.text()
            for name in (
                "sglang:num_running_reqs",
                "sglang:num_queue_reqs",
                "sglang:num_used_tokens",
                "sglang:token_usage",
                "sglang:cache_hit_rate",
                "sglang:gen_throughput",
                "sglang:max_total_num_tokens",
                "sglang:utilization",
                "sglang:num_requests_total",
                "sglang:prompt_tokens_total",
                "sglang:generation_tokens_total",
                "sglang:cached_tokens_total",
                "sglang:e2e_request_latency_seconds_bucket",
                "sglang:time_to_first_token_seconds_sum",
                "sglang:inter_token_latency_seconds_count",
                "sglang:queue_time_seconds_bucket",
            ):
                assert f"\n{name}{{" in text, name
            assert "# TYPE sglang:num_aborted_requests_total counter" in text
            # warmup + 2 requests; the second hit the first one's cached prompt
            assert (
                'sglang:num_requests_total{engine_type="unified",is_streaming="false",model_name="llama"} 3.0' in text
            )
            dcgm = [line for line in text.splitlines() if line.startswith("DCGM_FI_DEV_GPU_UTIL{")]
            assert len(dcgm) == 2
            assert 'pod="llama-0-0"' in dcgm[0] and 'namespace="team"' in dcgm[0] and 'container="sglang"' in dcgm[0]

    run(body)


def test_api_key(kit: Any) -> None:
    async def body() -> None:
        async with kit.run([*MODEL, "--api-key", "k", "--enable-metrics"]) as sim, aiohttp.ClientSession() as s:
            u = kit.url(sim)
            assert await get(s, f"{u}/v1/models") == (401, {"error": "Unauthorized"})
            assert (await get(s, f"{u}/v1/models", headers={"Authorization": "Bearer bad"}))[0] == 401
            assert (await get(s, f"{u}/v1/models", headers={"Authorization": "Bearer k"}))[0] == 200
            assert (await post(s, f"{u}/generate", {"text": "x"}))[0] == 401
            for open_path in ("/health", "/health_generate", "/ready", "/metrics"):
                assert (await get(s, u + open_path))[0] == 200, open_path

    run(body)


def test_worker_rank_serves_only_health_and_metrics(kit: Any) -> None:
    async def body() -> None:
        argv = [*MODEL, "--tp", "16", "--nnodes", "2", "--node-rank", "1", "--dist-init-addr", "10.0.0.1:5000"]
        async with kit.run([*argv, "--enable-metrics"]) as sim, aiohttp.ClientSession() as s:
            u = kit.url(sim)
            for path in ("/health", "/health_generate", "/ping"):
                assert (await get(s, u + path))[0] == 200, path
            for path in ("/ready", "/v1/models", "/server_info", "/model_info", "/v1/loads"):
                assert (await get(s, u + path))[0] == 404, path
            assert (await post(s, f"{u}/generate", {"text": "x"}))[0] == 404
            status, text = await get(s, f"{u}/metrics")
            assert status == 200 and "sglang:" not in text
            assert text.count("DCGM_FI_DEV_GPU_UTIL{") == 8

    run(body)


def test_worker_rank_is_unhealthy_while_starting(kit: Any) -> None:
    async def body() -> None:
        argv = [*MODEL, "--tp", "2", "--nnodes", "2", "--node-rank", "1", "--dist-init-addr", "127.0.0.1:1"]
        env = {"SGLANG_SIM_STARTUP_SECONDS": "60"}
        async with kit.run(argv, env, wait_up=False) as sim, aiohttp.ClientSession() as s:
            assert (await get(s, f"{kit.url(sim)}/health"))[0] == 503

    run(body)


def test_requests_can_pin_a_dp_rank(kit: Any) -> None:
    async def body() -> None:
        async with kit.run([*MODEL, "--dp", "2"]) as sim, aiohttp.ClientSession() as s:
            u = kit.url(sim)
            for _ in range(3):
                req = {"text": "x", "sampling_params": {"max_new_tokens": 1}, "data_parallel_rank": 1}
                assert (await post(s, f"{u}/generate", req))[0] == 200
            chat = {"model": "llama", "messages": [{"role": "user", "content": "x"}], "data_parallel_rank": 1}
            assert (await post(s, f"{u}/v1/chat/completions", chat))[0] == 200
            text = (await get(s, f"{u}/server_info"))[1]
            assert text["dp_size"] == 2
            status, err = await post(s, f"{u}/generate", {"text": "x", "data_parallel_rank": 2})
            assert status == 400 and "out of range" in err["error"]["message"]
            queue_counts = sim.ctx.metrics.queue_time.series if sim.ctx.metrics else {}
            per_rank = {dict(k)["dp_rank"]: v.count for k, v in queue_counts.items()}
            assert per_rank["1"] == 4 + 0  # the warmup went to rank 0
            assert per_rank["0"] == 1

    run(body)


def test_queueing_flush_cache_and_abort_on_disconnect(kit: Any) -> None:
    async def body() -> None:
        env = {"SGLANG_SIM_TIME_SCALE": "1", "SGLANG_SIM_DECODE_TOKENS_PER_S": "1000"}
        argv = [*MODEL, "--max-running-requests", "1", "--skip-server-warmup", "--enable-metrics"]
        async with kit.run(argv, env) as sim, aiohttp.ClientSession() as s:
            u = kit.url(sim)
            long_req = {"text": "long", "sampling_params": {"max_new_tokens": 2000}, "stream": True}
            first = asyncio.create_task(sse(s, f"{u}/generate", long_req))
            second = asyncio.create_task(
                post(s, f"{u}/generate", {"text": "short", "sampling_params": {"max_new_tokens": 1}})
            )
            loads = sim.ctx.rt().loads
            await kit.wait_until(
                lambda: (loads()[0].num_running_reqs, loads()[0].num_waiting_reqs) == (1, 1), what="queued"
            )
            status, text = await get(s, f"{u}/flush_cache")
            assert status == 400 and text.startswith("Cache flushed.")
            first.cancel()  # client goes away mid-stream: the request is aborted, the queued one runs
            status, out = await second
            assert status == 200 and out["meta_info"]["completion_tokens"] == 1
            assert (await get(s, f"{u}/flush_cache"))[0] == 200
            _, metrics = await get(s, f"{u}/metrics")
            assert 'sglang:num_aborted_requests_total{engine_type="unified",model_name="llama"} 1.0' in metrics

    run(body)


@pytest.mark.parametrize("path", ["/generate", "/v1/chat/completions", "/v1/completions"])
def test_invalid_json_is_a_400(kit: Any, path: str) -> None:
    async def body() -> None:
        async with (
            kit.run(MODEL) as sim,
            aiohttp.ClientSession() as s,
            s.post(kit.url(sim) + path, data=b"{not json") as r,
        ):
            assert r.status == 400

    run(body)
