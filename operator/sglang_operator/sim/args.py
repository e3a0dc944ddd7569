"""`sglang.launch_server` flags: parsing, SGLang 0.5.23's resolution rules and its start-up validation.

The parser mirrors SGLang's argparse (same option strings, dests and defaults, `allow_abbrev` on, so `--tp 8
--dp 2` work as unique prefixes). Unknown flags are returned to the caller to be logged, never fatal: the
simulator must accept whatever the operator renders for any SGLang version. `resolve` is pure: it applies the
same rewrites (`--dp N --enable-dp-attention` -> attention DP N; an all-to-all MoE backend forces ep = tp;
dp-lm-head is dropped without DP) and raises `ArgsError` with SGLang's message where SGLang would crash.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

MOE_A2A_BACKENDS = (
    "none",
    "deepep",
    "mooncake",
    "nixl",
    "mori",
    "ascend_fuseep",
    "flashinfer",
    "megamoe",
    "deepep_v2",
    "pplx",
    "ascend_tp",
    "flashinfer_megamoe",
)
# Backends whose all-to-all spans the whole TP group, so SGLang sets ep_size = tp_size (overrides.py).
A2A_EP_SPANNING_BACKENDS = frozenset(
    {
        "megamoe",
        "deepep",
        "deepep_v2",
        "mooncake",
        "nixl",
        "ascend_fuseep",
        "flashinfer",
        "flashinfer_megamoe",
        "mori",
        "pplx",
    }
)
LOAD_BALANCE_METHODS = ("auto", "round_robin", "follow_bootstrap_room", "total_requests", "total_tokens")
DISAGGREGATION_MODES = ("null", "prefill", "decode")


class ArgsError(Exception):
    """A start-up failure SGLang reports with `kind: message` (AssertionError or ValueError) and exit 1."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message

    def __str__(self) -> str:
        return f"{self.kind}: {self.message}"


@dataclass(frozen=True)
class ServerArgs:
    """The resolved arguments, named as in SGLang's `server_args.resolved_dict()`."""

    model_path: str
    tokenizer_path: str
    served_model_name: str
    host: str
    port: int
    tp_size: int
    pp_size: int
    dp_size: int
    attn_dp_size: int
    attn_cp_size: int
    moe_dp_size: int
    ep_size: int
    moe_a2a_backend: str
    enable_dp_attention: bool
    enable_dp_lm_head: bool
    load_balance_method: str
    nnodes: int
    node_rank: int
    dist_init_addr: str | None
    max_running_requests: int | None
    max_total_tokens: int | None
    mem_fraction_static: float | None
    context_length: int | None
    chunked_prefill_size: int | None
    page_size: int
    disable_radix_cache: bool
    enable_metrics: bool
    api_key: str | None
    admin_api_key: str | None
    trust_remote_code: bool
    skip_server_warmup: bool
    disaggregation_mode: str
    stream_interval: int
    revision: str | None
    download_dir: str | None
    log_level: str

    @property
    def num_dp_ranks(self) -> int:
        """Schedulers behind the one HTTP server: in-process DP replicas or attention-DP ranks."""
        return self.attn_dp_size if self.attn_dp_size > 1 else self.dp_size

    @property
    def gpus_per_replica(self) -> int:
        """SGLang's `compute_world_size`: attention DP runs inside the TP group and adds no GPUs."""
        return self.dp_size * self.tp_size * self.pp_size

    @property
    def gpus_per_node(self) -> int:
        return self.gpus_per_replica // self.nnodes

    def public_dict(self) -> dict[str, Any]:
        """What `/server_info` shows; API keys are never echoed back."""
        out = asdict(self)
        out["api_key"] = None
        out["admin_api_key"] = None
        return out


