"""Process lifecycle: listen, "load weights", warm up, serve, drain on SIGTERM.

Timeline (rank 0): the port listens at once and answers 503 on /health*, /ready and the generation routes
while Starting; after SGLANG_SIM_STARTUP_SECONDS (scaled) either the simulated scheduler crashes
(SGLANG_SIM_FAIL_STARTUP: SGLang-like error, exit 1) or one warmup request runs (skipped with
--skip-server-warmup), the status turns Up and "The server is fired up and ready to roll!" is logged.
SIGTERM/SIGINT: stop listening, let in-flight requests finish for up to SGLANG_SIM_DRAIN_SECONDS, exit 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import time
from collections.abc import Callable, Mapping

from aiohttp import web

from . import disagg
from .app import SimContext, build_app
from .args import ServerArgs
from .args import per_rank as args_per_rank
from .bootstrap import BootstrapServer
from .engine import Engine, EngineConfig
from .knobs import SimKnobs
from .leader import LeaderMirror, leader_url
from .metrics import PodIdentity, SimMetrics
from .pd_runtime import PdRuntime
from .runtime import Runtime
from .views import Capacity

log = logging.getLogger("sglang.srt.entrypoints.http_server")

FAILURES = {
    "oom": (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
        "of 139.81 GiB of which 1.02 GiB is free. Capture cuda graph failed."
    ),
    "nccl": (
        "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error, "
        "NCCL version 2.21.5 (simulated: rank 0 could not reach its peers at --dist-init-addr)"
    ),
}


def capacity(args: ServerArgs, knobs: SimKnobs) -> Capacity:
    """SGLang's arithmetic (`capacity.running_requests_per_rank`): attention DP divides --max-running-requests among
    its ranks; without the flag each scheduler has its own default (SGLANG_SIM_MAX_RUNNING, or SLOTS_PER_GPU x tp),
    never divided."""
    # launch_problem refused 0 before we get here
    per_rank = max(1, args_per_rank(args, knobs.default_running(args.tp_size)))
    mrr = args.max_running_requests if args.max_running_requests is not None else per_rank * args.num_dp_ranks
    return Capacity(
        context_length=args.context_length or knobs.context_length,
        max_running_requests=mrr,
        max_running_per_rank=per_rank,
        max_total_tokens_per_rank=args.max_total_tokens or knobs.max_total_tokens,
    )


def engine_config(args: ServerArgs, knobs: SimKnobs, cap: Capacity) -> EngineConfig:
    dispatch = (
        args.load_balance_method if args.load_balance_method in ("total_requests", "total_tokens") else "round_robin"
    )
    return EngineConfig(
        num_ranks=args.num_dp_ranks,
        max_running_per_rank=cap.max_running_per_rank,
        max_total_tokens_per_rank=cap.max_total_tokens_per_rank,
        prefill_tokens_per_s=knobs.effective_prefill_rate,
        decode_tokens_per_s=knobs.effective_decode_rate,
        prefix_cache=not args.disable_radix_cache and not knobs.cache_disabled,
        dispatch=dispatch,
    )


def pod_identity(env: Mapping[str, str], knobs: SimKnobs, hostname: str) -> PodIdentity:
    return PodIdentity(
        hostname=env.get("NODE_NAME") or hostname,
        pod=env.get("POD_NAME") or None,
        namespace=env.get("POD_NAMESPACE") or None,
        container="sglang",
        gpu_model=knobs.gpu_model,
    )


class Simulator:
    def __init__(
        self,
        args: ServerArgs,
        knobs: SimKnobs,
        env: Mapping[str, str],
        launch_command: str,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.args = args
        self.knobs = knobs
        self.cap = capacity(args, knobs)
        self.mirror: LeaderMirror | None = None
        self.bootstrap: BootstrapServer | None = None
        runtime: Runtime | None = None
        metrics: SimMetrics | None = None
        pd: PdRuntime | None = None
        busy: Callable[[], list[float]]
        if args.node_rank == 0:
            metrics = SimMetrics(args)
            engine = Engine(engine_config(args, knobs, self.cap), clock())
            runtime = Runtime(engine, metrics, clock, stream_interval=args.stream_interval)
            busy = lambda: [r.busy_fraction for r in runtime.loads()]  # noqa: E731
            if disagg.is_pd(args):
                if args.disaggregation_mode == "prefill":
                    self.bootstrap = BootstrapServer(args.host, args.disaggregation_bootstrap_port, args.sglang_version)
                pd = PdRuntime(
                    args,
                    knobs,
                    runtime,
                    metrics,
                    disagg.timeouts_from_env(env),
                    self.crash,
                    self.cap.max_running_per_rank,
                    self.bootstrap,
                )
        else:
            url = leader_url(args, env.get("SGLANG_SIM_LEADER_URL")) if args.enable_metrics else None
            poll = min(1.0, max(0.1, knobs.time_scale))
            self.mirror = LeaderMirror(url, args.api_key, args.num_dp_ranks, poll, clock)
            busy = self.mirror.busy
        self.ctx = SimContext(
            args=args,
            knobs=knobs,
            cap=self.cap,
            identity=pod_identity(env, knobs, socket.gethostname()),
            launch_command=launch_command,
            runtime=runtime,
            metrics=metrics,
            busy=busy,
            pd=pd,
        )
        self.exit_code = 0
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._runner: web.AppRunner | None = None
        self._t0 = clock()
        self._clock = clock

    @property
    def port(self) -> int:
        assert self._runner is not None
        return int(self._runner.addresses[0][1])

    @property
    def status(self) -> str:
        return self.ctx.life.status

    @property
    def stopped(self) -> bool:
        """Whether the process is on its way out (SIGTERM, a simulated crash)."""
        return self._stop.is_set()

    def crash(self, exception: str) -> None:
        """A scheduler exception: SGLang's scheduler logs it and SIGQUITs the launcher, which exits 1."""
        log.error("Scheduler hit an exception: Traceback (most recent call last):\n%s", exception)
        log.error("Received sigquit from a child process. It usually means the child failed.")
        self.stop(1)

    async def start(self) -> None:
        drain = max(0.01, self.knobs.drain_seconds)  # aiohttp reads a timeout of 0 as "wait forever"
        self._runner = web.AppRunner(build_app(self.ctx), access_log=None, shutdown_timeout=drain)
        await self._runner.setup()
        await web.TCPSite(self._runner, self.args.host, self.args.port).start()
        if self.bootstrap is not None and self.knobs.bootstrap_down:
            log.warning(
                "Simulated fault (SGLANG_SIM_BOOTSTRAP_DOWN): the bootstrap server is not started; %s:%d refuses "
                "connections, so no decode server can fetch this prefill's KV",
                self.bootstrap.host, self.bootstrap.port,
            )  # fmt: skip
        elif self.bootstrap is not None:
            try:
                await self.bootstrap.start()
            except OSError as e:
                raise OSError(f"bootstrap server {self.bootstrap.host}:{self.bootstrap.port}: {e}") from e
            log.info(
                "CommonKVBootstrapServer started successfully on %s:%d", self.bootstrap.host, self.bootstrap.bound_port
            )
        self._tasks.append(asyncio.create_task(self._startup()))
        if self.mirror is not None:
            self._tasks.append(asyncio.create_task(self.mirror.run()))

    async def _startup(self) -> None:
        a = self.args
        log.info(
            "server_args=ServerArgs(model_path=%r, served_model_name=%r, tp_size=%d, dp_size=%d, attn_dp_size=%d, "
            "ep_size=%d, nnodes=%d, node_rank=%d, port=%d)",
            a.model_path, a.served_model_name, a.tp_size, a.dp_size, a.attn_dp_size, a.ep_size, a.nnodes,
            a.node_rank, a.port,
        )  # fmt: skip
        log.info("Load weight begin. (simulated, %.1fs)", self.knobs.scaled(self.knobs.startup_seconds))
        await asyncio.sleep(self.knobs.scaled(self.knobs.startup_seconds))
        if self.knobs.fails:
            reason = FAILURES.get(self.knobs.fail_startup.strip().lower(), "RuntimeError: simulated start-up failure")
            log.error("Scheduler hit an exception: Traceback (most recent call last):\n%s", reason)
            log.error("Received sigquit from a child process. It usually means the child failed.")
            self.stop(1)
            return
        log.info(
            "max_total_num_tokens=%d, max_running_requests=%d, context_len=%d",
            self.cap.max_total_tokens_per_rank, self.cap.max_running_per_rank, self.cap.context_length,
        )  # fmt: skip
        if self.bootstrap is not None:  # each prefill rank registers once its KV pool exists (PUT /route)
            layout = disagg.prefill_layout(self.args, self.port)
            self.bootstrap.register_ranks(layout, self.args.host, self.bootstrap.bound_port)
        if self.ctx.runtime is not None and not self.args.skip_server_warmup:
            await self.ctx.runtime.warmup()
        self.ctx.life.startup_time = self._clock() - self._t0
        self.ctx.life.status = "Up"
        log.info("The server is fired up and ready to roll!")

    def stop(self, code: int = 0) -> None:
        if not self._stop.is_set():
            self.exit_code = code
            self._stop.set()

    async def close(self) -> None:
        self.ctx.life.status = "Exiting"
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._runner is not None:
            await self._runner.cleanup()
        if self.ctx.pd is not None:
            await self.ctx.pd.close()
        if self.bootstrap is not None:
            await self.bootstrap.close()

    async def serve(self) -> int:
        """Run until SIGTERM/SIGINT (exit 0) or a simulated crash (exit 1)."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._on_signal, sig)
        try:
            await self.start()
            await self._stop.wait()
        except OSError as e:
            log.error("Failed to bind %s:%d: %s", self.args.host, self.args.port, e)
            self.exit_code = 1
        finally:
            await self.close()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)
        return self.exit_code

    def _on_signal(self, sig: signal.Signals) -> None:
        log.info("Received %s, shutting down gracefully.", sig.name)
        self.stop(0)
