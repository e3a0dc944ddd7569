"""A replica's capacity and speed follow its shape: without --max-running-requests a tp=4 server runs twice the
requests of a tp=2 one when SGLANG_SIM_SLOTS_PER_GPU is set (SGLang sizes the default from the KV pool, which
grows with the TP group), and SGLANG_SIM_GPU_SPEED scales its token rates (the GPU type)."""

from __future__ import annotations

import asyncio

import pytest

from sglang_sim.knobs import knobs_from_env
from tests.support.sim.fixtures import run_sim

MODEL = ["--model-path", "m"]


@pytest.mark.parametrize(("tp", "expected"), [(1, 8), (2, 16), (4, 32)])
def test_default_running_requests_grow_with_tp(tp: int, expected: int) -> None:
    async def body() -> None:
        async with run_sim([*MODEL, "--tp-size", str(tp)], {"SGLANG_SIM_SLOTS_PER_GPU": "8"}) as sim:
            assert sim.cap.max_running_per_rank == expected

    asyncio.run(body())


def test_an_explicit_flag_wins_and_the_knob_is_off_by_default() -> None:
    async def body() -> None:
        flag = [*MODEL, "--tp-size", "4", "--max-running-requests", "12"]
        async with run_sim(flag, {"SGLANG_SIM_SLOTS_PER_GPU": "8"}) as sim:
            assert sim.cap.max_running_per_rank == 12
        async with run_sim([*MODEL, "--tp-size", "4"], {"SGLANG_SIM_MAX_RUNNING": "5"}) as sim:
            assert sim.cap.max_running_per_rank == 5

    asyncio.run(body())


def test_gpu_speed_scales_prefill_and_decode() -> None:
    base = knobs_from_env({})
    slow = knobs_from_env({"SGLANG_SIM_GPU_SPEED": "0.5"})
    assert slow.effective_decode_rate == pytest.approx(base.effective_decode_rate / 2)
    assert slow.effective_prefill_rate == pytest.approx(base.effective_prefill_rate / 2)
    with pytest.raises(ValueError, match="SGLANG_SIM_GPU_SPEED"):
        knobs_from_env({"SGLANG_SIM_GPU_SPEED": "0"})
