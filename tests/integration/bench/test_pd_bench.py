"""Smoke test of `bench/pd.py`: colocated vs prefill/decode at equal GPUs on the simulator, the real smg router.

Runs the benchmark itself (a subprocess, as a user would, as the other benchmark smoke tests do; the script imports
its sibling modules as scripts do, so it is not imported here): the shipped Mooncake trace's first seconds through a
colocated fleet of two replicas and a PD fleet of one prefill and one decode, at time scale 0.05 (seconds). No
request fails, each PD request is counted by one prefill and one decode, the measured inter-token latency is the
model's 1 / decode rate, and the parameters the simulators got keep the trace's prefill and KV-transfer times.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
BENCH = REPO / "bench" / "pd.py"
MOONCAKE = REPO.parent / "shared" / "traces" / "mooncake_synthetic_trace.jsonl"
SMG = Path(sys.executable).parent / "smg"


def test_layouts_must_use_equal_gpus() -> None:
    for layouts, message in (
        ("colocated:4x1,pd:1x1+1x1", "layouts use different GPU counts: colocated:4x1=4, pd:1x1+1x1=2"),
        ("pd:2x1", "a PD layout is pd:PREFILL+DECODE"),
        ("colocated:0x1", "is not COUNTxTP"),
    ):
        out = subprocess.run([sys.executable, str(BENCH), "--layouts", layouts], capture_output=True, text=True,
                             timeout=60)  # fmt: skip
        assert out.returncode == 2 and message in out.stderr, out.stderr


@pytest.mark.skipif(not MOONCAKE.exists(), reason="the shipped Mooncake trace is not here")
@pytest.mark.skipif(not SMG.exists() and shutil.which("smg") is None, reason="smg is not installed")
def test_pd_bench_smoke() -> None:
    out = subprocess.run(
        [sys.executable, str(BENCH), "--json", "--trace", str(MOONCAKE), "--layouts", "colocated:2x1,pd:1x1+1x1",
         "--trace-seconds", "6", "--time-scale", "0.05", "--max-seconds", "10"],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    result = json.loads(out.stdout)
    model, env = result["model"], result["model"]["sim_env"]
    assert any("not a GPU measurement" in line for line in result["about"])

    # One simulator token stands for 32 prompt tokens: its rates keep the trace's prefill and transfer times.
    scale = model["trace_tokens_per_sim_token"]
    assert scale == 32
    prompt = 12000
    sim_tokens = math.ceil(prompt / scale)
    assert sim_tokens / float(env["SGLANG_SIM_PREFILL_TOKENS_PER_S"]) == pytest.approx(prompt / model["prefill_tps"])
    transfer = sim_tokens * float(env["SGLANG_SIM_KV_BYTES_PER_TOKEN"]) / float(env["SGLANG_SIM_KV_TRANSFER_GBPS"])
    assert transfer / 1e9 == pytest.approx(prompt * model["kv_bytes_per_token"] / model["kv_transfer_gbps"] / 1e9)
    assert float(env["SGLANG_SIM_DECODE_TOKENS_PER_S"]) == model["decode_tps"] == 100.0  # output is not scaled
    assert model["kv_pool_sim_tokens_per_gpu"] == int(60 * 2**30 / 131072 / scale)

    colocated, pd = result["layouts"]
    n = result["run"]["requests"]
    assert n > 5
    for r in (colocated, pd):
        assert r["requests"] == n and r["failed"] == 0, r["errors"]
        assert r["gpus"] == 2 and r["output_tokens_per_s"] > 0
        assert r["output_tokens_per_s_per_gpu"] == pytest.approx(r["output_tokens_per_s"] / 2)
        assert 5.0 < r["itl_ms"]["p50"] < 20.0  # the model's 10 ms a token, give or take the chunking and the CPU
        assert r["ttft_s"]["p50"] <= r["ttft_s"]["p90"] <= r["ttft_s"]["p99"]
    assert sum(colocated["served"]["regular"]) == n
    assert pd["served"] == {"prefill": [n], "decode": [n]}  # one prefill and one decode count each request
    table = result["table"]
    assert "| measure (simulated time) | colocated:2x1 | pd:1x1+1x1 | pd:1x1+1x1 / colocated:2x1 |" in table
    assert f"| requests (failed) | {n} (0) | {n} (0) | |" in table
