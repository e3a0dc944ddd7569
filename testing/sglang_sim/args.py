"""`sglang.launch_server` flags as a given SGLang release parses and checks them.

`parse` uses the release's own parser definitions (`versions`, generated from the wheels): the same option strings,
aliases, value counts, types and choices, `allow_abbrev` on, and argparse's exit 2 with its message for an unknown
flag, a flag the release does not have yet (`--attn-dp-size` before 0.5.22) or a value it does not accept
(`--moe-a2a-backend deepep_v2` before 0.5.19). `resolve` is pure: the release's resolution (`--dp N
--enable-dp-attention` -> attention DP N; an all-to-all MoE backend forces ep = tp; dp-lm-head is dropped without
DP) and its start-up checks on the flags the simulator models, each from the release that added it, with that
release's message (`ArgsError`, exit 1). Nothing SGLang accepts is refused here: what it accepts but cannot run
(tp 0, a node rank outside the node count) is `launch_problem`, a simulated launch failure.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from sglang_operator.api.releases import Version, parse_version
from sglang_operator.capacity import running_requests_per_rank

from . import versions

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
    sglang_version: str = field(default=versions.DEFAULT_VERSION)
    # PD disaggregation (resolved as the release does; see `_pd_checks`)
    disaggregation_transfer_backend: str = "mooncake"
    disaggregation_bootstrap_port: int = 8998
    disaggregation_ib_device: str | None = None
    disaggregation_decode_allocation_policy: str = "early"
    disaggregation_decode_enable_radix_cache: bool = False
    disaggregation_decode_extra_slots: int | None = None  # the flag (0.5.14+); None: SGLang's default, see disagg.py
    disaggregation_decode_tp: int | None = None  # 0.5.9 only, prefill side
    disaggregation_decode_dp: int | None = None  # 0.5.9 only, prefill side
    disaggregation_prefill_pp: int | None = 1  # 0.5.9 only
    kv_cache_dtype: str = "auto"

    @property
    def num_dp_ranks(self) -> int:
        """Schedulers behind the one HTTP server: in-process DP replicas or attention-DP ranks."""
        return self.attn_dp_size if self.attn_dp_size > 1 else self.dp_size

    @property
    def attn_tp_size(self) -> int:
        """Attention TP width: the TP group split among attention-DP ranks and context-parallel ranks."""
        return max(1, self.tp_size // max(1, self.attn_dp_size) // max(1, self.attn_cp_size))

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
        del out["sglang_version"]  # not a server argument; /server_info reports it as "version"
        out["api_key"] = None
        out["admin_api_key"] = None
        return out


def parse(argv: Sequence[str], version: str = versions.DEFAULT_VERSION) -> argparse.Namespace:
    """Parse as `version` does; argparse errors (an unknown flag, a missing --model-path, a non-integer --tp, a
    choice the release lacks) exit 2 with usage, as SGLang does. `--help` exits 0."""
    return versions.parser_for(version).parse_args(list(argv))


# Up to 0.5.13 the parallel sizes were parsed under their long names and copied over in `from_cli_args`.
_LEGACY_DESTS = {
    "tp_size": "tensor_parallel_size",
    "pp_size": "pipeline_parallel_size",
    "dp_size": "data_parallel_size",
    "ep_size": "expert_parallel_size",
    "attn_cp_size": "attention_context_parallel_size",
    "moe_dp_size": "moe_data_parallel_size",
}


def _get(ns: argparse.Namespace, dest: str, default: Any) -> Any:
    """A parsed value, or the default when the flag was not given or the release has no such flag."""
    value = getattr(ns, dest, None)
    if value is None and dest in _LEGACY_DESTS:
        value = getattr(ns, _LEGACY_DESTS[dest], None)
    return default if value is None else value


# The start-up checks below, by the release that introduced them (read from the wheels' server_args.py and
# arg_groups/*; tests/integration/sim/test_sim_versions.py holds one case per boundary).
ATTN_DP_FLAG_SINCE: Version = (0, 5, 22)  # --attn-dp-size, the deprecation rewrite, its own positivity check
FLASHINFER_NEEDS_FULL_ATTN_DP_SINCE: Version = (0, 5, 13)
PPLX_NEEDS_ATTN_DP_SINCE: Version = (0, 5, 22)
# PD disaggregation: 0.5.9 alone has --disaggregation-decode-tp/-dp/-prefill-pp and checks TP divisibility at start;
# from 0.5.10 a prefill server refuses the `fake` backend.
PD_PREFILL_REFUSES_FAKE_SINCE: Version = (0, 5, 10)
PD_DECODE_RADIX_SINCE: Version = (0, 5, 11)  # --disaggregation-decode-enable-radix-cache
PD_HOOK_BEFORE_DP_SINCE: Version = (0, 5, 13)  # pd_disaggregation_hook runs before the data-parallel checks
PD_DECODE_RADIX_FAKE_SINCE: Version = (0, 5, 14)
PD_HOST_RECEIVE_SINCE: Version = (0, 5, 21)  # --disaggregation-decode-host-receive-threshold
PD_ALLOCATION_POLICY_SINCE: Version = (0, 5, 22)  # --disaggregation-decode-allocation-policy


def messages(v: Version) -> dict[str, str | None]:
    """The start-up checks `resolve` applies for release `v`, by name, with that release's message; None where the
    release does not check it. tests/compat finds each message in the release's source and none before it."""
    new = v >= ATTN_DP_FLAG_SINCE
    return {
        "lm_head": "--enable-dp-lm-head requires attention DP (--attn-dp-size)."
        if new
        else "Please enable dp attention when setting enable_dp_lm_head. ",
        "multi_node_dp": "multi-node data-parallel replicas are not supported; use attention DP (--attn-dp-size) "
        "across nodes"
        if new
        else "multi-node data parallel is not supported unless dp attention!",
        "flashinfer": (
            "Flashinfer MoE A2A requires --attn-dp-size equal to --tp-size, except for Muse Spark TP4/EP4 or "
            "TP8/EP8 prefill sequence parallelism."
            if v >= (0, 5, 23)
            else "Flashinfer MoE A2A is only supported with --attn-dp-size equal to --tp-size"
            if new
            else "Flashinfer MoE A2A is only supported with dp_size == tp_size and --enable-dp-attention"
            if v >= FLASHINFER_NEEDS_FULL_ATTN_DP_SINCE
            else None
        ),
        "flashinfer_megamoe": "FlashInfer MegaMOE is only supported with --attn-dp-size equal to --tp-size"
        if new
        else "FlashInfer MegaMOE is only supported with dp_size == tp_size and --enable-dp-attention"
        if v >= (0, 5, 20)  # the backend itself is new in 0.5.20
        else None,
        "pplx": "moe_a2a_backend='pplx' requires attention DP with at least 2 groups (--attn-dp-size >= 2)."
        if v >= PPLX_NEEDS_ATTN_DP_SINCE
        else None,
        "attn_dp_positive": "--attn-dp-size must be positive (got " if new else None,
        "attn_dp_with_dp": "data-parallel replicas combined with attention data parallelism are not supported."
        if new
        else None,
        "nnodes": "tp_size must be divisible by number of nodes",
        "colon": "served_model_name cannot contain a colon (':') character. The colon is reserved for the "
        "'model:adapter' syntax used in LoRA adapter specification. Invalid value: '",
        # PD disaggregation (server_args._handle_pd_disaggregation, later arg_groups/pd_disaggregation_hook.py)
        "pd_prefill_fake": "Prefill server does not support 'fake' as the transfer backend"
        if v >= PD_PREFILL_REFUSES_FAKE_SINCE
        else None,
        "pd_decode_tp": "Cannot set --disaggregation-decode-tp for the decode engine."
        if v < PD_PREFILL_REFUSES_FAKE_SINCE
        else None,
        "pd_decode_dp": "Cannot set --disaggregation-decode-dp for the decode engine."
        if v < PD_PREFILL_REFUSES_FAKE_SINCE
        else None,
        "pd_tp_multiple": "Different tp size is supported only when one tp is multiple of the other. "
        if v < PD_PREFILL_REFUSES_FAKE_SINCE
        else None,
        "pd_decode_radix_fake": "--disaggregation-decode-enable-radix-cache is incompatible with "
        "--disaggregation-transfer-backend fake"
        if v >= PD_DECODE_RADIX_FAKE_SINCE
        else None,
        "pd_host_receive_threshold": "--disaggregation-decode-host-receive-threshold must be between 0 and 1"
        if v >= PD_HOST_RECEIVE_SINCE
        else None,
        "pd_prefill_complete": "--disaggregation-decode-allocation-policy prefill_complete does not yet support "
        if v >= PD_ALLOCATION_POLICY_SINCE
        else None,
    }


