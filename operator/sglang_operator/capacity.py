"""The capacity rule (Little's law), shared by `sglang-operator plan`, the autoscaler and the benchmark.

A replica that serves at most C requests at once, each holding its slot for T seconds, completes C / T requests per
second; a fleet facing Q requests per second therefore needs Q x T / C replicas, plus a headroom fraction for bursts,
rollouts and failures. T is the time a request holds a slot (prefill + decode), never end-to-end latency: queueing
time fed back into T makes the fleet grow without bound.
"""

import math

from .api.spec import SGLangDeploymentSpec

# Products such as 200 * 1.5 * 1.3 / 64 land a few ulps above an integer; without this guard ceil() adds a replica.
_CEIL_GUARD = 1e-9

# SGLang sizes max_running_requests from the KV pool when the flag is absent; without a measurement the autoscaler
# needs some C, and a conservative one over-provisions rather than queues.
DEFAULT_CONCURRENCY_PER_RANK = 32


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


def concurrency_per_replica(spec: SGLangDeploymentSpec, measured: int | None = None) -> int:
    """C for one replica: the explicit target, else maxRunningRequests x DP ranks, else a measurement, else a default.

    `maxRunningRequests` is per DP rank; a replica has `dp` in-process groups or `attentionDP` attention ranks.
    """
    explicit = spec.autoscaling.targets.concurrency_per_replica
    if explicit is not None and explicit > 0:
        return explicit
    ranks = max(1, spec.parallelism.dp) * max(1, spec.parallelism.attention_dp)
    per_rank = spec.engine.max_running_requests
    if per_rank is not None and per_rank > 0:
        return per_rank * ranks
    if measured is not None and measured > 0:
        return measured
    return DEFAULT_CONCURRENCY_PER_RANK * ranks
