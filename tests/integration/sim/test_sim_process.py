"""The simulator as a process: the ready log line, a simulated start-up crash, graceful SIGTERM."""

from __future__ import annotations

import json
import signal
import threading
import time
import urllib.request
from typing import Any

ARGS = ["--model-path", "org/model", "--host", "127.0.0.1"]


def test_ready_log_then_graceful_sigterm_finishes_in_flight(procs: Any, kit: Any) -> None:
    port = kit.free_port()
    env = {"SGLANG_SIM_TIME_SCALE": "1", "SGLANG_SIM_DECODE_TOKENS_PER_S": "200"}
    p = procs.sim([*ARGS, "--port", str(port), "--skip-server-warmup"], env)
    kit.wait_http(f"http://127.0.0.1:{port}/ready")
    result: dict[str, Any] = {}

    def request() -> None:  # 100 tokens at 200 tok/s: in flight for ~0.5 s
        body = json.dumps({"text": "hi", "sampling_params": {"max_new_tokens": 100}}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{port}/generate", data=body, method="POST")
        with urllib.request.urlopen(req, timeout=10) as resp:
            result["status"] = resp.status
            result["body"] = json.loads(resp.read())

    t = threading.Thread(target=request)
    t.start()
    deadline = time.monotonic() + 5
    while "running" not in result and time.monotonic() < deadline:  # wait until the server holds it
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/loads", timeout=2) as resp:
            if json.loads(resp.read())["loads"][0]["num_running_reqs"] == 1:
                result["running"] = True
    assert result.get("running"), "the request never started running"
    p.send_signal(signal.SIGTERM)
    t.join(timeout=10)
    assert p.wait(timeout=10) == 0
    assert result["status"] == 200 and result["body"]["meta_info"]["completion_tokens"] == 100
    log = procs.log(p)
    assert "The server is fired up and ready to roll!" in log
    assert kit.http_status(f"http://127.0.0.1:{port}/health") == 0  # no longer listening


def test_simulated_startup_failure_exits_1(procs: Any, kit: Any) -> None:
    port = kit.free_port()
    p = procs.sim([*ARGS, "--port", str(port)], {"SGLANG_SIM_FAIL_STARTUP": "oom", "SGLANG_SIM_STARTUP_SECONDS": "0.2"})
    assert p.wait(timeout=15) == 1
    log = procs.log(p)
    assert "Scheduler hit an exception" in log and "CUDA out of memory" in log
    assert "ready to roll" not in log
