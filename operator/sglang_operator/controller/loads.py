"""In-flight requests per replica, from the worker's `/v1/loads` (running + waiting over all DP ranks).

A load is trusted only when the worker answered the documented shape. Anything else (an error status, HTML, a
number that is not a count, a list of no rank, a timeout) is *unknown*, and unknown is not zero: a drain waits for a
known zero or for its `drainTimeoutSeconds`, so a busy replica is never deleted because its load could not be read.

A prefill/decode worker holds requests that running + waiting do not count: a prefill's finished prompts whose KV is
still being sent (its inflight queue). So a prefill or decode replica's load is read from
`/v1/loads?include=disagg`, and it is empty only when each of the numbers below is zero on every DP rank (SGLang's
`DisaggregationMetrics`, `srt/managers/load_snapshot.py` in 0.5.23): a prefill's bootstrap and inflight queues, a
decode's prealloc, transfer and retracted queues. The numbers of the other role are always zero, and all are
checked, so a server started in the wrong mode is still only deleted once it is empty.
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
CORE_COUNTS = ("num_running_reqs", "num_waiting_reqs")
DISAGG_SECTION = "disaggregation"
"""The key of the `disagg` section in each rank's load (`include=disagg` names the section, not the key)."""
DISAGG_COUNTS = (
    ("prefill_bootstrap_queue_reqs", "prefill_prealloc_queue_reqs"),
    ("prefill_inflight_queue_reqs",),
    ("decode_prealloc_queue_reqs",),
    ("decode_transfer_queue_reqs",),
    ("decode_retracted_queue_reqs",),
)
"""The request counts of the `disaggregation` section, each with its older names: SGLang 0.5.9 to 0.5.11 call the
prefill's bootstrap queue `prefill_prealloc_queue_reqs`."""


@dataclass(frozen=True)
class Loads:
    known: dict[int, int] = field(default_factory=dict)
    """Replica index -> requests in flight, for replicas whose load was read (a prefill/decode replica's: the sum of
    its counts, which may count a request twice but is zero exactly when each count is)."""
    unknown: dict[int, str] = field(default_factory=dict)
    """Replica index -> why its load is unknown (method, path, HTTP status; never the worker's words)."""
    busy: dict[int, str] = field(default_factory=dict)
    """Replica index -> the numbers of a prefill/decode load that are not zero (`num_running_reqs=2,
    prefill_inflight_queue_reqs=1`), for the event of a drain that timed out."""


def _count(rank: dict[str, Any], key: str) -> int:
    value = rank.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_REQUESTS_PER_RANK:
        raise ValueError(f"{key} is not a request count")
    return value


def _disagg_counts(rank: dict[str, Any]) -> dict[str, int]:
    """A rank's `disaggregation` request counts by the name the worker used; ValueError if any is missing."""
    section = rank.get(DISAGG_SECTION)
    if not isinstance(section, dict):
        raise ValueError(f"'{DISAGG_SECTION}' is not an object")
    counts = {}
    for names in DISAGG_COUNTS:
        name = next((n for n in names if n in section), None)
        if name is None:
            raise ValueError(f"'{DISAGG_SECTION}' has no {names[0]}")
        counts[name] = _count(section, name)
    return counts


def counts_from_loads(payload: Any, disagg: bool = False) -> dict[str, int]:
    """Each request count summed over all DP ranks (at least one): running and waiting, and with `disagg` the queues
    of the `disaggregation` section (each required); ValueError for any other shape."""
    if not isinstance(payload, dict):
        raise ValueError(f"expected an object, got {type(payload).__name__}")
    loads = payload.get("loads")
    if not isinstance(loads, list) or not all(isinstance(rank, dict) for rank in loads):
        raise ValueError("'loads' is not a list of objects")
    if not loads:  # a server has at least one rank: an empty list says nothing of what it holds
        raise ValueError("'loads' lists no rank")
    totals = dict.fromkeys(CORE_COUNTS, 0)
    for rank in loads:
        counts = {key: _count(rank, key) for key in CORE_COUNTS}
        if disagg:
            if not all(key in rank for key in CORE_COUNTS):
                raise ValueError("a rank has no running or waiting count")
            counts.update(_disagg_counts(rank))
        for key, value in counts.items():
            totals[key] = totals.get(key, 0) + value
    return totals


def in_flight_from_loads(payload: Any) -> int:
    """Running + waiting requests over all DP ranks; ValueError for any other shape."""
    return sum(counts_from_loads(payload).values())


def read_counts(
    url: str, headers: dict[str, str] | None = None, disagg: bool = False
) -> tuple[dict[str, int] | None, str | None]:
    """(the request counts, None) or (None, why unknown): `/v1/loads`, or `/v1/loads?include=disagg` for a
    prefill/decode worker. A refused connection reads as no request at all: no process is listening, so nothing it
    held can still complete. A redirect is not followed (the worker's image is the tenant's): unknown."""
    params = {"include": "disagg"} if disagg else None
    what = f"GET {url}/v1/loads" + ("?include=disagg" if disagg else "")
    try:
        response = request(
            "GET", f"{url}/v1/loads", deadline_seconds=LOADS_TIMEOUT_SECONDS, headers=headers, params=params
        )
    except CallFailed as exc:
        if exc.not_connected:
            return {}, None
        return None, str(exc)
    if response.status != 200:
        return None, f"{what}: HTTP {response.status}"
    try:
        return counts_from_loads(json.loads(response.content), disagg), None
    except (ValueError, RecursionError):
        return None, f"{what}: HTTP 200 with an unexpected answer"


def read_load(url: str, headers: dict[str, str] | None = None) -> tuple[int | None, str | None]:
    """(in flight, None) or (None, why unknown), from `/v1/loads` (`read_counts`)."""
    counts, why = read_counts(url, headers)
    return (None, why) if counts is None else (sum(counts.values()), None)


def nonzero(counts: dict[str, int]) -> str:
    """The counts that are not zero, as `name=value` (what keeps a drain waiting). Pure."""
    return ", ".join(f"{name}={value}" for name, value in counts.items() if value)


def fetch_in_flight(
    replicas: Iterable[ReplicaView],
    budget_seconds: float = LOADS_BUDGET_SECONDS,
    api_key: str | None = None,
    disagg: bool = False,
) -> Loads:
    """A replica without an address has never served: it counts as 0. `api_key`: the workers' key
    (engine.apiKeySecretRef), without which SGLang answers /v1/loads with 401 (an unknown load). `disagg`: the
    replicas are prefill or decode servers (`read_counts`); their numbers that are not zero go to `busy`."""
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
        counts, why = read_counts(replica.url, headers, disagg)
        if counts is None:
            loads.unknown[replica.index] = why or "unknown"
            continue
        loads.known[replica.index] = sum(counts.values())
        if disagg and loads.known[replica.index]:
            loads.busy[replica.index] = nonzero(counts)
    return loads
