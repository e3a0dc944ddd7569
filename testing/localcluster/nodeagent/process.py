"""Container processes: start in a private mount namespace, watch for exit, signal, adopt after a restart.

Each container is its own session and process group (signals reach everything it forked). As root, it runs
under `unshare --mount --propagation private`: a short shell script bind-mounts the pod's prepared volume
folders over their mountPaths (and the pod's /etc/hosts) and then `exec`s the program, so the pid we record
is the program's. Mount targets that do not exist are created on the host as empty folders/files first (the
namespace hides their contents, not their existence). Without mount namespaces (not root) the program runs
directly and sees the host's paths; `namespaces_supported()` tells which.

`pid.json` records the pid with its kernel start time, so a restarted agent adopts the process (and never
mistakes a recycled pid for it). An adopted process is not our child: its exit is seen through a pidfd, but
its exit status is lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import shlex
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from localcluster.nodeagent.layout import read_json, write_json
from localcluster.nodeagent.volumes import Bind
from localcluster.paths import MARKER_ENV, REPO_ROOT

KILL_WAIT_S = 5.0


@dataclass(frozen=True)
class ProcRecord:
    pid: int
    start_ticks: int
    restart: int
    container_id: str
    started_at: float
    argv: tuple[str, ...] = ()


def start_ticks(pid: int) -> int | None:
    """Kernel start time of a live (non-zombie) process, None when it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    fields = raw[raw.rindex(")") + 2 :].split()
    return None if fields[0] in ("Z", "X") else int(fields[19])


def alive(record: ProcRecord) -> bool:
    return start_ticks(record.pid) == record.start_ticks


def save_record(path: Path, record: ProcRecord) -> None:
    write_json(path, asdict(record))


def load_record(path: Path) -> ProcRecord | None:
    raw = read_json(path)
    if not isinstance(raw, dict):
        return None
    try:
        return ProcRecord(**{**raw, "argv": tuple(raw.get("argv", ()))})
    except TypeError:
        return None


def signal_group(pid: int, sig: int) -> bool:
    """Signal the process group led by `pid`; False when nothing is left."""
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        return False
    return True


@functools.cache
def namespaces_supported() -> bool:
    """Whether `unshare --mount` works here (needs root or CAP_SYS_ADMIN)."""
    try:
        done = subprocess.run(
            ["unshare", "--mount", "--propagation", "private", "true"], capture_output=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def _hides(target: str, path: str) -> bool:
    target = target.rstrip("/") or "/"
    return path == target or path.startswith(target if target == "/" else target + "/")


def mount_script(binds: Sequence[Bind], workdir: str, keep_visible: Sequence[str] = ()) -> str:
    """The shell run inside the new mount namespace before `exec "$@"` (pure).

    A mount whose target would hide a host path the pod still needs (the project checkout, which holds the state dir
    with every volume's source, and the virtualenv: e.g. an emptyDir on /tmp while the checkout lives under /tmp) is
    skipped with a note in the container log: here
    every "container" runs a program of the host's filesystem, so the host path must stay visible.
    """
    lines = ["set -e"]
    for bind in binds:
        src, dst = shlex.quote(bind.source), shlex.quote(bind.target)
        hidden = [path for path in keep_visible if _hides(bind.target, path)]
        if hidden:
            note = f"pod-mounts: not mounting {bind.target}: it would hide {hidden[0]} on this host"
            lines.append(f"echo {shlex.quote(note)} >&2")
            continue
        lines.append(
            f'if [ -d {src} ]; then mkdir -p {dst}; else mkdir -p "$(dirname {dst})"; [ -e {dst} ] || : > {dst}; fi'
        )
        lines.append(f"mount --bind {src} {dst}")
        if bind.read_only:
            lines.append(f"mount -o remount,bind,ro {dst}")
    lines.append(f"mkdir -p {shlex.quote(workdir)} && cd {shlex.quote(workdir)}")
    lines.append("unset OLDPWD PWD")  # set by `cd`; not part of the container's environment
    lines.append('exec "$@"')
    return "\n".join(lines)


def command_line(argv: Sequence[str], binds: Sequence[Bind], workdir: str, isolate: bool) -> list[str]:
    if not isolate:
        return list(argv)
    # The cluster's state dir holds every volume's source and each pod's /etc/hosts: it must stay visible even
    # when it lies outside the checkout (LOCALCLUSTER_STATE_DIR under /tmp, where routers mount an emptyDir).
    state = os.environ.get(MARKER_ENV, "")
    script = mount_script(binds, workdir, keep_visible=(sys.prefix, str(REPO_ROOT), *([state] if state else [])))
    return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script, "pod-mounts", *argv]


def spawn(
    argv: Sequence[str], env: Mapping[str, str], binds: Sequence[Bind], workdir: str, log_path: Path, isolate: bool
) -> subprocess.Popen[bytes]:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    Path(workdir).mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        return subprocess.Popen(
            command_line(argv, binds, workdir, isolate),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(env),
            cwd=workdir,
            start_new_session=True,
        )


def exec_prefix(pid: int, isolate: bool) -> list[str]:
    """How to run an exec probe inside a container's mount namespace and working directory."""
    return ["nsenter", f"--target={pid}", "--mount", "--wd", "--"] if isolate else []


class Proc:
    """One running container process and a future for its exit code (None when unknown)."""

    def __init__(self, record: ProcRecord, popen: subprocess.Popen[bytes] | None) -> None:
        self.record = record
        self.popen = popen
        self.exited: asyncio.Future[int | None] = asyncio.get_running_loop().create_future()
        self.signal_number: int | None = None
        self._fd: int | None = None
        self._watch()

    def _watch(self) -> None:
        try:
            self._fd = os.pidfd_open(self.record.pid)
        except ProcessLookupError:
            self._finish()
            return
        asyncio.get_running_loop().add_reader(self._fd, self._finish)

    def _finish(self) -> None:
        if self._fd is not None:
            asyncio.get_running_loop().remove_reader(self._fd)
            os.close(self._fd)
            self._fd = None
        code: int | None = None
        if self.popen is not None:
            returncode = self.popen.wait()
            if returncode < 0:
                self.signal_number = -returncode
                code = 128 - returncode
            else:
                code = returncode
        # Whatever it forked dies with it, as when a container's init process exits.
        signal_group(self.record.pid, signal.SIGKILL)
        if not self.exited.done():
            self.exited.set_result(code)

    @property
    def pid(self) -> int:
        return self.record.pid

    def signal(self, sig: int) -> None:
        signal_group(self.record.pid, sig)

    async def stop(self, grace: float) -> int | None:
        """SIGTERM the group, SIGKILL after `grace` seconds; returns the exit code."""
        if not self.exited.done():
            self.signal(signal.SIGTERM)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(self.exited), timeout=max(grace, 0.0))
        if not self.exited.done():
            self.signal(signal.SIGKILL)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(self.exited), timeout=KILL_WAIT_S)
        return self.exited.result() if self.exited.done() else None
