"""The real smg router in front of two simulator processes: registration, routing, cache-aware stickiness."""

from __future__ import annotations

import json
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
