"""The capacity rule (Little's law), shared by `sglang-operator plan`, the autoscaler and the benchmark.

A replica that serves at most C requests at once, each holding its slot for T seconds, completes C / T requests per
second; a fleet facing Q requests per second therefore needs Q x T / C replicas, plus a headroom fraction for bursts,
rollouts and failures. T is the time a request holds a slot (prefill + decode), never end-to-end latency: queueing
time fed back into T makes the fleet grow without bound.
"""

import math
from typing import TYPE_CHECKING, Any

from .api.releases import parse_version

if TYPE_CHECKING:  # the simulator imports this module and must not pay for pydantic
    from .api.spec import SGLangDeploymentSpec

# Products such as 200 * 1.5 * 1.3 / 64 land a few ulps above an integer; without this guard ceil() adds a replica.
_CEIL_GUARD = 1e-9

DEFAULT_MAX_RUNNING_REQUESTS = 64
"""Running requests the operator assumes per SGLang scheduler when `maxRunningRequests` is unset. SGLang then sizes
the value from the KV pool (2048 to 4096 requests, capped at half the pool's tokens), which the operator cannot see
before the replica runs; a conservative guess over-provisions rather than queues. The simulator's default
(SGLANG_SIM_MAX_RUNNING) is the same number, so the local cluster runs what the operator plans with."""
DEFAULT_CONCURRENCY_PER_RANK = DEFAULT_MAX_RUNNING_REQUESTS

FLOOR_PER_RANK_SINCE = (0, 5, 23)
"""From 0.5.23 each attention-DP rank gets at least one slot (`max(1, max_running_requests // attn_dp_size)`);
before it a flag smaller than the attention-DP size leaves every rank with zero."""


def replicas_exact(qps: float, time_in_server_s: float, concurrency: float, headroom: float = 0.0) -> float:
    """Fractional replicas Q x T x (1 + h) / C; zero load is allowed (it needs zero replicas)."""
    if concurrency <= 0:
        raise ValueError(f"concurrency must be positive, got {concurrency}")
    if qps < 0 or time_in_server_s < 0 or headroom < 0:
        raise ValueError("qps, time in server and headroom must not be negative")
    return qps * time_in_server_s * (1.0 + headroom) / concurrency


def ceil_replicas(exact: float) -> int:
    """Round a fractional replica count up, ignoring float noise just above an integer."""
    return max(0, math.ceil(exact - _CEIL_GUARD))


def replicas_for_load(qps: float, time_in_server_s: float, concurrency: float, headroom: float = 0.0) -> int:
    """Replicas for a load: ceil(Q x T x (1 + headroom) / C). 200 QPS, 1.5 s, C=64 -> 5 (7 with 30 % headroom)."""
    if qps <= 0 or time_in_server_s <= 0 or concurrency <= 0:
        raise ValueError("qps, time in server and concurrency must be positive")
    if headroom < 0:
        raise ValueError(f"headroom must not be negative, got {headroom}")
    return ceil_replicas(replicas_exact(qps, time_in_server_s, concurrency, headroom))


def running_requests_per_rank(max_running_requests: int | None, attention_dp: int, version: str) -> int:
    """Requests one SGLang scheduler runs at once, as SGLang sizes it.

    With `--max-running-requests M`, SGLang divides M across the attention-DP ranks (0.5.23
    `kv_cache_configurator.resolve_max_num_reqs`: `max(1, M // attn_dp_size)`; 0.5.9 `model_runner`:
    `M // dp_size` under `--enable-dp-attention`), so M stays the replica's total. In-process DP replicas are
    whole schedulers with attention DP 1: each keeps M. Without the flag each scheduler sizes its own from its KV
    pool, per scheduler and never divided: the operator assumes DEFAULT_MAX_RUNNING_REQUESTS.
    """
    if max_running_requests is None:
        return DEFAULT_MAX_RUNNING_REQUESTS
    per_rank = max_running_requests // max(1, attention_dp)
    if not version or parse_version(version) >= FLOOR_PER_RANK_SINCE:
        per_rank = max(1, per_rank)
    return per_rank


def schedulers_per_replica(dp: int, attention_dp: int) -> int:
    """Schedulers behind one replica's HTTP server: attention-DP ranks, or in-process DP replicas (never both)."""
    return max(1, attention_dp) if attention_dp > 1 else max(1, dp)


def sglang_concurrency(max_running_requests: int | None, dp: int, attention_dp: int, version: str) -> int:
    """Requests one replica runs at once: per-scheduler slots x schedulers, exactly SGLang's arithmetic."""
    return running_requests_per_rank(max_running_requests, attention_dp, version) * schedulers_per_replica(
        dp, attention_dp
    )


def concurrency_per_replica(spec: "SGLangDeploymentSpec", measured: int | None = None) -> int:
    """C of the capacity rule for a spec: the explicit target, else what SGLang runs with `maxRunningRequests`,
    else a measurement, else the default per scheduler x schedulers.

    The one function the autoscaler (through `topology`), `plan` and status use; never below 1, so a replica that
    SGLang would start with zero slots (a flag below the attention-DP size before 0.5.23) still divides.
    """
    explicit = spec.autoscaling.targets.concurrency_per_replica
    if explicit is not None and explicit > 0:
        return explicit
    par, engine = spec.parallelism, spec.engine
    if engine.max_running_requests is None and measured is not None and measured > 0:
        return measured
    return max(1, sglang_concurrency(engine.max_running_requests, par.dp, par.attention_dp, engine.sglang_version))


def plan_for_spec(spec: "SGLangDeploymentSpec", qps: float, latency: float, headroom: float = 0.3) -> dict[str, Any]:
    """What `sglang-operator plan -f SPEC --qps Q --latency T` reports: replicas for the load with the spec's own
    concurrency (as SGLang computes it) and the GPUs they take. Raises ValueError on non-positive load."""
    c = concurrency_per_replica(spec)
    replicas = replicas_for_load(qps, latency, c, headroom)
    gpus_per_replica = spec.parallelism.tp * spec.parallelism.dp
    return {
        "qps": qps,
        "latencySeconds": latency,
        "headroom": headroom,
        "concurrencyPerReplica": c,
        "replicas": replicas,
        "gpusPerReplica": gpus_per_replica,
        "totalGPUs": replicas * gpus_per_replica,
    }
