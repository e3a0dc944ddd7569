"""Simulation knobs read from the environment (pods set them through `engine.env`).

Parsed once, purely, from a mapping so tests pass a dict. Bad values fail start-up loudly rather than being
silently replaced: a typo in a test's environment should not quietly change the timing being measured.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

FALSY = frozenset({"", "0", "false", "no", "off"})


@dataclass(frozen=True)
class SimKnobs:
    startup_seconds: float = 2.0  # SGLANG_SIM_STARTUP_SECONDS: weight load + graph capture before Up
    prefill_tokens_per_s: float = 20000.0  # SGLANG_SIM_PREFILL_TOKENS_PER_S (per request)
    decode_tokens_per_s: float = 100.0  # SGLANG_SIM_DECODE_TOKENS_PER_S (per request)
    output_tokens: int = 16  # SGLANG_SIM_OUTPUT_TOKENS: length when the request sets no max tokens
    max_running: int = 64  # SGLANG_SIM_MAX_RUNNING: stands in for --max-running-requests when absent
    max_total_tokens: int = 200000  # SGLANG_SIM_MAX_TOTAL_TOKENS: KV pool per DP rank (--max-total-tokens wins)
    fail_startup: str = ""  # SGLANG_SIM_FAIL_STARTUP: "" = start; "oom", "nccl" or anything else = crash
    time_scale: float = 1.0  # SGLANG_SIM_TIME_SCALE: multiplies every simulated duration
    drain_seconds: float = 5.0  # SGLANG_SIM_DRAIN_SECONDS: SIGTERM grace for in-flight requests (not scaled)
    context_length: int = 32768  # SGLANG_SIM_CONTEXT_LENGTH: stands in for the model config's length
    gpu_model: str = "NVIDIA H200"  # SGLANG_SIM_GPU_MODEL: modelName label of DCGM_FI_DEV_GPU_UTIL
    health_generation: bool = True  # SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION (SGLang's own variable)

    @property
    def fails(self) -> bool:
        return self.fail_startup.strip().lower() not in FALSY

    def scaled(self, seconds: float) -> float:
        return seconds * self.time_scale

    @property
    def effective_prefill_rate(self) -> float:
        """Tokens per wall-clock second once the time scale is applied."""
        return self.prefill_tokens_per_s / self.time_scale

    @property
    def effective_decode_rate(self) -> float:
        return self.decode_tokens_per_s / self.time_scale


def _float(env: Mapping[str, str], key: str, default: float, minimum: float, strict: bool = False) -> float:
    raw = env.get(key)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError as e:
        raise ValueError(f"{key}={raw!r} is not a number") from e
    if value < minimum or (strict and value == minimum):
        raise ValueError(f"{key}={raw!r} must be {'>' if strict else '>='} {minimum}")
    return value


def _int(env: Mapping[str, str], key: str, default: int, minimum: int) -> int:
    raw = env.get(key)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError as e:
        raise ValueError(f"{key}={raw!r} is not an integer") from e
    if value < minimum:
        raise ValueError(f"{key}={raw!r} must be >= {minimum}")
    return value


def knobs_from_env(env: Mapping[str, str]) -> SimKnobs:
    d = SimKnobs()
    return SimKnobs(
        startup_seconds=_float(env, "SGLANG_SIM_STARTUP_SECONDS", d.startup_seconds, 0.0),
        prefill_tokens_per_s=_float(env, "SGLANG_SIM_PREFILL_TOKENS_PER_S", d.prefill_tokens_per_s, 0.0, True),
        decode_tokens_per_s=_float(env, "SGLANG_SIM_DECODE_TOKENS_PER_S", d.decode_tokens_per_s, 0.0, True),
        output_tokens=_int(env, "SGLANG_SIM_OUTPUT_TOKENS", d.output_tokens, 1),
        max_running=_int(env, "SGLANG_SIM_MAX_RUNNING", d.max_running, 1),
        max_total_tokens=_int(env, "SGLANG_SIM_MAX_TOTAL_TOKENS", d.max_total_tokens, 1),
        fail_startup=env.get("SGLANG_SIM_FAIL_STARTUP", ""),
        time_scale=_float(env, "SGLANG_SIM_TIME_SCALE", d.time_scale, 0.0, True),
        drain_seconds=_float(env, "SGLANG_SIM_DRAIN_SECONDS", d.drain_seconds, 0.0),
        context_length=_int(env, "SGLANG_SIM_CONTEXT_LENGTH", d.context_length, 1),
        gpu_model=env.get("SGLANG_SIM_GPU_MODEL", d.gpu_model) or d.gpu_model,
        health_generation=env.get("SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION", "true").strip().lower() not in FALSY,
    )
