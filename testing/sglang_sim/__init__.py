"""SGLang engine simulator: `python3 -m sglang.launch_server` for clusters without GPUs.

Plays one SGLang release (`--sim-version X` before the flags, else SGLANG_SIM_VERSION, else the default image's
release, 0.5.23): parses `sglang.launch_server`'s flags exactly as that release does (an unknown flag, a flag the
release does not have, a value it does not accept: argparse's message, exit 2), applies its argument resolution
and start-up checks (same messages, exit 1), and serves its HTTP API (`/ready` only from 0.5.20; `/get_load`,
up to 0.5.20, is not simulated), JSON shapes, status codes and Prometheus metric names, so the smg router, the
operator and Prometheus cannot tell it from the real server. Entry points: `python -m sglang_sim
[--sim-version X] <flags>` and `main(argv)`.

Simulation knobs (environment; pods set them through `engine.env`):

    SGLANG_SIM_VERSION               the SGLang release to play (the local cluster sets it from the image tag)
    SGLANG_SIM_STARTUP_SECONDS       weight-load delay before /health and /ready turn 200 (default 2)
    SGLANG_SIM_PREFILL_TOKENS_PER_S  prefill rate per request, uncached prompt tokens (default 20000)
    SGLANG_SIM_DECODE_TOKENS_PER_S   decode rate per request (default 100, i.e. 10 ms per token)
    SGLANG_SIM_OUTPUT_TOKENS         output length when a request sets no max_tokens / max_new_tokens
                                     (default 16; such requests end with finish_reason "stop")
    SGLANG_SIM_MAX_RUNNING           running requests per scheduler when --max-running-requests is absent
                                     (default 64, the operator's assumption; per scheduler, never divided)
    SGLANG_SIM_MAX_TOTAL_TOKENS      KV pool per DP rank when --max-total-tokens is absent (default 200000)
    SGLANG_SIM_CONTEXT_LENGTH        context length when --context-length is absent (default 32768)
    SGLANG_SIM_FAIL_STARTUP          crash after the start-up delay with exit 1: "oom" (CUDA OOM during
                                     graph capture), "nccl" (NCCL error), any other non-false value (generic)
    SGLANG_SIM_TIME_SCALE            multiplies every simulated duration: start-up, prefill, decode, the ~1 s
                                     /health generation probe (default 1; tests use e.g. 0.1)
    SGLANG_SIM_DRAIN_SECONDS         SIGTERM grace for in-flight requests, wall seconds (default 5)
    SGLANG_SIM_GPU_MODEL             modelName label of DCGM_FI_DEV_GPU_UTIL (default "NVIDIA H200")
    SGLANG_SIM_SLOTS_PER_GPU         > 0: without --max-running-requests, each scheduler runs this x tp requests (the
                                     KV pool grows with the TP group's GPUs); 0 (default): SGLANG_SIM_MAX_RUNNING
    SGLANG_SIM_GPU_SPEED             prefill and decode rates x this: the GPU type (default 1; e.g. 0.5)
    SGLANG_SIM_LEADER_URL            ranks >= 1: rank 0's base URL for mirroring GPU activity (see leader.py)
    SGLANG_SIM_KV_BYTES_PER_TOKEN    PD: KV bytes per prompt token handed from prefill to decode (default 131072,
                                     an 8B-class model in bf16)
    SGLANG_SIM_KV_TRANSFER_GBPS      PD: GB/s of one KV transfer (default 25); transfer time = tokens x bytes /
                                     bandwidth, scaled like every simulated duration
    SGLANG_SIM_BOOTSTRAP_DOWN        PD fault: a prefill does not start its bootstrap server (the port refuses);
                                     with SGLANG_SIM_BOOTSTRAP_DOWN_REPLICAS=1,2 only on those replicas
                                     (SGLANG_SIM_REPLICA)
    SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION  SGLang's own switch: false makes /health answer at once
    SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT   SGLang's own (whole seconds, default 300, not scaled): a prefill aborts a
                                     room whose decode has not sent its metadata by then
    SGLANG_DISAGGREGATION_WAITING_TIMEOUT     SGLang's own (whole seconds, default 300, not scaled): a decode aborts a
                                     room whose KV has not arrived by then
    POD_NAME, POD_NAMESPACE, NODE_NAME        labels of the DCGM gauge (downward API)

Model (engine.py): per DP rank a FIFO queue and at most max_running_requests running (in-process DP
multiplies the replica's concurrency by dp; attention DP splits the flag's value among its ranks, as SGLang
does); prefill time = uncached prompt tokens / prefill rate; then one token per 1/decode rate; a bounded LRU
prefix cache over 16-token blocks gives cached tokens and `cache_hit_rate`; token usage = tokens held by
running requests / KV pool. Tokens are approximated as 4 characters of text (`input_ids` count as given);
output text is deterministic filler derived from the prompt.

PD disaggregation (`--disaggregation-mode prefill|decode`, `disagg.py`, `bootstrap.py`, `pd_runtime.py`): a prefill
serves SGLang's bootstrap server on --host:--disaggregation-bootstrap-port, holds each room until its decode has
preallocated, prefills it, writes its KV (the stand-in: decode's `POST /sim/kv_transfer` on that port) and answers one
token; the decode fetches the prefill's layout (dying on a page-size / KV-dtype / PP mismatch, as SGLang does),
preallocates, waits for the KV and generates. docs/sim-pd.md has the model and its knobs.

GPU utilisation (`DCGM_FI_DEV_GPU_UTIL`, on /metrics with --enable-metrics, one series per GPU of this pod,
gpus = tp x dp x pp / nnodes) is the fraction of the last 10 s during which the GPU's DP rank had a running
request, in percent: like the real gauge it saturates as soon as any batch is running.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shlex
import sys
from collections.abc import Sequence

from .args import ArgsError, launch_problem, parse, resolve
from .disagg import timeouts_from_env
from .knobs import knobs_from_env
from .server import Simulator
from .versions import UnknownVersion, split_version

__all__ = ["main"]

log = logging.getLogger("sglang.launch_server")


def _configure_logging() -> None:
    root = logging.getLogger()
    if not root.handlers:
        logging.basicConfig(
            level=logging.INFO, format="[%(asctime)s] %(message)s", datefmt="%Y-%m-%d %H:%M:%S", stream=sys.stderr
        )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the simulator with `sglang.launch_server` flags; returns the process exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    _configure_logging()
    try:
        version, argv = split_version(argv, os.environ)
    except UnknownVersion as e:
        print(f"simulator: {e}", file=sys.stderr)
        return 2
    try:
        ns = parse(argv, version)
    except SystemExit as e:  # argparse: usage error (2) or --help (0)
        return e.code if isinstance(e.code, int) else 1
    try:
        knobs = knobs_from_env(os.environ)
        timeouts_from_env(os.environ)  # SGLang reads its PD timeouts as integers
        resolution = resolve(ns, version)
    except ArgsError as e:
        log.error("Failed to start the server: %s", e)
        print(f"{e.kind}: {e.message}", file=sys.stderr)
        return 1
    except ValueError as e:
        log.error("Invalid simulator setting: %s", e)
        return 1
    for note in resolution.notes:
        log.warning(note)
    problem = launch_problem(resolution.args, knobs.default_running(resolution.args.tp_size))
    if problem is not None:
        log.error("Simulated launch failure (SGLang %s accepts these arguments but cannot run): %s", version, problem)
        return 1
    command = "python3 -m sglang.launch_server " + shlex.join(argv)
    return asyncio.run(Simulator(resolution.args, knobs, os.environ, command).serve())
