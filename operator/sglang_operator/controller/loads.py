"""In-flight requests per replica, from the worker's `/v1/loads` (running + waiting over all DP ranks).

A load is trusted only when the worker answered the documented shape. Anything else (an error status, HTML, a
number that is not a count, a timeout) is *unknown*, and unknown is not zero: a drain waits for a known zero or for
its `drainTimeoutSeconds`, so a busy replica is never deleted because its load could not be read.
"""

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..observed import ReplicaView
from ..runtime.httpcall import CallFailed, request

LOADS_TIMEOUT_SECONDS = 2.0
LOADS_BUDGET_SECONDS = 10.0
"""All load reads of one pass together end by then: with hundreds of slow workers, the rest stay unknown (callers
list draining replicas first, whose loads decide deletions) and the next pass reads again."""
MAX_REQUESTS_PER_RANK = 1_000_000
"""A count above this is not a request count: the answer is unknown."""


@dataclass(frozen=True)
class Loads:
    known: dict[int, int] = field(default_factory=dict)
    """Replica index -> requests in flight, for replicas whose load was read."""
    unknown: dict[int, str] = field(default_factory=dict)
    """Replica index -> why its load is unknown (method, path, HTTP status; never the worker's words)."""


def _count(rank: dict[str, Any], key: str) -> int:
    value = rank.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_REQUESTS_PER_RANK:
        raise ValueError(f"{key} is not a request count")
    return value


def in_flight_from_loads(payload: Any) -> int:
    """Running + waiting requests over all DP ranks; ValueError for any other shape."""
    if not isinstance(payload, dict):
        raise ValueError(f"expected an object, got {type(payload).__name__}")
    loads = payload.get("loads")
    if not isinstance(loads, list) or not all(isinstance(rank, dict) for rank in loads):
        raise ValueError("'loads' is not a list of objects")
    return sum(_count(rank, "num_running_reqs") + _count(rank, "num_waiting_reqs") for rank in loads)


def read_load(url: str, headers: dict[str, str] | None = None) -> tuple[int | None, str | None]:
    """(in flight, None) or (None, why unknown). A refused connection reads as 0: no process is listening, so
    nothing it held can still complete. A redirect is not followed (the worker's image is the tenant's): unknown."""
    what = f"GET {url}/v1/loads"
    try:
        response = request("GET", f"{url}/v1/loads", deadline_seconds=LOADS_TIMEOUT_SECONDS, headers=headers)
    except CallFailed as exc:
        if exc.not_connected:
            return 0, None
        return None, str(exc)
    if response.status != 200:
        return None, f"{what}: HTTP {response.status}"
    try:
        return in_flight_from_loads(json.loads(response.content)), None
    except (ValueError, RecursionError):
        return None, f"{what}: HTTP 200 with an unexpected answer"


def fetch_in_flight(
    replicas: Iterable[ReplicaView], budget_seconds: float = LOADS_BUDGET_SECONDS, api_key: str | None = None
) -> Loads:
    """A replica without an address has never served: it counts as 0. `api_key`: the workers' key
    (engine.apiKeySecretRef), without which SGLang answers /v1/loads with 401 (an unknown load)."""
    loads = Loads()
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    deadline = time.monotonic() + budget_seconds
    for replica in replicas:
        if replica.url is None:
            loads.known[replica.index] = 0
            continue
        if time.monotonic() >= deadline:
            loads.unknown[replica.index] = f"not read: this pass spent its {budget_seconds:g}s for reading loads"
            continue
        count, why = read_load(replica.url, headers)
        if count is None:
            loads.unknown[replica.index] = why or "unknown"
        else:
            loads.known[replica.index] = count
    return loads