@dataclass(frozen=True)
class Resolution:
    args: ServerArgs
    notes: tuple[str, ...]  # log lines SGLang prints while resolving (deprecations, overrides)


def resolve(ns: argparse.Namespace, version: str = versions.DEFAULT_VERSION) -> Resolution:
    """The release's resolution, then its checks of the flags the simulator models, in SGLang's order."""
    v = parse_version(version)
    msg = messages(v)
    notes: list[str] = []
    tp, pp, nnodes = _get(ns, "tp_size", 1), _get(ns, "pp_size", 1), _get(ns, "nnodes", 1)
    dp, attn_dp, ep = _get(ns, "dp_size", 1), _get(ns, "attn_dp_size", 1), _get(ns, "ep_size", 1)
    enable_dp_attention = bool(_get(ns, "enable_dp_attention", False))
    backend = _get(ns, "moe_a2a_backend", "none")
    attn_cp, moe_dp = _get(ns, "attn_cp_size", 1), _get(ns, "moe_dp_size", 1)

    if v >= ATTN_DP_FLAG_SINCE and enable_dp_attention:
        # parallel_hook.handle_deprecated_dp_attention (handle_data_parallelism checks it after the PD hook)
        notes.append(
            "'--enable-dp-attention' is deprecated and will be removed in a future release. Use "
            "'--attn-dp-size <dp-size>' instead."
        )
        if attn_dp == 1:
            attn_dp, dp = dp, 1
    if v >= PD_HOOK_BEFORE_DP_SINCE:
        pd = _pd_disaggregation(ns, v, msg, notes, tp, pp, dp, attn_cp)
    if v >= ATTN_DP_FLAG_SINCE:
        if attn_dp < 1:
            raise ArgsError("ValueError", f"{msg['attn_dp_positive']}{attn_dp}).")
        if attn_dp > 1 and dp > 1:
            raise ArgsError("ValueError", f"--dp-size {dp} with --attn-dp-size {attn_dp}: {msg['attn_dp_with_dp']}")
    else:
        # server_args._handle_data_parallelism: --dp-size N --enable-dp-attention is attention DP N; dp 1 disables it
        if dp == 1:
            enable_dp_attention = False
        if enable_dp_attention:
            attn_dp, dp = dp, 1
    if attn_dp > 1 and tp % attn_dp != 0:
        raise ArgsError("AssertionError", "")  # `assert tp_size % attn_dp_size == 0`, no message

    # parallel_hook.handle_context_parallelism (only releases that have these flags can set them)
    if attn_cp > 1:
        if tp % attn_cp != 0:
            raise ArgsError("AssertionError", "tp_size must be divisible by attn_cp_size")
        if tp % (attn_dp * attn_cp) != 0:
            raise ArgsError("AssertionError", "tp_size must be divisible by attn_dp_size * attn_cp_size")

    # overrides._a2a_ep_size
    if backend in A2A_EP_SPANNING_BACKENDS and ep != tp:
        notes.append(
            f"{backend} MoE is enabled. The expert parallel size is adjusted from {ep} to the tensor parallel "
            f"size [{tp}]."
        )
        ep = tp
    if moe_dp > 1:
        if tp % moe_dp != 0:
            raise ArgsError("AssertionError", "")
        if ep * moe_dp > tp or (ep > 1 and ep * moe_dp != tp):
            raise ArgsError("AssertionError", "")

    # dp-lm-head: dropped without any DP, refused without attention DP
    dp_lm_head = bool(_get(ns, "enable_dp_lm_head", False)) and max(dp, attn_dp) > 1
    if dp_lm_head and attn_dp == 1:
        raise ArgsError("AssertionError", str(msg["lm_head"]))

    # moe_hook.handle_a2a_moe
    full_attention_dp = attn_dp > 1 and attn_dp == tp
    if backend == "flashinfer_megamoe" and msg["flashinfer_megamoe"] and not full_attention_dp:
        raise ArgsError("AssertionError", msg["flashinfer_megamoe"])
    if backend == "flashinfer" and msg["flashinfer"] and not full_attention_dp:
        raise ArgsError("AssertionError", msg["flashinfer"])
    if backend == "pplx" and msg["pplx"] and attn_dp < 2:
        raise ArgsError("AssertionError", msg["pplx"])

    if v < PD_HOOK_BEFORE_DP_SINCE:  # server_args._handle_pd_disaggregation, after the MoE handling
        # (these releases keep --dp-size N with --enable-dp-attention, so the replica's DP width is max(dp, attn_dp))
        pd = _pd_disaggregation(ns, v, msg, notes, tp, pp, max(dp, attn_dp), attn_cp)

    served = ns.served_model_name or ns.model_path
    disaggregation_mode = _get(ns, "disaggregation_mode", "null")
    lb = _get(ns, "load_balance_method", "auto")
    if lb == "auto":
        lb = "follow_bootstrap_room" if disaggregation_mode == "prefill" else "round_robin"
    elif lb == "round_robin" and disaggregation_mode == "prefill" and v < PD_PREFILL_REFUSES_FAKE_SINCE:
        notes.append(
            "In PD-disaggregation prefill mode, the 'round_robin' load balancing method means `bootstrap_room` "
            "routing (use 'follow_bootstrap_room' instead). Falling back to 'follow_bootstrap_room' for backward "
            "compatibility."
        )
        lb = "follow_bootstrap_room"

    # check_server_args
    if nnodes == 0:
        raise ArgsError("ZeroDivisionError", "integer modulo by zero")
    if (tp * pp) % nnodes != 0:
        raise ArgsError("AssertionError", str(msg["nnodes"]))
    if dp > 1 and nnodes != 1:
        raise ArgsError("AssertionError", str(msg["multi_node_dp"]))
    if ":" in served:
        raise ArgsError(
            "AssertionError",
            f"{msg['colon']}{served}'",
        )

    args = ServerArgs(
        model_path=ns.model_path,
        tokenizer_path=_get(ns, "tokenizer_path", ns.model_path),
        served_model_name=served,
        host=_get(ns, "host", "127.0.0.1"),
        port=_get(ns, "port", 30000),
        tp_size=tp,
        pp_size=pp,
        dp_size=dp,
        attn_dp_size=attn_dp,
        attn_cp_size=attn_cp,
        moe_dp_size=moe_dp,
        ep_size=ep,
        moe_a2a_backend=backend,
        enable_dp_attention=attn_dp > 1,
        enable_dp_lm_head=dp_lm_head,
        load_balance_method=lb,
        nnodes=nnodes,
        node_rank=_get(ns, "node_rank", 0),
        dist_init_addr=_get(ns, "dist_init_addr", None),
        max_running_requests=_get(ns, "max_running_requests", None),
        max_total_tokens=_get(ns, "max_total_tokens", None),
        mem_fraction_static=_get(ns, "mem_fraction_static", None),
        context_length=_get(ns, "context_length", None),
        chunked_prefill_size=_get(ns, "chunked_prefill_size", None),
        page_size=_get(ns, "page_size", 1),
        disable_radix_cache=bool(_get(ns, "disable_radix_cache", False)) or pd.decode_disables_radix,
        enable_metrics=bool(_get(ns, "enable_metrics", False)),
        api_key=_get(ns, "api_key", None),
        admin_api_key=_get(ns, "admin_api_key", None),
        trust_remote_code=bool(_get(ns, "trust_remote_code", False)),
        skip_server_warmup=bool(_get(ns, "skip_server_warmup", False)),
        disaggregation_mode=disaggregation_mode,
        stream_interval=_get(ns, "stream_interval", 1),
        revision=_get(ns, "revision", None),
        download_dir=_get(ns, "download_dir", None),
        log_level=_get(ns, "log_level", "info"),
        sglang_version=version,
        disaggregation_transfer_backend=pd.transfer_backend,
        disaggregation_bootstrap_port=_get(ns, "disaggregation_bootstrap_port", 8998),
        disaggregation_ib_device=pd.ib_device,
        disaggregation_decode_allocation_policy=_get(ns, "disaggregation_decode_allocation_policy", "early"),
        disaggregation_decode_enable_radix_cache=bool(_get(ns, "disaggregation_decode_enable_radix_cache", False)),
        disaggregation_decode_extra_slots=_get(ns, "disaggregation_decode_extra_slots", None),
        disaggregation_decode_tp=pd.decode_tp,
        disaggregation_decode_dp=pd.decode_dp,
        disaggregation_prefill_pp=pd.prefill_pp,
        kv_cache_dtype=_get(ns, "kv_cache_dtype", "auto"),
    )
    return Resolution(args=args, notes=tuple(notes))


