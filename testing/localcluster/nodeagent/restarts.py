"""When an exited container starts again (pure).

Mirrors the kubelet: the first exit restarts at once, each further exit waits `base` seconds doubling up to
`cap` (10 s to 5 min by default), and the streak resets when two exits are more than 2 x cap apart. The waiting
container shows `CrashLoopBackOff` meanwhile.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_BASE_S = 10.0
CAP_FACTOR = 30  # cap = 30 x base: 10 s -> 300 s, as the kubelet


def should_restart(policy: str, exit_code: int, is_init: bool = False) -> bool:
    """Whether the pod's restartPolicy restarts a container that exited with `exit_code`."""
    if policy == "Never":
        return False
    if policy == "OnFailure" or is_init:
        return exit_code != 0
    return True


@dataclass(frozen=True)
class BackOff:
    streak: int = 0  # exits that counted towards the current back-off
    last_exit: float | None = None  # time of the previous exit (seconds, any clock)


def after_exit(state: BackOff, exit_time: float, base: float) -> tuple[BackOff, float]:
    """The back-off after an exit at `exit_time` and the delay before the next start."""
    cap = base * CAP_FACTOR
    streak = state.streak
    if state.last_exit is not None and exit_time - state.last_exit > 2 * cap:
        streak = 0
    delay = 0.0 if streak == 0 else min(cap, base * 2 ** (streak - 1))
    return BackOff(streak + 1, exit_time), delay


def crash_loop_message(delay: float, container: str, pod: str, namespace: str, uid: str) -> str:
    return f"back-off {delay:g}s restarting failed container={container} pod={pod}_{namespace}({uid})"
