"""In-flight requests per replica, from the worker's `/v1/loads` (running + waiting over all DP ranks)."""

from collections.abc import Iterable

import requests

from .observed import ReplicaView

LOADS_TIMEOUT_SECONDS = 2.0


def in_flight_from_loads(payload: dict[str, object]) -> int:
    loads = payload.get("loads")
    if not isinstance(loads, list):
        return 0
    return sum(int(rank.get("num_running_reqs", 0)) + int(rank.get("num_waiting_reqs", 0)) for rank in loads)


def fetch_in_flight(replicas: Iterable[ReplicaView]) -> dict[int, int]:
    """A replica that does not answer has nothing in flight that could still complete: it counts as 0."""
    result: dict[int, int] = {}
    for replica in replicas:
        if replica.url is None:
            result[replica.index] = 0
            continue
        try:
            response = requests.get(f"{replica.url}/v1/loads", timeout=LOADS_TIMEOUT_SECONDS)
            result[replica.index] = in_flight_from_loads(response.json()) if response.status_code == 200 else 0
        except (requests.RequestException, ValueError):
            result[replica.index] = 0
    return result