@dataclass(frozen=True)
class _PdResolution:
    transfer_backend: str
    ib_device: str | None
    decode_disables_radix: bool
    decode_tp: int | None
    decode_dp: int | None
    prefill_pp: int | None


def _pd_disaggregation(
    ns: argparse.Namespace,
    v: Version,
    msg: dict[str, str | None],
    notes: list[str],
    tp: int,
    pp: int,
    dp: int,
    attn_cp: int,
) -> _PdResolution:
    """The release's PD-disaggregation resolution and start-up checks (0.5.9-0.5.12: `server_args.
    _handle_pd_disaggregation`; 0.5.13+: `arg_groups/pd_disaggregation_hook.handle_pd_disaggregation`)."""
    mode = _get(ns, "disaggregation_mode", "null")
    backend = _get(ns, "disaggregation_transfer_backend", "mooncake")
    ib_device = _get(ns, "disaggregation_ib_device", None)
    decode_tp, decode_dp = _get(ns, "disaggregation_decode_tp", None), _get(ns, "disaggregation_decode_dp", None)
    prefill_pp = _get(ns, "disaggregation_prefill_pp", 1)
    decode_radix = bool(_get(ns, "disaggregation_decode_enable_radix_cache", False))
    if backend == "mooncake_tcp":
        notes.append(
            "disaggregation transfer backend 'mooncake_tcp' -> mooncake with MC_FORCE_TCP=1 (TCP transport, no RDMA)"
        )
        backend, ib_device = "mooncake", None
    if v < PD_PREFILL_REFUSES_FAKE_SINCE:  # 0.5.9
        if mode == "decode":
            if decode_tp is not None:
                raise ArgsError("AssertionError", str(msg["pd_decode_tp"]))
            if decode_dp is not None:
                raise ArgsError("AssertionError", str(msg["pd_decode_dp"]))
        elif mode == "prefill":
            decode_tp = tp if decode_tp is None else decode_tp
            decode_dp = dp if decode_dp is None else decode_dp
            prefill_pp = pp
            larger, smaller = max(decode_tp, tp), min(decode_tp, tp)
            if smaller == 0:
                raise ArgsError("ZeroDivisionError", "integer modulo by zero")
            if larger % smaller != 0:
                raise ArgsError("AssertionError", f"{msg['pd_tp_multiple']}decode_tp={decode_tp}, prefill_tp={tp}")
        return _PdResolution(backend, ib_device, mode == "decode", decode_tp, decode_dp, prefill_pp)

    policy = _get(ns, "disaggregation_decode_allocation_policy", "early")
    threshold = _get(ns, "disaggregation_decode_host_receive_threshold", 1.0)
    if policy == "prefill_complete" and msg["pd_prefill_complete"]:
        unsupported = _prefill_complete_unsupported(ns, mode, backend, tp, pp, attn_cp, decode_radix, threshold)
        if unsupported:
            raise ArgsError("ValueError", f"{msg['pd_prefill_complete']}{', '.join(unsupported)}")
    if msg["pd_host_receive_threshold"] and not 0 <= threshold <= 1:
        raise ArgsError("ValueError", str(msg["pd_host_receive_threshold"]))
    if mode == "decode" and decode_radix and backend == "fake" and msg["pd_decode_radix_fake"]:
        raise ArgsError("ValueError", str(msg["pd_decode_radix_fake"]))
    if mode == "prefill" and backend == "fake":
        raise ArgsError("AssertionError", str(msg["pd_prefill_fake"]))
    disables_radix = mode == "decode" and not (v >= PD_DECODE_RADIX_SINCE and decode_radix)
    return _PdResolution(backend, ib_device, disables_radix, None, None, None)


