"""Whether a prefill replica's bootstrap server accepts: the port a decode server reaches it on to fetch its KV.

smg does not check it (a closed bootstrap port only counts `smg_pd_rendezvous_failures_total{phase="probe"}`, the
worker stays ready: shared/reference/pd.md), so a prefill whose bootstrap server is not up would fail every request
paired with it. The operator registers a prefill only once `GET http://<rank-0 pod IP>:<bootstrap port>/health`
answers 200 (SGLang's `CommonKVBootstrapServer`), read here with one deadline for the whole pass, like the loads.
Anything else (a refused connection, a timeout, another status) is "not yet". Deciding who is routed is
`steps.decide`; this only reads.
"""

import time
from collections.abc import Iterable, Mapping
from typing import Any

from ..observed import ReplicaView
from ..render.workers import BOOTSTRAP_PORT_NAME
from ..runtime.httpcall import CallFailed, request
from .fleet import GroupPass

BOOTSTRAP_TIMEOUT_SECONDS = 2.0
BOOTSTRAP_BUDGET_SECONDS = 5.0
"""All bootstrap reads of one pass together end by then; a replica not read is not yet routed (the next pass reads
again)."""
_MAX_ANSWER_BYTES = 4096
"""SGLang answers `OK`; a longer answer is cut off, and a status of 200 is all that is read."""


def bootstrap_port(pod: Mapping[str, Any] | None, default: int) -> int:
    """The port a prefill pod declares as `bootstrap` (a replica keeps the port it was started with while a new
    revision rolls out), else the spec's. Pure."""
    for container in ((pod or {}).get("spec") or {}).get("containers") or []:
        for port in container.get("ports") or []:
            number = port.get("containerPort")
            if port.get("name") == BOOTSTRAP_PORT_NAME and isinstance(number, int) and 0 < number < 65536:
                return number
    return default


def prefill_ports(
    groups: Iterable[GroupPass], pods_by_name: Mapping[str, Mapping[str, Any]], default: int
) -> dict[str, int]:
    """Replica URL -> its bootstrap port, for every prefill replica with an address. Pure."""
    ports = {}
    for group in groups:
        if group.group.role != "prefill":
            continue
        for replica in group.replicas:
            if replica.url is not None and replica.rank0 is not None:
                ports[replica.url] = bootstrap_port(pods_by_name.get(replica.rank0.name), default)
    return ports


def to_probe(groups: Iterable[GroupPass], ports: Mapping[str, int], listed: set[str]) -> list[ReplicaView]:
    """The prefill replicas whose bootstrap decides whether they are routed now: ready, not leaving, and listed by
    no router (`steps.decide` keeps routing a prefill a router already lists). Pure."""
    return [
        r for g in groups if g.group.role == "prefill" for r in g.replicas
        if r.url in ports and r.url not in listed and r.ready and r.draining_since is None
    ]  # fmt: skip


def _answers(url: str) -> bool:
    try:
        response = request("GET", url, deadline_seconds=BOOTSTRAP_TIMEOUT_SECONDS, max_bytes=_MAX_ANSWER_BYTES)
    except CallFailed:
        return False
    return response.status == 200


def probe_bootstrap(
    replicas: Iterable[ReplicaView], ports: Mapping[str, int], budget_seconds: float = BOOTSTRAP_BUDGET_SECONDS
) -> frozenset[str]:
    """The URLs of the replicas whose bootstrap server answered `GET /health` with 200."""
    answered = set()
    deadline = time.monotonic() + budget_seconds
    for replica in replicas:
        rank0 = replica.rank0
        if time.monotonic() >= deadline:
            break
        if replica.url is None or rank0 is None or not rank0.ip:
            continue
        if _answers(f"http://{rank0.ip}:{ports[replica.url]}/health"):
            answered.add(replica.url)
    return frozenset(answered)