def build_parser() -> argparse.ArgumentParser:
    """SGLang's option strings and defaults for every flag the simulator reads (plus common no-ops)."""
    p = argparse.ArgumentParser(prog="sglang serve", allow_abbrev=True)
    p.add_argument("--model-path", "--model", dest="model_path", required=True)
    p.add_argument("--tokenizer-path", dest="tokenizer_path")
    p.add_argument("--revision")
    p.add_argument("--trust-remote-code", action="store_true")
    p.add_argument("--context-length", type=int)
    p.add_argument("--mem-fraction-static", type=float)
    p.add_argument("--max-running-requests", type=int)
    p.add_argument("--max-total-tokens", type=int)
    p.add_argument("--chunked-prefill-size", type=int)
    p.add_argument("--page-size", type=int, default=1)
    p.add_argument("--disable-radix-cache", action="store_true")
    p.add_argument("--nccl-port", type=int)
    p.add_argument("--dist-timeout", type=int)
    p.add_argument("--dist-init-addr", "--nccl-init-addr", dest="dist_init_addr")
    p.add_argument("--nnodes", type=int, default=1)
    p.add_argument("--node-rank", type=int, default=0)
    p.add_argument("--tp-size", "--tensor-parallel-size", dest="tp_size", type=int, default=1)
    p.add_argument("--pp-size", "--pipeline-parallel-size", dest="pp_size", type=int, default=1)
    p.add_argument("--dp-size", "--data-parallel-size", dest="dp_size", type=int, default=1)
    p.add_argument("--attn-dp-size", "--attention-data-parallel-size", dest="attn_dp_size", type=int, default=1)
    p.add_argument("--load-balance-method", default="auto", choices=LOAD_BALANCE_METHODS)
    p.add_argument("--attn-cp-size", "--attention-context-parallel-size", dest="attn_cp_size", type=int, default=1)
    p.add_argument("--moe-dp-size", "--moe-data-parallel-size", dest="moe_dp_size", type=int, default=1)
    p.add_argument("--enable-dp-lm-head", action="store_true")
    p.add_argument("--enable-dp-attention", action="store_true")
    p.add_argument("--base-gpu-id", type=int, default=0)
    p.add_argument("--gpu-id-step", type=int, default=1)
    p.add_argument("--watchdog-timeout", type=float, default=300)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--grpc-mode", action="store_true")
    p.add_argument("--skip-server-warmup", action="store_true")
    p.add_argument("--api-key")
    p.add_argument("--admin-api-key")
    p.add_argument("--served-model-name")
    p.add_argument("--enable-metrics", action="store_true")
    p.add_argument("--enable-metrics-for-all-schedulers", action="store_true")
    p.add_argument("--extra-metric-labels")
    p.add_argument("--ep-size", "--expert-parallel-size", "--ep", dest="ep_size", type=int, default=1)
    p.add_argument("--moe-a2a-backend", default="none", choices=MOE_A2A_BACKENDS)
    p.add_argument("--disaggregation-mode", default="null", choices=DISAGGREGATION_MODES)
    p.add_argument("--download-dir")
    p.add_argument("--stream-interval", type=int, default=1)
    p.add_argument("--log-level", default="info")
    return p


