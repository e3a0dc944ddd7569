"""Probe settings and the result state machine (pure; `prober.py` runs the checks).

Like the kubelet: a result flips to success after `successThreshold` consecutive successes and to failure
after `failureThreshold` consecutive failures. Before the first flip a readiness probe reads "not ready",
a liveness probe "alive" and a startup probe "not started yet".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

KINDS = ("startup", "readiness", "liveness")


@dataclass(frozen=True)
class ProbeSpec:
    kind: str
    action: Mapping[str, Any]  # {"httpGet": {...}} | {"tcpSocket": {...}} | {"exec": {...}} | {"grpc": {...}}
    initial_delay: float = 0.0
    period: float = 10.0
    timeout: float = 1.0
    success_threshold: int = 1
    failure_threshold: int = 3
    termination_grace: float | None = None  # probe-level terminationGracePeriodSeconds (liveness/startup)


def probe_spec(kind: str, probe: Mapping[str, Any]) -> ProbeSpec:
    action = {k: v for k, v in probe.items() if k in ("httpGet", "tcpSocket", "exec", "grpc")}
    grace = probe.get("terminationGracePeriodSeconds")
    return ProbeSpec(
        kind=kind,
        action=action,
        initial_delay=float(probe.get("initialDelaySeconds") or 0),
        period=float(probe.get("periodSeconds") or 10),
        timeout=float(probe.get("timeoutSeconds") or 1),
        success_threshold=int(probe.get("successThreshold") or 1),
        failure_threshold=int(probe.get("failureThreshold") or 3),
        termination_grace=None if grace is None else float(grace),
    )


def container_probes(container: Mapping[str, Any]) -> dict[str, ProbeSpec]:
    return {kind: probe_spec(kind, container[f"{kind}Probe"]) for kind in KINDS if container.get(f"{kind}Probe")}


@dataclass(frozen=True)
class ProbeState:
    result: bool | None  # None: no decision yet (startup probe before its first flip)
    successes: int = 0
    failures: int = 0
    message: str = ""


def initial_state(kind: str) -> ProbeState:
    return ProbeState(result={"readiness": False, "liveness": True}.get(kind))


def observe(state: ProbeState, spec: ProbeSpec, ok: bool, message: str = "") -> ProbeState:
    """The state after one probe result."""
    if ok:
        successes = state.successes + 1
        result = True if successes >= spec.success_threshold else state.result
        return replace(state, result=result, successes=successes, failures=0, message="")
    failures = state.failures + 1
    result = False if failures >= spec.failure_threshold else state.result
    return replace(state, result=result, successes=0, failures=failures, message=message)


def resolve_port(port: int | str, container: Mapping[str, Any]) -> int:
    """A probe's port: a number, or the name of one of the container's ports."""
    if isinstance(port, int) or str(port).isdigit():
        return int(port)
    for entry in container.get("ports") or []:
        if entry.get("name") == port:
            return int(entry["containerPort"])
    raise ValueError(f"port {port!r} is not a named port of container {container.get('name')}")
