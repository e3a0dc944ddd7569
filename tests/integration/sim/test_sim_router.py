"""The real smg router in front of two simulator processes: registration, routing, cache-aware stickiness."""

from __future__ import annotations

import json
import re
import shutil
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest

SMG = Path(sys.executable).parent / "smg"


def post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 200
        result: dict[str, Any] = json.loads(resp.read())
        return result


def served(worker: str) -> float:
    """Requests a simulator finished (warmup excluded), from its /metrics."""
    with urllib.request.urlopen(f"{worker}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    total = sum(
        float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith("sglang:num_requests_total{")
    )
    return total - 1


@pytest.mark.skipif(not SMG.exists() and shutil.which("smg") is None, reason="smg is not installed")
def test_smg_routes_generate_and_chat_through_simulators(procs: Any, kit: Any) -> None:
    ports = [kit.free_port() for _ in range(2)]
    workers = [f"http://127.0.0.1:{p}" for p in ports]
    for port in ports:
        procs.sim(["--model-path", "org/model", "--served-model-name", "sim-model", "--host", "127.0.0.1",
                   "--port", str(port), "--enable-metrics"])  # fmt: skip
    for w in workers:
        kit.wait_http(f"{w}/ready")
    router_port, prom_port = kit.free_port(), kit.free_port()
    router = f"http://127.0.0.1:{router_port}"
    smg = str(SMG) if SMG.exists() else "smg"
    procs.start(
        [smg, "launch", "--host", "127.0.0.1", "--port", str(router_port), "--worker-urls", *workers,
         "--policy", "cache_aware", "--prometheus-host", "127.0.0.1", "--prometheus-port", str(prom_port),
         "--health-check-interval-secs", "2", "--worker-startup-check-interval", "2", "--log-level", "warn",
         "--shutdown-grace-period-secs", "1"]
    )  # fmt: skip
    kit.wait_http(f"{router}/readiness", timeout=20)

    with urllib.request.urlopen(f"{router}/v1/models", timeout=5) as resp:
        assert [m["id"] for m in json.loads(resp.read())["data"]] == ["sim-model"]
    out = post(f"{router}/generate", {"text": "Hello from the router", "sampling_params": {"max_new_tokens": 4}})
    assert out["meta_info"]["completion_tokens"] == 4
    chat = post(
        f"{router}/v1/chat/completions",
        {"model": "sim-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3},
    )
    assert chat["object"] == "chat.completion" and chat["usage"]["completion_tokens"] == 3

    before = [served(w) for w in workers]
    prompt = "A long shared system prompt about Kubernetes operators. " * 8
    for _ in range(6):
        post(f"{router}/generate", {"text": prompt, "sampling_params": {"max_new_tokens": 2}})
    gained = sorted(served(w) - b for w, b in zip(workers, before, strict=True))
    assert gained == [0, 6], "cache_aware must keep an identical prompt on one worker"
    assert sum(before) == 2  # the first two requests went through a worker each (or both to one)


def register(router: str, body: dict[str, Any]) -> None:
    req = urllib.request.Request(
        f"{router}/workers", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 202


def stream(url: str, body: dict[str, Any]) -> list[str]:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 200
        return [line.decode().strip() for line in resp if line.startswith(b"data: ")]


@pytest.mark.skipif(not SMG.exists() and shutil.which("smg") is None, reason="smg is not installed")
def test_smg_in_pd_mode_pairs_a_prefill_and_a_decode_simulator(procs: Any, kit: Any) -> None:
    """smg --pd-disaggregation sends each request to the prefill and the decode with the same room; the decode gets
    the KV through the prefill's bootstrap port and answers; each role counts each request once and logs its room."""
    prefill_port, decode_port, bootstrap_port = kit.free_port(), kit.free_port(), kit.free_port()
    common = [
        "--model-path",
        "org/model",
        "--served-model-name",
        "sim-model",
        "--host",
        "127.0.0.1",
        "--enable-metrics",
    ]
    prefill = procs.sim([*common, "--port", str(prefill_port), "--disaggregation-mode", "prefill",
                         "--disaggregation-bootstrap-port", str(bootstrap_port)])  # fmt: skip
    decode = procs.sim([*common, "--port", str(decode_port), "--disaggregation-mode", "decode"])
    workers = {"prefill": f"http://127.0.0.1:{prefill_port}", "decode": f"http://127.0.0.1:{decode_port}"}
    for w in workers.values():
        kit.wait_http(f"{w}/ready")
    kit.wait_http(f"http://127.0.0.1:{bootstrap_port}/health")
    router_port, prom_port = kit.free_port(), kit.free_port()
    router = f"http://127.0.0.1:{router_port}"
    smg = str(SMG) if SMG.exists() else "smg"
    procs.start(
        [smg, "launch", "--pd-disaggregation", "--host", "127.0.0.1", "--port", str(router_port),
         "--prefill-policy", "round_robin", "--decode-policy", "round_robin",
         "--prometheus-host", "127.0.0.1", "--prometheus-port", str(prom_port), "--health-check-interval-secs", "2",
         "--worker-startup-check-interval", "2", "--log-level", "warn", "--shutdown-grace-period-secs", "1"]
    )  # fmt: skip
    kit.wait_http(f"{router}/health", timeout=20)
    register(router, {"url": workers["prefill"], "runtime": "sglang", "worker_type": "prefill",
                      "bootstrap_port": bootstrap_port})  # fmt: skip
    register(router, {"url": workers["decode"], "runtime": "sglang", "worker_type": "decode"})
    kit.wait_http(f"{router}/readiness", timeout=20)

    out = post(f"{router}/generate", {"text": "Hello through PD", "sampling_params": {"max_new_tokens": 5}})
    assert out["meta_info"]["completion_tokens"] == 5  # decode's answer
    chat = post(
        f"{router}/v1/chat/completions",
        {"model": "sim-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3},
    )
    assert chat["usage"]["completion_tokens"] == 3
    events = stream(
        f"{router}/v1/chat/completions",
        {"model": "sim-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "stream": True},
    )
    assert events[-1] == "data: [DONE]" and len(events) >= 3
    assert [served(w) for w in workers.values()] == [3, 3]  # one prefill and one decode count each request once
    for w in workers.values():
        with urllib.request.urlopen(f"{w}/metrics", timeout=5) as resp:
            text = resp.read().decode()
        assert "sglang:num_transfer_failed_reqs_total" not in text
        assert "sglang:num_bootstrap_failed_reqs_total" not in text
    rooms = {
        role: set(re.findall(r"disaggregation_mode=\w+ .*bootstrap_room=(\d+)", procs.log(p)))
        for role, p in (("prefill", prefill), ("decode", decode))
    }
    assert len(rooms["prefill"]) == 3 and rooms["prefill"] == rooms["decode"]
    with urllib.request.urlopen(f"http://127.0.0.1:{prom_port}/metrics", timeout=5) as resp:
        router_metrics = resp.read().decode()
    failures = [
        line
        for line in router_metrics.splitlines()
        if line.startswith("smg_pd_rendezvous_failures_total") and not line.endswith(" 0")
    ]
    assert not failures, failures