def _prefill_complete_unsupported(
    ns: argparse.Namespace,
    mode: str,
    backend: str,
    tp: int,
    pp: int,
    attn_cp: int,
    decode_radix: bool,
    threshold: float,
) -> list[str]:
    """`_validate_prefill_complete` (0.5.22+), on the flags the simulator parses. The release computes the attention
    TP check from `enable_dp_attention`, which its deprecation handler has already reset, so any tp > 1 fails it."""
    out = []
    if mode not in ("prefill", "decode"):
        out.append("aggregated serving")
    if backend != "mooncake":
        out.append("transfer backends other than Mooncake")
    if pp != 1 or attn_cp != 1 or _get(ns, "dcp_size", 1) != 1:
        out.append("pipeline or attention context parallelism")
    if tp != 1:
        out.append("attention tensor parallelism greater than one")
    if _get(ns, "enable_pdmux", False) or _get(ns, "decoupled_spec_role", "null") != "null":
        out.append("PD multiplexing or decoupled speculation")
    if _get(ns, "enable_pd_role_switch", False):
        out.append("runtime PD role switching")
    if _get(ns, "encoder_only", False) or _get(ns, "language_only", False):
        out.append("encoder disaggregation")
    if _get(ns, "enable_hisparse", False):
        out.append("HiSparse")
    if threshold < 1:
        out.append("decode host KV buffering")
    if mode == "decode" and (decode_radix or _get(ns, "enable_hierarchical_cache", False)):
        out.append("decode radix cache or decode HiCache")
    if (
        mode == "prefill"
        and _get(ns, "enable_hierarchical_cache", False)
        and (
            _get(ns, "hicache_storage_backend", None) is not None
            or _get(ns, "hicache_write_policy", "write_through") != "write_back"
        )
    ):
        out.append("prefill HiCache other than L2 write_back")
    return out


