"""The agent's record of one container of one pod, and its state transitions.

A record lives as long as the pod; each start makes a new *instance* (process + probe tasks). Transitions
mirror what the kubelet shows: waiting (ContainerCreating, CrashLoopBackOff, config/image errors) ->
running -> terminated, and on restart the terminated state moves to `lastState`.
"""

from __future__ import annotations

import asyncio
import calendar
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from localcluster.nodeagent.light import LightProc
from localcluster.nodeagent.process import Proc
from localcluster.nodeagent.restarts import BackOff, after_exit
from localcluster.nodeagent.status import ContainerView, terminated_state

UNKNOWN_EXIT = 137


def parse_time(value: str | None) -> float | None:
    """An API timestamp (RFC 3339, seconds) as epoch seconds."""
    return float(calendar.timegm(time.strptime(value, "%Y-%m-%dT%H:%M:%SZ"))) if value else None


@dataclass
class Container:
    spec: dict[str, Any]
    is_init: bool = False
    state: str = "waiting"
    reason: str = "ContainerCreating"
    message: str = ""
    restart_count: int = 0
    started_at: float | None = None
    finished_at: float | None = None
    exit_code: int = 0
    signal: int | None = None
    container_id: str = ""
    last_terminated: dict[str, Any] | None = None
    ever_ran: bool = False
    started: bool = False
    ready: bool = False
    backoff: BackOff = field(default_factory=BackOff)
    next_start: float = 0.0
    image: str = ""  # image of the running instance (a spec change restarts it)
    proc: Proc | LightProc | None = None  # a light container (`light.py`) has no process
    instance: int = 0
    probes: list[asyncio.Task[None]] = field(default_factory=list)
    kill_reason: str = ""
    adopted: bool = False  # taken over from a previous agent; its probes start on the next sync
    reported_waiting: tuple[str, str] = ("", "")  # last waiting reason/message an event was sent for

    @property
    def name(self) -> str:
        return str(self.spec["name"])

    def view(self) -> ContainerView:
        return ContainerView(
            name=self.name,
            image=self.spec.get("image", ""),
            state=self.state,
            restart_count=self.restart_count,
            reason=self.reason,
            message=self.message,
            started_at=self.started_at,
            finished_at=self.finished_at,
            exit_code=self.exit_code,
            signal=self.signal,
            container_id=self.container_id,
            ready=self.ready,
            started=self.started,
            last_terminated=self.last_terminated,
        )

    def stop_probes(self) -> None:
        for task in self.probes:
            task.cancel()
        self.probes.clear()

    def wait(self, reason: str, message: str = "") -> None:
        """Show a waiting state; an earlier termination moves to lastState."""
        if self.state == "terminated":
            self.last_terminated = terminated_state(self.view())
        self.state, self.reason, self.message = "waiting", reason, message

    def run(self, proc: Proc | LightProc, container_id: str, started_at: float, restart_count: int) -> None:
        if self.state == "terminated":
            self.last_terminated = terminated_state(self.view())
        self.proc = proc
        self.instance += 1
        self.state, self.reason, self.message = "running", "", ""
        self.container_id = container_id
        self.started_at = started_at
        self.finished_at = None
        self.restart_count = restart_count
        self.image = self.spec.get("image", "")
        self.ever_ran = True
        self.started = self.ready = False
        self.kill_reason = ""
        self.reported_waiting = ("", "")

    def exited(self, code: int | None, signal: int | None, at: float, backoff_base: float, message: str = "") -> None:
        """Record the end of the running instance and when it may start again."""
        self.stop_probes()
        self.proc = None
        self.state = "terminated"
        self.exit_code = UNKNOWN_EXIT if code is None else code
        self.signal = signal
        self.finished_at = at
        self.reason = "ContainerStatusUnknown" if code is None else ("Completed" if code == 0 else "Error")
        self.message = message or (
            "the container exited while the node agent was not its parent; its exit status is unknown"
            if code is None
            else ""
        )
        self.started = self.ready = False
        self.backoff, delay = after_exit(self.backoff, at, backoff_base)
        self.next_start = at + delay

    def adopt(self, proc: Proc, previous: Mapping[str, Any]) -> None:
        """Take over a live process a previous agent started, keeping what that agent last reported
        (restart count, last state, started/ready) until a probe says otherwise, so Ready does not flap."""
        record = proc.record
        self.run(proc, record.container_id, record.started_at, record.restart)
        self.last_terminated = (previous.get("lastState") or {}).get("terminated")
        self.adopted = True
        self.started, self.ready = bool(previous.get("started")), bool(previous.get("ready"))

    def restore(self, previous: Mapping[str, Any], now: float, backoff_base: float) -> None:
        """Rebuild the record of a container without a live process from the pod's reported status.

        A container reported running whose process is gone died with the previous agent: it counts as an
        exit of unknown status and restarts at once.
        """
        self.restart_count = int(previous.get("restartCount") or 0)
        self.last_terminated = (previous.get("lastState") or {}).get("terminated")
        state = previous.get("state") or {}
        if "terminated" in state or ("waiting" in state and self.last_terminated):
            done = state.get("terminated") or self.last_terminated or {}
            self.ever_ran, self.state = True, "terminated"
            self.exit_code, self.reason = int(done.get("exitCode", 0)), done.get("reason", "")
            self.started_at, self.finished_at = parse_time(done.get("startedAt")), parse_time(done.get("finishedAt"))
            self.container_id = done.get("containerID") or ""
        elif "running" in state:
            self.ever_ran = True
            self.container_id = previous.get("containerID") or ""
            self.started_at = parse_time((state.get("running") or {}).get("startedAt"))
            self.exited(None, None, now, backoff_base)
