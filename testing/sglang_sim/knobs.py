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
    # Faults for the fleet doctor's tests, resolved for this pod (see `knobs_from_env`):
    slowdown: float = 1.0  # SGLANG_SIM_SLOWDOWN (>= 1): prefill and decode take this many times longer
    cache_disabled: bool = False  # SGLANG_SIM_CACHE_DISABLED: no prefix-cache hits (a cold or missing cache)
    bootstrap_down: bool = False  # SGLANG_SIM_BOOTSTRAP_DOWN: a prefill's bootstrap server is not started
    # The replica's shape, so that worker groups of different shapes behave differently:
    slots_per_gpu: int = 0  # SGLANG_SIM_SLOTS_PER_GPU: > 0: default running requests per scheduler = this x tp
    gpu_speed: float = 1.0  # SGLANG_SIM_GPU_SPEED: prefill and decode rates x this (the GPU type; e.g. 0.5)
    # PD disaggregation: the KV handoff from prefill to decode takes prompt tokens x bytes per token / bandwidth
    kv_bytes_per_token: float = 131072.0  # SGLANG_SIM_KV_BYTES_PER_TOKEN: 8B-class model, bf16 (32 x 8 x 128 x 2 x 2)
    kv_transfer_gbps: float = 25.0  # SGLANG_SIM_KV_TRANSFER_GBPS: GB/s per transfer

    def default_running(self, tp_size: int) -> int:
        """Running requests per scheduler without --max-running-requests. SGLang sizes it from the KV pool, which
        grows with the GPUs of the TP group: with SLOTS_PER_GPU set, a tp=4 replica holds twice a tp=2 one's."""
        return self.slots_per_gpu * tp_size if self.slots_per_gpu > 0 else self.max_running

    @property
    def fails(self) -> bool:
        return self.fail_startup.strip().lower() not in FALSY

    def scaled(self, seconds: float) -> float:
        return seconds * self.time_scale

    @property
    def effective_prefill_rate(self) -> float:
        """Tokens per wall-clock second once the time scale is applied."""
        return self.prefill_tokens_per_s * self.gpu_speed / self.time_scale / self.slowdown

    @property
    def effective_decode_rate(self) -> float:
        return self.decode_tokens_per_s * self.gpu_speed / self.time_scale / self.slowdown


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


def _replicas(env: Mapping[str, str], key: str) -> frozenset[str] | None:
    """A comma-separated list of replica indexes; None when unset (the knob then applies to every replica)."""
    raw = env.get(key)
    if raw is None or raw.strip() == "":
        return None
    return frozenset(part.strip() for part in raw.split(",") if part.strip())


def _applies(env: Mapping[str, str], key: str) -> bool:
    """Whether a fault applies to this pod: its list `key` is unset, or names this pod's replica
    (SGLANG_SIM_REPLICA, e.g. from the downward API: `metadata.labels['sglang.ai/replica']`). `engine.env` reaches
    every replica, so this is how one replica of a fleet gets a fault."""
    replicas = _replicas(env, key)
    return replicas is None or env.get("SGLANG_SIM_REPLICA", "").strip() in replicas


def knobs_from_env(env: Mapping[str, str]) -> SimKnobs:
    """The knobs of this pod. SGLANG_SIM_SLOWDOWN applies where SGLANG_SIM_SLOW_REPLICAS (if set) names the pod's
    replica; the prefix cache is disabled by SGLANG_SIM_CACHE_DISABLED (where SGLANG_SIM_COLD_CACHE_REPLICAS, if set,
    names the pod's replica); a prefill's bootstrap server is not started with SGLANG_SIM_BOOTSTRAP_DOWN (where
    SGLANG_SIM_BOOTSTRAP_DOWN_REPLICAS, if set, names the pod's replica)."""
    d = SimKnobs()
    slowdown = _float(env, "SGLANG_SIM_SLOWDOWN", d.slowdown, 1.0)
    cache_disabled = env.get("SGLANG_SIM_CACHE_DISABLED", "").strip().lower() not in FALSY
    bootstrap_down = env.get("SGLANG_SIM_BOOTSTRAP_DOWN", "").strip().lower() not in FALSY
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
        slowdown=slowdown if _applies(env, "SGLANG_SIM_SLOW_REPLICAS") else 1.0,
        cache_disabled=cache_disabled and _applies(env, "SGLANG_SIM_COLD_CACHE_REPLICAS"),
        bootstrap_down=bootstrap_down and _applies(env, "SGLANG_SIM_BOOTSTRAP_DOWN_REPLICAS"),
        slots_per_gpu=_int(env, "SGLANG_SIM_SLOTS_PER_GPU", d.slots_per_gpu, 0),
        gpu_speed=_float(env, "SGLANG_SIM_GPU_SPEED", d.gpu_speed, 0.0, True),
        kv_bytes_per_token=_float(env, "SGLANG_SIM_KV_BYTES_PER_TOKEN", d.kv_bytes_per_token, 0.0),
        kv_transfer_gbps=_float(env, "SGLANG_SIM_KV_TRANSFER_GBPS", d.kv_transfer_gbps, 0.0, True),
    )
