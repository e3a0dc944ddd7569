"""One pod's lifecycle on this node, as the kubelet's pod worker runs it.

Each pass (`sync`) is level-based: from the latest pod object and the containers' recorded states it prepares
the sandbox (IP, GPUs, volumes), handles kill requests from probes, runs init containers in order, starts or
restarts containers (with back-off), and reports the status when it changed. Deletion stops every process
(SIGTERM, grace period, SIGKILL) and then removes the pod with grace period 0 and a uid precondition.
Process exits and probe results only record facts and wake the worker; decisions happen in `sync`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import time
from collections.abc import Mapping
from typing import Any

import aiohttp

from localcluster.nodeagent import lifecycle, sandbox
from localcluster.nodeagent.container import Container, parse_time
from localcluster.nodeagent.context import RESYNC_S, Context
from localcluster.nodeagent.envvars import EnvError, PodFacts, container_env, expand, referenced_objects
from localcluster.nodeagent.images import NotRunnable, Runnable, image_kind, light_pod, map_container
from localcluster.nodeagent.kube import MERGE_PATCH, ApiError, decode
from localcluster.nodeagent.layout import write_json
from localcluster.nodeagent.light import LightProc, make_pod
from localcluster.nodeagent.nodes import GPU_RESOURCE, HOST_IP
from localcluster.nodeagent.prober import ProbeTarget, probe_loop
from localcluster.nodeagent.probes import ProbeSpec, ProbeState, container_probes
from localcluster.nodeagent.process import Proc, ProcRecord, alive, exec_prefix, save_record, spawn, start_ticks
from localcluster.nodeagent.restarts import crash_loop_message, should_restart
from localcluster.nodeagent.status import TERMINAL, container_id, pod_status
from localcluster.nodeagent.volumes import VolumeError, container_binds

log = logging.getLogger(__name__)
API_ERRORS = (ApiError, aiohttp.ClientError, OSError, asyncio.TimeoutError)
CONFIG_RETRY_S = 10.0
DEFAULT_GRACE_S = 30.0
ORPHAN_GRACE_S = 2.0


class PodWorker:
    def __init__(self, ctx: Context, pod: dict[str, Any], adopted: Mapping[str, ProcRecord]) -> None:
        self.ctx = ctx
        self.pod: dict[str, Any] | None = pod
        meta, spec = pod["metadata"], pod["spec"]
        self.uid, self.namespace, self.name = meta["uid"], meta["namespace"], meta["name"]
        self.node = spec["nodeName"]
        self.init = [Container(dict(c), is_init=True) for c in spec.get("initContainers") or []]
        self.main = [Container(dict(c)) for c in spec.get("containers") or []]
        status = pod.get("status") or {}
        self.start_time = parse_time(status.get("startTime")) or time.time()
        self.reported: dict[str, Any] | None = None
        self.ip = ""
        self.sandbox_ready = False
        self.sandbox_failures = 0
        self.next_sandbox = 0.0
        self.volume_dirs: dict[str, str] = {}
        self.tokens = sandbox.TokenCache()
        self.gpus: dict[str, list[int]] = {}
        self.rejection: tuple[str, str] | None = None
        self.wake = asyncio.Event()
        self.deadline = 0.0
        self.done = False
        self._adopt(status, adopted)

    # ----- lifecycle of the worker -------------------------------------------------------------------------

    @property
    def containers(self) -> list[Container]:
        return self.init + self.main

    def update(self, pod: dict[str, Any] | None) -> None:
        self.pod = pod
        self.wake.set()

    def wake_at(self, when: float) -> None:
        self.deadline = min(self.deadline, when)

    async def run(self) -> None:
        while not self.done:
            self.wake.clear()
            self.deadline = time.time() + RESYNC_S
            try:
                await self.sync()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("pod %s/%s: sync failed", self.namespace, self.name)
                self.wake_at(time.time() + 5.0)
            if self.done:
                return
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.wake.wait(), max(0.05, self.deadline - time.time()))

    async def stop_all(self, grace: float) -> None:
        """Agent shutdown: stop this pod's processes (the pod object stays; a new agent starts them again)."""
        await asyncio.gather(*(self._kill(c, "", grace) for c in self.containers if c.proc))
        for container in self.containers:
            container.stop_probes()

    def _adopt(self, status: Mapping[str, Any], adopted: Mapping[str, ProcRecord]) -> None:
        """Take over what a previous agent left: restart counts, last states, and live processes."""
        known = {
            s["name"]: s for s in (status.get("containerStatuses") or []) + (status.get("initContainerStatuses") or [])
        }
        for c in self.containers:
            previous = known.get(c.name) or {}
            record = adopted.get(c.name)
            if record is not None and alive(record):
                proc = Proc(record, None)
                c.adopt(proc, previous)
                proc.exited.add_done_callback(functools.partial(self._on_exit, c, proc))
            else:
                c.restore(previous, time.time(), self.ctx.backoff_base)

    # ----- one pass -----------------------------------------------------------------------------------------

    async def sync(self) -> None:
        pod = self.pod
        if pod is None:  # gone from the API without our final delete (force deletion)
            await self._shutdown(ORPHAN_GRACE_S, delete=False)
            return
        meta, spec = pod["metadata"], pod["spec"]
        if meta.get("deletionTimestamp"):
            grace = meta.get("deletionGracePeriodSeconds", spec.get("terminationGracePeriodSeconds", DEFAULT_GRACE_S))
            await self._shutdown(float(grace), delete=True)
            return
        specs = {c["name"]: c for c in (spec.get("initContainers") or []) + spec.get("containers", [])}
        for c in self.containers:
            c.spec = dict(specs.get(c.name, c.spec))
        phase = (self.reported or pod.get("status") or {}).get("phase", "")
        if phase in TERMINAL and not any(c.proc for c in self.containers):
            if self.reported is not None:  # a fresh worker leaves a finished pod's status alone
                await self._report()
            return
        if self.rejection is None and (not self.sandbox_ready or time.time() >= self.next_sandbox):
            await self._setup_sandbox()
        if self.sandbox_ready and self.rejection is None:
            await self._handle_running()
            if phase not in TERMINAL and await self._run_init():
                for c in self.main:
                    await self._ensure_running(c)
        await self._report()

    async def _handle_running(self) -> None:
        for c in self.containers:
            if c.proc is None:
                continue
            if c.adopted:
                c.adopted = False
                await self._start_probes(c, resume=True)
            if c.kill_reason:
                await self._kill(c, c.kill_reason, self._grace(c))
            elif c.spec.get("image", "") != c.image:
                await self._kill(c, f"Container {c.name} definition changed, will be restarted", self._grace(c))
                c.next_start = time.time()

    async def _run_init(self) -> bool:
        """Advance the init containers; True when all have succeeded."""
        for c in self.init:
            if c.state == "terminated" and c.exit_code == 0:
                continue
            if c.proc is None:
                await self._ensure_running(c)
            return False
        return True

    # ----- sandbox ------------------------------------------------------------------------------------------

    def _facts(self) -> PodFacts:
        return PodFacts(pod_ip=self.ip, host_ip=HOST_IP, node_allocatable=self.ctx.node_allocatable)

    async def _setup_sandbox(self) -> None:
        pod = self.pod
        assert pod is not None
        now = time.time()
        if not self.ip:
            self.ip = self.ctx.allocations.ip(self.uid, self.node)
            write_json(
                self.ctx.layout.pod_meta(self.uid),
                {"namespace": self.namespace, "name": self.name, "uid": self.uid, "node": self.node, "ip": self.ip},
            )
            if not self._allocate_gpus():
                return
        secrets, config_maps = referenced_objects(pod)
        try:
            self.volume_dirs = await sandbox.prepare(
                self.ctx.kube, self.ctx.layout, pod, self._facts(), self.tokens, secrets, config_maps
            )
        except (VolumeError, *API_ERRORS) as err:
            self.sandbox_failures += 1
            self.next_sandbox = now + min(30.0, 2.0**self.sandbox_failures)
            self.wake_at(self.next_sandbox)
            if not self.sandbox_ready:
                self.ctx.events.emit(pod, "Warning", "FailedMount", f"MountVolume.SetUp failed: {err}")
            else:
                log.warning("pod %s/%s: volume refresh failed: %s", self.namespace, self.name, err)
            return
        self.sandbox_ready, self.sandbox_failures = True, 0
        self.next_sandbox = min(now + RESYNC_S, self.tokens.next_refresh() or math.inf)
        self.wake_at(self.next_sandbox)

    def _allocate_gpus(self) -> bool:
        for c in self.containers:
            limits = (c.spec.get("resources") or {}).get("limits") or {}
            count = int(limits.get(GPU_RESOURCE, 0) or 0)
            if count <= 0:
                continue
            picked = self.ctx.allocations.gpus(self.uid, c.name, count, self.ctx.gpus_per_node)
            if picked is None:
                self.rejection = (
                    "UnexpectedAdmissionError",
                    f"Allocate failed due to requested number of devices unavailable for {GPU_RESOURCE}. "
                    f"Requested: {count}, Available: fewer on {self.node}",
                )
                return False
            self.gpus[c.name] = picked
        return True

    # ----- starting containers ------------------------------------------------------------------------------

    async def _env(self, c: Container) -> dict[str, str]:
        pod = self.pod
        assert pod is not None
        secret_names, config_map_names = referenced_objects(pod)
        secrets = await sandbox.fetch_secrets(self.ctx.kube, self.namespace, secret_names)
        config_maps = await sandbox.fetch_config_maps(self.ctx.kube, self.namespace, config_map_names)
        env = container_env(
            pod, c.spec, self._facts(), sandbox.as_text(secrets), sandbox.as_text(config_maps), self.ctx.services
        )
        if c.name in self.gpus:
            env.setdefault("NVIDIA_VISIBLE_DEVICES", ",".join(f"GPU-{self.node}-{i}" for i in self.gpus[c.name]))
        hostname = pod["spec"].get("hostname") or self.name
        return {**self.ctx.base_env, "HOSTNAME": hostname, **env}

    async def _ensure_running(self, c: Container) -> None:
        if c.proc is not None:
            return
        pod = self.pod
        assert pod is not None
        policy = pod["spec"].get("restartPolicy", "Always")
        if c.ever_ran and not should_restart(policy, c.exit_code, c.is_init):
            return
        now = time.time()
        if now < c.next_start:
            if c.ever_ran and c.reason != "CrashLoopBackOff":
                delay = c.next_start - (c.finished_at or now)
                c.wait(
                    "CrashLoopBackOff", crash_loop_message(round(delay), c.name, self.name, self.namespace, self.uid)
                )
                self.ctx.events.emit(
                    pod,
                    "Warning",
                    "BackOff",
                    f"Back-off restarting failed container {c.name} in pod {self.name}_{self.namespace}({self.uid})",
                )
            self.wake_at(c.next_start)
            return
        await self._start(c)

    def _config_error(self, c: Container, reason: str, message: str, retry: float | None) -> None:
        pod = self.pod
        assert pod is not None
        c.wait(reason, message)
        if c.reported_waiting != (reason, message):
            c.reported_waiting = (reason, message)
            self.ctx.events.emit(pod, "Warning", "Failed", f"Error: {message}")
        if retry is not None:
            c.next_start = time.time() + retry
            self.wake_at(c.next_start)

    async def _start(self, c: Container) -> None:
        pod = self.pod
        assert pod is not None
        image = c.spec.get("image", "")
        if image_kind(image) is None:  # decided without fetching the pod's references
            mapped = map_container(image, [], [], self.ip, self.ctx.tools)
            assert isinstance(mapped, NotRunnable)
            self._config_error(c, mapped.reason, mapped.message, None)
            return
        try:
            env = await self._env(c)
        except EnvError as err:
            self._config_error(c, "CreateContainerConfigError", str(err), CONFIG_RETRY_S)
            return
        except API_ERRORS as err:
            self._config_error(
                c, "CreateContainerConfigError", f"cannot read the pod's references: {err}", CONFIG_RETRY_S
            )
            return
        command = [expand(str(x), env) for x in c.spec.get("command") or []]
        args = [expand(str(x), env) for x in c.spec.get("args") or []]
        light = light_pod(pod["metadata"].get("annotations"))
        mapped = map_container(c.spec.get("image", ""), command, args, self.ip, self.ctx.tools, light)
        if isinstance(mapped, NotRunnable):
            self._config_error(c, mapped.reason, mapped.message, None)  # waits until the image changes
            return
        if mapped.light:
            await self._start_light(c, mapped, env)
            return
        try:
            binds = container_binds(pod, c.spec, self.volume_dirs, env, str(self.ctx.layout.etc_hosts(self.uid)))
        except VolumeError as err:
            self._config_error(c, "CreateContainerConfigError", str(err), CONFIG_RETRY_S)
            return
        restart = c.restart_count + (1 if c.ever_ran else 0)
        layout = self.ctx.layout
        workdir = c.spec.get("workingDir") or str(layout.workdir(self.uid))
        log_path = layout.log_file(self.namespace, self.name, self.uid, c.name, restart)
        try:
            popen = spawn(mapped.argv, env, binds, workdir, log_path, self.ctx.isolate)
        except OSError as err:
            self._config_error(c, "RunContainerError", f"failed to start {mapped.argv[0]}: {err}", CONFIG_RETRY_S)
            return
        now = time.time()
        cid = container_id(self.uid, c.name, restart)
        record = ProcRecord(popen.pid, start_ticks(popen.pid) or 0, restart, cid, now, mapped.argv)
        save_record(layout.pidfile(self.uid, c.name), record)
        proc = Proc(record, popen)
        c.run(proc, cid, now, restart)
        proc.exited.add_done_callback(functools.partial(self._on_exit, c, proc))
        self.ctx.events.emit(pod, "Normal", "Pulled", f'Container image "{c.image}" already present on machine')
        self.ctx.events.emit(pod, "Normal", "Created", f"Created container: {c.name}")
        self.ctx.events.emit(pod, "Normal", "Started", f"Started container {c.name}")
        await self._start_probes(c, env)

    async def _start_light(self, c: Container, mapped: Runnable, env: dict[str, str]) -> None:
        """Start a light container (`light.py`): listen on its ports from the agent's loop instead of a process."""
        pod = self.pod
        assert pod is not None
        restart = c.restart_count + (1 if c.ever_ran else 0)
        layout = self.ctx.layout
        light = make_pod(mapped.kind, self.ip, c.spec, mapped.argv, env)
        try:
            sites = await self.ctx.light.open(light)
        except OSError as err:
            self._config_error(c, "RunContainerError", f"light {mapped.kind} cannot listen on {self.ip}: {err}",
                               CONFIG_RETRY_S)  # fmt: skip
            return
        log_path = layout.log_file(self.namespace, self.name, self.uid, c.name, restart)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with log_path.open("a") as log:
            log.write(f"light {mapped.kind} served by the node agent on {self.ip} ports {list(light.ports)}\n")
        now = time.time()
        cid = container_id(self.uid, c.name, restart)
        proc = LightProc(ProcRecord(0, 0, restart, cid, now, mapped.argv), self.ctx.light, light, sites)
        c.run(proc, cid, now, restart)
        proc.exited.add_done_callback(functools.partial(self._on_exit, c, proc))
        self.ctx.events.emit(pod, "Normal", "Pulled", f'Container image "{c.image}" already present on machine')
        self.ctx.events.emit(pod, "Normal", "Created", f"Created container: {c.name}")
        self.ctx.events.emit(pod, "Normal", "Started", f"Started container {c.name}")
        await self._start_probes(c, env)

    def _target(self, c: Container, env: Mapping[str, str], proc: Proc | LightProc) -> ProbeTarget:
        """Where probes and hooks of this container instance go; a light one's HTTP GETs are answered in-process."""
        if isinstance(proc, LightProc):
            return ProbeTarget(self.ip, c.spec, env, [], self.ctx.session, local=self.ctx.light.probe)
        return ProbeTarget(self.ip, c.spec, env, exec_prefix(proc.pid, self.ctx.isolate), self.ctx.session)

    def _on_exit(self, c: Container, proc: Proc | LightProc, _: object = None) -> None:
        if c.proc is not proc:
            return
        code = proc.exited.result()
        c.exited(code, proc.signal_number, time.time(), self.ctx.backoff_base)
        with contextlib.suppress(FileNotFoundError):
            self.ctx.layout.pidfile(self.uid, c.name).unlink()
        self.wake.set()

    # ----- probes -------------------------------------------------------------------------------------------

    async def _start_probes(self, c: Container, env: dict[str, str] | None = None, resume: bool = False) -> None:
        """Start the probe tasks of a new instance, or (`resume`) of an adopted one in its reported state."""
        if c.proc is None:
            return
        if env is None:
            try:
                env = await self._env(c)
            except (EnvError, *API_ERRORS):
                env = dict(self.ctx.base_env)
        target = self._target(c, env, c.proc)
        specs = container_probes(c.spec)
        if resume and c.started:
            self._after_startup(c, specs, target, ready=c.ready)
        elif "startup" in specs:
            self._launch(c, specs["startup"], target)
        else:
            self._after_startup(c, specs, target)

    def _after_startup(
        self, c: Container, specs: Mapping[str, ProbeSpec], target: ProbeTarget, ready: bool | None = None
    ) -> None:
        c.started = True
        c.ready = ("readiness" not in specs) if ready is None else ready
        for kind in ("readiness", "liveness"):
            if kind in specs:
                initial = ProbeState(result=c.ready) if kind == "readiness" else None
                self._launch(c, specs[kind], target, initial)

    def _launch(self, c: Container, spec: ProbeSpec, target: ProbeTarget, initial: ProbeState | None = None) -> None:
        on_result = functools.partial(self._on_probe, c, c.instance, target)
        started = c.started_at or time.time()
        c.probes.append(asyncio.create_task(probe_loop(spec, target, started, on_result, initial)))

    def _on_probe(
        self,
        c: Container,
        instance: int,
        target: ProbeTarget,
        spec: ProbeSpec,
        old: ProbeState,
        new: ProbeState,
        message: str,
    ) -> None:
        if c.instance != instance or c.proc is None or self.pod is None:
            return
        if new.failures and message:
            kind = spec.kind.capitalize()
            self.ctx.events.emit(self.pod, "Warning", "Unhealthy", f"{kind} probe failed: {message}")
        if spec.kind == "startup" and new.result is True:
            self._after_startup(c, container_probes(c.spec), target)
        elif spec.kind == "startup" and new.result is False:
            c.kill_reason = f"Container {c.name} failed startup probe, will be restarted"
        elif spec.kind == "readiness" and new.result != old.result:
            c.ready = bool(new.result)
        elif spec.kind == "liveness" and new.result is False and old.result is not False:
            c.kill_reason = f"Container {c.name} failed liveness probe, will be restarted"
        else:
            return
        self.wake.set()

    # ----- stopping -----------------------------------------------------------------------------------------

    def _grace(self, c: Container) -> float:
        pod_grace = (self.pod or {}).get("spec", {}).get("terminationGracePeriodSeconds", DEFAULT_GRACE_S)
        if c.kill_reason:
            for spec in container_probes(c.spec).values():
                if spec.kind in ("liveness", "startup") and spec.termination_grace is not None:
                    return spec.termination_grace
        return float(pod_grace)

    async def _kill(self, c: Container, reason: str, grace: float) -> None:
        proc = c.proc
        if proc is None:
            return
        if reason and self.pod is not None:
            self.ctx.events.emit(self.pod, "Normal", "Killing", reason)
        c.stop_probes()
        began = time.monotonic()
        pre_stop = (c.spec.get("lifecycle") or {}).get("preStop")
        if pre_stop and grace > 0:
            target = self._target(c, self.ctx.base_env, proc)
            await lifecycle.run_hook(pre_stop, target, grace)
        await proc.stop(max(0.0, grace - (time.monotonic() - began)))
        self._on_exit(c, proc)

    async def _shutdown(self, grace: float, delete: bool) -> None:
        await asyncio.gather(*(self._kill(c, f"Stopping container {c.name}", grace) for c in self.containers if c.proc))
        # Like the kubelet, reclaim the pod's resources before the API object may go.
        sandbox.remove(self.ctx.layout, self.uid)
        self.ctx.allocations.release(self.uid)
        if delete:
            if not self.ctx.node_reachable(self.node):
                self.wake_at(time.time() + 2.0)
                return
            try:
                await decode(
                    self.ctx.kube.core.delete_namespaced_pod_without_preload_content(
                        self.name,
                        self.namespace,
                        body={"gracePeriodSeconds": 0, "preconditions": {"uid": self.uid}},
                        grace_period_seconds=0,
                    )
                )
            except ApiError as err:
                if err.status not in (404, 409):
                    raise
        self.done = True

    # ----- status -------------------------------------------------------------------------------------------

    async def _report(self) -> None:
        pod = self.pod
        if pod is None or not self.ctx.node_reachable(self.node):
            return
        status = pod_status(
            pod,
            sandbox_ready=self.sandbox_ready,
            init_views=[c.view() for c in self.init],
            views=[c.view() for c in self.main],
            pod_ip=self.ip if self.sandbox_ready else "",  # no address before the sandbox exists
            host_ip=HOST_IP,
            start_time=self.start_time,
            now=time.time(),
            reported=self.reported,
        )
        if self.rejection is not None:
            status.update(phase="Failed", reason=self.rejection[0], message=self.rejection[1])
        if status == self.reported:
            return
        try:
            await decode(
                self.ctx.kube.core.patch_namespaced_pod_status_without_preload_content(
                    self.name, self.namespace, {"status": status}, _content_type=MERGE_PATCH
                )
            )
        except API_ERRORS as err:
            if not (isinstance(err, ApiError) and err.status == 404):
                log.warning("pod %s/%s: status update failed: %s", self.namespace, self.name, err)
                self.wake_at(time.time() + 2.0)
            return
        self.reported = status