def parse(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    """Parse known flags; return the namespace and the unknown leftovers (to be logged, not fatal).

    argparse errors (missing --model-path, a non-integer --tp) exit 2 with usage, as SGLang does.
    """
    return build_parser().parse_known_args(list(argv))


@dataclass(frozen=True)
class Resolution:
    args: ServerArgs
    notes: tuple[str, ...]  # log lines SGLang prints while resolving (deprecations, overrides)


def resolve(ns: argparse.Namespace) -> Resolution:
    """SGLang 0.5.23's resolution hooks then `check_server_args`, in the same order."""
    notes: list[str] = []
    dp, attn_dp, tp, ep = ns.dp_size, ns.attn_dp_size, ns.tp_size, ns.ep_size

    # parallel_hook.handle_deprecated_dp_attention
    if ns.enable_dp_attention:
        notes.append(
            "--enable-dp-attention is deprecated; use --attn-dp-size <dp-size> instead of "
            "--dp-size <dp-size> --enable-dp-attention."
        )
        if attn_dp == 1:
            attn_dp, dp = dp, 1

    # parallel_hook.handle_data_parallelism
    if attn_dp < 1:
        raise ArgsError("ValueError", f"--attn-dp-size must be positive (got {attn_dp}).")
    if dp < 1 or tp < 1 or ns.pp_size < 1 or ns.nnodes < 1:
        raise ArgsError("ValueError", "tp_size, pp_size, dp_size and nnodes must be positive.")
    if attn_dp > 1 and dp > 1:
        raise ArgsError(
            "ValueError",
            f"--dp-size {dp} with --attn-dp-size {attn_dp}: data-parallel replicas combined with "
            "attention data parallelism are not supported.",
        )
    if attn_dp > 1 and tp % attn_dp != 0:
        raise ArgsError("AssertionError", f"tp_size ({tp}) must be divisible by attn_dp_size ({attn_dp})")

    # parallel_hook.handle_context_parallelism
    if ns.attn_cp_size > 1:
        if tp % ns.attn_cp_size != 0:
            raise ArgsError("AssertionError", "tp_size must be divisible by attn_cp_size")
        if tp % (attn_dp * ns.attn_cp_size) != 0:
            raise ArgsError("AssertionError", "tp_size must be divisible by attn_dp_size * attn_cp_size")

    # overrides._a2a_ep_size
    if ns.moe_a2a_backend in A2A_EP_SPANNING_BACKENDS and ep != tp:
        notes.append(f"The expert parallel size is adjusted from {ep} to the tensor parallel size {tp}.")
        ep = tp
    if ns.moe_dp_size > 1:
        if tp % ns.moe_dp_size != 0:
            raise ArgsError("AssertionError", f"tp_size ({tp}) must be divisible by moe_dp_size ({ns.moe_dp_size})")
        if ep * ns.moe_dp_size > tp or (ep > 1 and ep * ns.moe_dp_size != tp):
            raise ArgsError("AssertionError", "ep_size * moe_dp_size must equal tp_size")
    if ep < 1 or tp % ep != 0:
        raise ArgsError("AssertionError", f"tp_size ({tp}) must be divisible by ep_size ({ep})")

    # overrides._data_parallelism_defaults / _dp_lm_head_validation
    dp_lm_head = bool(ns.enable_dp_lm_head) and max(dp, attn_dp) > 1
    if dp_lm_head and attn_dp == 1:
        raise ArgsError("AssertionError", "--enable-dp-lm-head requires attention DP (--attn-dp-size).")

    served = ns.served_model_name or ns.model_path
    lb = ns.load_balance_method
    if lb == "auto":
        lb = "follow_bootstrap_room" if ns.disaggregation_mode == "prefill" else "round_robin"

    # validation_hook.check_server_args
    if (tp * ns.pp_size) % ns.nnodes != 0:
        raise ArgsError("AssertionError", "tp_size must be divisible by number of nodes")
    if dp > 1 and ns.nnodes != 1:
        raise ArgsError(
            "AssertionError",
            "multi-node data-parallel replicas are not supported; use attention DP (--attn-dp-size) across nodes",
        )
    if ":" in served:
        raise ArgsError(
            "AssertionError",
            f"served_model_name {served!r} must not contain ':' (reserved for model:adapter LoRA syntax)",
        )
    if not 0 <= ns.node_rank < ns.nnodes:
        raise ArgsError("AssertionError", f"node_rank ({ns.node_rank}) must be in [0, nnodes={ns.nnodes})")
    if ns.nnodes > 1 and not ns.dist_init_addr:
        raise ArgsError("AssertionError", "--dist-init-addr is required when --nnodes > 1")

    args = ServerArgs(
        model_path=ns.model_path,
        tokenizer_path=ns.tokenizer_path or ns.model_path,
        served_model_name=served,
        host=ns.host,
        port=ns.port,
        tp_size=tp,
        pp_size=ns.pp_size,
        dp_size=dp,
        attn_dp_size=attn_dp,
        attn_cp_size=ns.attn_cp_size,
        moe_dp_size=ns.moe_dp_size,
        ep_size=ep,
        moe_a2a_backend=ns.moe_a2a_backend,
        enable_dp_attention=attn_dp > 1,
        enable_dp_lm_head=dp_lm_head,
        load_balance_method=lb,
        nnodes=ns.nnodes,
        node_rank=ns.node_rank,
        dist_init_addr=ns.dist_init_addr,
        max_running_requests=ns.max_running_requests,
        max_total_tokens=ns.max_total_tokens,
        mem_fraction_static=ns.mem_fraction_static,
        context_length=ns.context_length,
        chunked_prefill_size=ns.chunked_prefill_size,
        page_size=ns.page_size,
        disable_radix_cache=ns.disable_radix_cache,
        enable_metrics=ns.enable_metrics,
        api_key=ns.api_key,
        admin_api_key=ns.admin_api_key,
        trust_remote_code=ns.trust_remote_code,
        skip_server_warmup=ns.skip_server_warmup,
        disaggregation_mode=ns.disaggregation_mode,
        stream_interval=ns.stream_interval,
        revision=ns.revision,
        download_dir=ns.download_dir,
        log_level=ns.log_level,
    )
    return Resolution(args=args, notes=tuple(notes))
