"""Pod status as a kubelet reports it, from a snapshot of the pod's containers (pure).

Phase follows the kubelet's `getPhase`: a container that never started keeps the pod Pending; a running one
makes it Running; when all have stopped the restart policy decides between Running (restarting), Succeeded
and Failed. Conditions carry their `lastTransitionTime` over unless their status flips.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

OWNED_CONDITIONS = ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady")
TERMINAL = ("Succeeded", "Failed")


def rfc3339(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def image_id(image: str) -> str:
    """A stable stand-in for the digest a runtime would report."""
    repository = image.split("@", 1)[0].rsplit(":", 1)[0] if "/" in image or ":" in image else image
    return f"{repository}@sha256:{hashlib.sha256(image.encode()).hexdigest()}"


def container_id(uid: str, name: str, restart: int) -> str:
    return "nodeagent://" + hashlib.sha256(f"{uid}/{name}/{restart}".encode()).hexdigest()


@dataclass(frozen=True)
class ContainerView:
    """What the agent knows about one container at one moment."""

    name: str
    image: str
    state: str  # "waiting" | "running" | "terminated"
    restart_count: int = 0
    reason: str = ""
    message: str = ""
    started_at: float | None = None
    finished_at: float | None = None
    exit_code: int = 0
    signal: int | None = None
    container_id: str = ""
    ready: bool = False
    started: bool = False
    last_terminated: Mapping[str, Any] | None = None  # lastState.terminated, already in API form


def terminated_state(view: ContainerView) -> dict[str, Any]:
    state: dict[str, Any] = {
        "exitCode": view.exit_code,
        "reason": view.reason or ("Completed" if view.exit_code == 0 else "Error"),
        "startedAt": rfc3339(view.started_at) if view.started_at is not None else None,
        "finishedAt": rfc3339(view.finished_at) if view.finished_at is not None else None,
        "containerID": view.container_id or None,
    }
    if view.message:
        state["message"] = view.message
    if view.signal:
        state["signal"] = view.signal
    return state


def container_status(view: ContainerView) -> dict[str, Any]:
    if view.state == "running":
        state: dict[str, Any] = {"running": {"startedAt": rfc3339(view.started_at or 0.0)}}
    elif view.state == "terminated":
        state = {"terminated": terminated_state(view)}
    else:
        waiting = {"reason": view.reason or "ContainerCreating"}
        if view.message:
            waiting["message"] = view.message
        state = {"waiting": waiting}
    status: dict[str, Any] = {
        "name": view.name,
        "image": view.image,
        "imageID": image_id(view.image) if view.container_id else "",
        "ready": view.ready and view.state == "running",
        "started": view.started and view.state == "running",
        "restartCount": view.restart_count,
        "state": state,
        "lastState": {"terminated": dict(view.last_terminated)} if view.last_terminated else {},
    }
    if view.container_id:
        status["containerID"] = view.container_id
    return status


def init_complete(init_views: Sequence[ContainerView]) -> bool:
    return all(v.state == "terminated" and v.exit_code == 0 for v in init_views)


def pod_phase(
    restart_policy: str, init_views: Sequence[ContainerView], views: Sequence[ContainerView], previous: str
) -> str:
    if previous in TERMINAL:
        return previous
    if not init_complete(init_views):
        failed = any(v.state == "terminated" and v.exit_code != 0 for v in init_views) or any(
            v.state == "waiting" and v.last_terminated for v in init_views
        )
        return "Failed" if failed and restart_policy == "Never" else "Pending"
    waiting = running = stopped = succeeded = 0
    for view in views:
        if view.state == "running":
            running += 1
        elif view.state == "terminated":
            stopped += 1
            succeeded += view.exit_code == 0
        elif view.last_terminated:
            stopped += 1
        else:
            waiting += 1
    if waiting or not views:
        return "Pending"
    if running:
        return "Running"
    if restart_policy == "Always":
        return "Running"
    if stopped == succeeded:
        return "Succeeded"
    return "Failed" if restart_policy == "Never" else "Running"


def _condition(
    kind: str, ok: bool, now: str, previous: Mapping[str, Mapping[str, Any]], reason: str = "", message: str = ""
) -> dict[str, Any]:
    status = "True" if ok else "False"
    before = previous.get(kind)
    since = before.get("lastTransitionTime") if before and before.get("status") == status else None
    condition: dict[str, Any] = {
        "type": kind,
        "status": status,
        "lastProbeTime": None,
        "lastTransitionTime": since or now,
    }
    if reason:
        condition["reason"] = reason
    if message:
        condition["message"] = message
    return condition


def pod_conditions(
    pod: Mapping[str, Any],
    phase: str,
    sandbox_ready: bool,
    init_views: Sequence[ContainerView],
    views: Sequence[ContainerView],
    now: str,
    reported: Sequence[Mapping[str, Any]] = (),
) -> list[dict[str, Any]]:
    """All conditions for the status: the four the kubelet owns plus any others (PodScheduled, gates) kept.

    `reported` are the conditions this agent last sent: they win over the pod's (possibly older) copy, so a
    late watch event cannot make a transition time jump.
    """
    existing = list((pod.get("status") or {}).get("conditions") or [])
    previous = {c["type"]: c for c in existing} | {c["type"]: c for c in reported}
    completed = phase in TERMINAL
    pending_init = [v.name for v in init_views if not (v.state == "terminated" and v.exit_code == 0)]
    unready = [v.name for v in views if not (v.ready and v.state == "running")]
    if completed:
        init = _condition("Initialized", True, now, previous, "PodCompleted" if not init_views else "")
        containers_ready = _condition("ContainersReady", False, now, previous, "PodCompleted")
    else:
        init = _condition(
            "Initialized",
            not pending_init,
            now,
            previous,
            "ContainersNotInitialized" if pending_init else "",
            f"containers with incomplete status: [{' '.join(pending_init)}]" if pending_init else "",
        )
        containers_ready = _condition(
            "ContainersReady",
            not unready,
            now,
            previous,
            "ContainersNotReady" if unready else "",
            f"containers with unready status: [{' '.join(unready)}]" if unready else "",
        )
    gates = [g["conditionType"] for g in pod.get("spec", {}).get("readinessGates") or []]
    missing = [g for g in gates if (previous.get(g) or {}).get("status") != "True"]
    if completed:
        ready = _condition("Ready", False, now, previous, "PodCompleted")
    elif containers_ready["status"] != "True":
        ready = _condition("Ready", False, now, previous, "ContainersNotReady", containers_ready.get("message", ""))
    elif missing:
        ready = _condition(
            "Ready",
            False,
            now,
            previous,
            "ReadinessGatesNotReady",
            f"the status of pod readiness gate {missing[0]!r} is not True",
        )
    else:
        ready = _condition("Ready", True, now, previous)
    sandbox = _condition("PodReadyToStartContainers", sandbox_ready and not completed, now, previous)
    generation = pod.get("metadata", {}).get("generation")
    owned = [sandbox, init, ready, containers_ready]
    if generation is not None:
        for condition in owned:
            condition["observedGeneration"] = generation
    return owned + [c for c in existing if c["type"] not in OWNED_CONDITIONS]


def pod_status(
    pod: Mapping[str, Any],
    *,
    sandbox_ready: bool,
    init_views: Sequence[ContainerView],
    views: Sequence[ContainerView],
    pod_ip: str,
    host_ip: str,
    start_time: float,
    now: float,
    reported: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The status the agent reports (only fields a kubelet owns; `qosClass` etc. stay as the API set them)."""
    spec = pod.get("spec", {})
    previous_phase = (reported or {}).get("phase") or (pod.get("status") or {}).get("phase", "")
    phase = pod_phase(spec.get("restartPolicy", "Always"), init_views, views, previous_phase)
    status: dict[str, Any] = {
        "phase": phase,
        "conditions": pod_conditions(
            pod, phase, sandbox_ready, init_views, views, rfc3339(now), (reported or {}).get("conditions") or ()
        ),
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}],
        "podIP": pod_ip or None,
        "podIPs": [{"ip": pod_ip}] if pod_ip else None,
        "startTime": rfc3339(start_time),
        "containerStatuses": [container_status(v) for v in views],
    }
    if init_views:
        status["initContainerStatuses"] = [container_status(v) for v in init_views]
    generation = pod.get("metadata", {}).get("generation")
    if generation is not None:
        status["observedGeneration"] = generation
    return status