def launch_problem(args: ServerArgs, knobs_max_running: int) -> str | None:
    """Why a replica that passed SGLang's argument checks still cannot run (the real one dies or hangs at launch:
    no scheduler for a size below 1, no rendezvous for a node rank outside the node count, no slot per rank when
    --max-running-requests is below the attention-DP size before 0.5.23); None when it can."""
    for name, value in (("tp_size", args.tp_size), ("dp_size", args.dp_size), ("pp_size", args.pp_size)):
        if value < 1:
            return f"{name}={value}: no scheduler process to launch"
    if not 0 <= args.node_rank < args.nnodes:
        return f"node_rank={args.node_rank} with nnodes={args.nnodes}: no rendezvous would ever complete"
    if args.nnodes > 1 and not args.dist_init_addr:
        return f"nnodes={args.nnodes} without --dist-init-addr: ranks cannot find each other"
    if per_rank(args, knobs_max_running) < 1:
        return (
            f"--max-running-requests {args.max_running_requests} over {args.attn_dp_size} attention-DP ranks leaves "
            f"each rank 0 slots in SGLang {args.sglang_version}"
        )
    return None


def per_rank(args: ServerArgs, knobs_max_running: int) -> int:
    """Running requests per scheduler: the operator's own arithmetic (`capacity.running_requests_per_rank`) for the
    flag; without it the simulator's stand-in for the KV-sized default, per scheduler and never divided."""
    if args.max_running_requests is None:
        return knobs_max_running
    return running_requests_per_rank(args.max_running_requests, args.attn_dp_size, args.sglang_version)
