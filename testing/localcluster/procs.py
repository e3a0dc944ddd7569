"""Detached processes with pidfiles: start, find, stop, and sweep stragglers.

Every cluster process runs in its own session (so it survives the shell or pytest that started it, and its
whole process group can be signalled), logs to `logs/<name>.log`, and is recorded in `<name>.pid` together
with its kernel start time, so a recycled pid is never mistaken for ours. Each also carries the environment
variable `LOCALCLUSTER_STATE=<state dir>`, which lets `sweep` find anything that escaped its process group
(e.g. pods started by the node agent in their own sessions).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

from localcluster.paths import MARKER_ENV, StateLayout

T = TypeVar("T")


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """(state letter, start time in clock ticks) of a live process, or None if it does not exist."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name (field 2) may contain spaces and parentheses: split after its closing parenthesis.
    fields = raw[raw.rindex(")") + 2 :].split()
    return fields[0], int(fields[19])


def _reap(pid: int) -> None:
    """Collect a zombie if it is our own child (when pytest started the cluster in-process)."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def pid_alive(pid: int, start_time: int | None = None) -> bool:
    _reap(pid)
    stat = _proc_stat(pid)
    if stat is None or stat[0] in ("Z", "X"):
        return False
    return start_time is None or stat[1] == start_time


def spawn(
    layout: StateLayout,
    name: str,
    argv: Sequence[str],
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> int:
    """Start `argv` detached (new session), logging to logs/<name>.log; write <name>.pid; return the pid."""
    layout.logs.mkdir(parents=True, exist_ok=True)
    full_env = dict(os.environ if env is None else env)
    full_env[MARKER_ENV] = str(layout.root)
    with layout.logfile(name).open("ab") as log:
        log.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} starting: {' '.join(argv)}\n".encode())
        log.flush()
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=full_env,
            cwd=str(cwd) if cwd else None,
            start_new_session=True,
        )
    stat = _proc_stat(proc.pid)
    record = {"pid": proc.pid, "start": stat[1] if stat else None, "argv": list(argv)}
    layout.pidfile(name).write_text(json.dumps(record) + "\n")
    return proc.pid


def running_pid(layout: StateLayout, name: str) -> int | None:
    """The pid recorded for `name` if that very process is still alive."""
    try:
        record = json.loads(layout.pidfile(name).read_text())
    except (FileNotFoundError, ValueError):
        return None
    pid = int(record["pid"])
    return pid if pid_alive(pid, record.get("start")) else None


def _signal_group(pid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def _group_members(pgid: int) -> list[int]:
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.getpgid(int(entry.name)) == pgid and pid_alive(int(entry.name)):
                    members.append(int(entry.name))
            except ProcessLookupError:
                continue
    return members


def terminate_group(pid: int, timeout: float) -> None:
    """SIGTERM the process group led by `pid`, wait up to `timeout` s for it to empty, then SIGKILL it."""
    _signal_group(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not pid_alive(pid) and not _group_members(pid):
            return
        time.sleep(0.1)
    _signal_group(pid, signal.SIGKILL)
    wait_for(lambda: not pid_alive(pid), 10.0, f"pid {pid} to die after SIGKILL")


def stop(layout: StateLayout, name: str, timeout: float = 20.0) -> bool:
    """Stop the recorded process `name` and its group; True if something was running."""
    pid = running_pid(layout, name)
    if pid is not None:
        terminate_group(pid, timeout)
    layout.pidfile(name).unlink(missing_ok=True)
    return pid is not None


def _ancestors() -> set[int]:
    pids, pid = set(), os.getpid()
    while pid > 1:
        pids.add(pid)
        stat = Path(f"/proc/{pid}/stat").read_text()
        pid = int(stat[stat.rindex(")") + 2 :].split()[1])
    return pids


def marked_pids(layout: StateLayout, spare_groups: Collection[int] = ()) -> list[int]:
    """Live processes carrying this cluster's environment marker, except us, our ancestors, our own process
    group and the groups in `spare_groups` (components still tracked by pidfile)."""
    needle = f"{MARKER_ENV}={layout.root}".encode()
    mine, found = _ancestors(), []
    skip_groups = {os.getpgid(0), *spare_groups}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in mine:
            continue
        try:
            pid = int(entry.name)
            marked = needle in (entry / "environ").read_bytes().split(b"\0")
            if marked and os.getpgid(pid) not in skip_groups and pid_alive(pid):
                found.append(pid)
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return found


def sweep(layout: StateLayout, spare_groups: Collection[int] = (), timeout: float = 10.0) -> list[int]:
    """Terminate the process groups of marked processes left over (e.g. pods of a dead node agent), sparing
    `spare_groups`; SIGKILL what is left after `timeout` s. Returns the pids found."""
    found = marked_pids(layout, spare_groups)
    for pid in found:
        with contextlib.suppress(ProcessLookupError):
            _signal_group(os.getpgid(pid), signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and marked_pids(layout, spare_groups):
        time.sleep(0.2)
    for pid in marked_pids(layout, spare_groups):
        with contextlib.suppress(ProcessLookupError):
            _signal_group(os.getpgid(pid), signal.SIGKILL)
    return found


def port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def pick_port(preferred: int, taken: set[int] | None = None) -> int:
    """`preferred` if it is free on 127.0.0.1, else a free ephemeral port (never one in `taken`)."""
    taken = taken or set()
    if preferred not in taken and port_free(preferred):
        return preferred
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port not in taken:
            return port
    raise RuntimeError("no free TCP port on 127.0.0.1")


def wait_for(
    check: Callable[[], T | None],
    timeout: float,
    what: str,
    interval: float = 0.25,
    on_timeout: Callable[[], str] | None = None,
) -> T:
    """Poll `check` until it returns a truthy value and return that, or raise TimeoutError naming `what`."""
    start = time.monotonic()
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() - start > timeout:
            detail = on_timeout() if on_timeout else ""
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}{detail}")
        time.sleep(interval)


def log_tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()[-lines:]
    except FileNotFoundError:
        return f"\n(no log at {path})"
    return f"\n--- last {len(text)} lines of {path} ---\n" + "\n".join(text)
