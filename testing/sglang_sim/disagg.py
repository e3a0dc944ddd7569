"""Prefill/decode disaggregation, the pure part: settings, the release's messages and bootstrap answers, queue state.

What SGLang does (read from the wheels, `srt/disaggregation/**`), and what the simulator keeps of it:

- A prefill server runs a bootstrap server on `--host`:`--disaggregation-bootstrap-port` (`bootstrap.py`) where its
  ranks register once loaded (`PUT /route`); a decode server asks it for the prefill's layout (`GET /route` with every
  rank -1) before its first transfer from that prefill and dies (the scheduler raises) when page size or KV-cache dtype
  differ, or when its PP is neither the prefill's nor 1. Unequal attention TP only warns.
- A request carries `bootstrap_host`, `bootstrap_port` (the server's own port when absent) and `bootstrap_room`.
  Prefill holds it in its bootstrap queue until the decode that got the same room has preallocated KV and sent its
  destination (the metadata), prefills it (`max_new_tokens` forced to 1), keeps it in its inflight queue while the
  KV is written, then answers its client (finish_reason length 0). Decode holds it in its prealloc queue (handshake,
  then a free slot), then in its transfer queue until the KV has arrived, then generates; its answer is the client's.
- Host `2.2.2.2` (warmup, `/health` generation) is a fake transfer: each side serves it alone.
- Timeouts (`SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT` on prefill, `_WAITING_TIMEOUT` on decode, 300 s each) abort
  the request with SGLang's error and count `sglang:num_bootstrap_failed_reqs_total` /
  `sglang:num_transfer_failed_reqs_total`.

The simulator's stand-in for the RDMA write and its status message is one HTTP call from decode to the prefill's
bootstrap port, `POST /sim/kv_transfer` (no SGLang route has that name): decode sends it once preallocated, prefill
answers when the room's KV is written. Transfer time = prompt tokens x SGLANG_SIM_KV_BYTES_PER_TOKEN /
SGLANG_SIM_KV_TRANSFER_GBPS, scaled like every simulated duration.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sglang_operator.api.releases import Version, parse_version

from .args import ServerArgs

FAKE_BOOTSTRAP_HOST = "2.2.2.2"
KV_TRANSFER_ROUTE = "/sim/kv_transfer"  # the simulator's stand-in for the KV write; not an SGLang route
MAX_ENSURE_RETRIES = 15  # decode: attempts to fetch a prefill's layout (scheduling cycles, 1 s apart)
ENSURE_RETRY_INTERVAL_S = 1.0
BOOTSTRAP_TIMEOUT_ENV = "SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT"
WAITING_TIMEOUT_ENV = "SGLANG_DISAGGREGATION_WAITING_TIMEOUT"
DEFAULT_TIMEOUT_S = 300

# Release boundaries (the wheels' disaggregation/common/conn.py, managers/, observability/)
REGISTRY_SINCE: Version = (0, 5, 10)  # /register_dp_rank, /query_dp_ranks, PrefillServerInfo, 503 until registered,
#                                       the KV-dtype check, 15 layout fetch attempts (0.5.9: one, in the receiver)
BOOTSTRAP_QUEUE_NAMES_SINCE: Version = (0, 5, 12)  # prefill_prealloc_queue_reqs -> prefill_bootstrap_queue_reqs
TRANSFER_HISTOGRAMS_SINCE: Version = (0, 5, 10)  # kv_transfer_* gauges (0.5.9) became histograms


def is_pd(args: ServerArgs) -> bool:
    return args.disaggregation_mode in ("prefill", "decode")


@dataclass(frozen=True)
class PdTimeouts:
    bootstrap_s: int
    waiting_s: int


def _env_int(env: Mapping[str, str], key: str) -> int:
    raw = env.get(key)
    if raw is None or raw == "":
        return DEFAULT_TIMEOUT_S
    try:
        return int(raw)
    except ValueError as e:  # SGLang's EnvInt
        raise ValueError(f'"{raw}" is not a valid integer value') from e


def timeouts_from_env(env: Mapping[str, str]) -> PdTimeouts:
    """SGLang's own variables, whole seconds (EnvInt), wall time: the time scale does not apply."""
    return PdTimeouts(_env_int(env, BOOTSTRAP_TIMEOUT_ENV), _env_int(env, WAITING_TIMEOUT_ENV))


@dataclass(frozen=True)
class PdRequest:
    """The PD fields of a generation request (native and OpenAI bodies carry the same keys)."""

    host: str | None
    port: int
    room: int | None

    @property
    def addr(self) -> str:
        return f"{self.host}:{self.port}"


def pd_request(body: Mapping[str, Any], args: ServerArgs, index: int = 0) -> PdRequest:
    """A request without `bootstrap_port` gets the server's own (`Scheduler._handle_generate_request`); input `index`
    of a batch gets `bootstrap_room + index`, or its own entry of a list (`GenerateReqInput.normalize`)."""
    port = body.get("bootstrap_port")
    room = body.get("bootstrap_room")
    host = body.get("bootstrap_host")
    if isinstance(port, list):
        port = port[index] if index < len(port) else None
    if isinstance(host, list):
        host = host[index] if index < len(host) else None
    if isinstance(room, list):
        room = room[index] if index < len(room) else None
    elif isinstance(room, int) and not isinstance(room, bool):
        room += index
    return PdRequest(
        host=host if isinstance(host, str) else None,
        port=port if isinstance(port, int) and not isinstance(port, bool) else args.disaggregation_bootstrap_port,
        room=room if isinstance(room, int) and not isinstance(room, bool) else None,
    )


def is_fake_transfer(req: PdRequest, args: ServerArgs) -> bool:
    """`disaggregation/utils._is_fake_transfer`: the warmup host, or no host with the fake backend."""
    return req.host == FAKE_BOOTSTRAP_HOST or (req.host is None and args.disaggregation_transfer_backend == "fake")


def missing_room_error(args: ServerArgs, req: PdRequest, rid: str) -> str | None:
    """The scheduler refuses a PD request without a room (400) unless the backend is fake."""
    if req.room is None and args.disaggregation_transfer_backend != "fake" and not is_fake_transfer(req, args):
        return f"Invalid request: Disaggregated request received without bootstrap room id. req.rid={rid!r}"
    return None


# --- what a prefill's bootstrap server answers --------------------------------------------------------------------


@dataclass(frozen=True)
class PrefillLayout:
    """What a prefill's ranks register (`PUT /route`): the fields the decode side checks."""

    attn_tp_size: int
    attn_cp_size: int
    dp_size: int
    pp_size: int
    page_size: int
    kv_cache_dtype: str
    follow_bootstrap_room: bool
    decode_allocation_policy: str
    http_port: int


def kv_cache_dtype_str(args: ServerArgs) -> str:
    """The resolved KV-cache dtype string both sides compare. "auto" is the model's dtype (bf16 for every model the
    simulator plays); "bf16" is an alias SGLang resolves to the same dtype."""
    dtype = args.kv_cache_dtype
    return "bfloat16" if dtype in ("auto", "bf16", "bfloat16") else dtype


def prefill_layout(args: ServerArgs, http_port: int) -> PrefillLayout:
    dp = args.attn_dp_size if args.attn_dp_size > 1 else args.dp_size
    return PrefillLayout(
        attn_tp_size=args.attn_tp_size,
        attn_cp_size=max(1, args.attn_cp_size),
        dp_size=dp,
        pp_size=args.pp_size,
        page_size=args.page_size,
        kv_cache_dtype=kv_cache_dtype_str(args),
        follow_bootstrap_room=args.load_balance_method == "follow_bootstrap_room",
        decode_allocation_policy=args.disaggregation_decode_allocation_policy,
        http_port=http_port,
    )


def layout_answer(layout: PrefillLayout | None, registered: int, version: str) -> tuple[int, Any]:
    """`GET /route` with every rank -1: (status, JSON body or text) as the release answers it."""
    if parse_version(version) < REGISTRY_SINCE:  # 0.5.9: whatever has registered so far, nulls before
        return 200, {
            "prefill_attn_tp_size": layout.attn_tp_size if layout else None,
            "prefill_dp_size": layout.dp_size if layout else None,
            "prefill_pp_size": layout.pp_size if layout else None,
            "prefill_page_size": layout.page_size if layout else None,
        }
    if layout is None or registered < expected_ranks(layout):
        return 503, f"Prefill server not fully registered yet ({registered} workers registered)."
    return 200, {
        "attn_tp_size": layout.attn_tp_size,
        "attn_cp_size": layout.attn_cp_size,
        "dp_size": layout.dp_size,
        "pp_size": layout.pp_size,
        "page_size": layout.page_size,
        "kv_cache_dtype": layout.kv_cache_dtype,
        "follow_bootstrap_room": layout.follow_bootstrap_room,
        "enable_dsa_cache_layer_split": False,
        "decode_allocation_policy": layout.decode_allocation_policy,
        "enable_kv_cache_sharding": False,
        "prefill_http_port": layout.http_port,
        "target_tp_rank": None,
        "target_tp_ranks": None,
        "target_cp_ranks": None,
        "target_pp_ranks": None,
        "required_dst_info_num": None,
        "required_prefill_response_num": None,
    }


def expected_ranks(layout: PrefillLayout) -> int:
    return layout.dp_size * layout.attn_cp_size * layout.attn_tp_size * layout.pp_size


def layout_query(version: str) -> str:
    """The query string decode sends for a prefill's layout."""
    if parse_version(version) < REGISTRY_SINCE:
        return "engine_rank=-1&target_dp_group=-1&target_pp_rank=-1"
    return "prefill_dp_rank=-1&prefill_cp_rank=-1&target_tp_rank=-1&target_pp_rank=-1"


@dataclass(frozen=True)
class RemoteLayout:
    attn_tp_size: int
    pp_size: int
    page_size: int | None
    kv_cache_dtype: str | None


def parse_layout(body: Any, version: str) -> RemoteLayout | None:
    """The decode side's reading of the answer; None when it cannot use it (0.5.9: nulls before registration)."""
    if not isinstance(body, dict):
        return None
    try:
        if parse_version(version) < REGISTRY_SINCE:
            return RemoteLayout(
                int(body["prefill_attn_tp_size"]),
                int(body["prefill_pp_size"]),
                int(body["prefill_page_size"]),
                None,
            )
        page = body.get("page_size")
        dtype = body.get("kv_cache_dtype")
        return RemoteLayout(
            int(body["attn_tp_size"]),
            int(body["pp_size"]),
            None if page is None else int(page),
            None if dtype is None else str(dtype),
        )
    except (KeyError, TypeError, ValueError):
        return None


@dataclass(frozen=True)
class LayoutVerdict:
    crash: str | None  # the exception the decode scheduler dies of ("RuntimeError: ..."), or None
    warning: str | None  # a warning it logs once


def check_layout(decode: ServerArgs, prefill: RemoteLayout) -> LayoutVerdict:
    """The decode side's checks at its first transfer from a prefill (`try_ensure_parallel_info`,
    `_resolve_rank_mapping`; 0.5.9: the receiver's constructor, page size only)."""
    v = parse_version(decode.sglang_version)
    if prefill.page_size is not None and prefill.page_size != decode.page_size:
        return LayoutVerdict(
            "RuntimeError: "
            f"Page size mismatch: prefill server has page_size={prefill.page_size}, but decode server has "
            f"page_size={decode.page_size}. Both servers must use the same --page-size value.",
            None,
        )
    mine = kv_cache_dtype_str(decode)
    if v >= REGISTRY_SINCE and prefill.kv_cache_dtype is not None and prefill.kv_cache_dtype != mine:
        return LayoutVerdict(
            "RuntimeError: "
            f"KV cache dtype mismatch: prefill server has kv_cache_dtype={prefill.kv_cache_dtype}, but decode "
            f"server has kv_cache_dtype={mine}. Both servers must use the same --kv-cache-dtype value.",
            None,
        )
    if v >= REGISTRY_SINCE and not (decode.pp_size == prefill.pp_size or decode.pp_size == 1):
        message = f"Decode pp size ({decode.pp_size}) should be equal to prefill pp size ({prefill.pp_size}) or 1"
        return LayoutVerdict(f"AssertionError: ({message!r},)", None)  # the assertion's message is a 1-tuple
    if decode.attn_tp_size != prefill.attn_tp_size:
        return LayoutVerdict(None, "Performance is NOT guaranteed when using different TP sizes for non-MLA models. ")
    return LayoutVerdict(None, None)


# --- failures, as the schedulers word them --------------------------------------------------------------------------


def kv_transfer_error(room: int, reason: str | None) -> str:
    """`KVTransferError.__str__`; no reason recorded on this rank reads as one from another rank."""
    return f"KVTransferError(bootstrap_room={room}): {reason or 'Failed due to an unknown reason from another rank'}"


def bootstrap_timed_out(room: int, elapsed: float) -> str:
    return f"Request {room} timed out after {elapsed:.1f}s in KVPoll.Bootstrapping"


def waiting_timed_out(room: int, elapsed: float) -> str:
    return f"Request {room} timed out after {elapsed:.1f}s in KVPoll.WaitingForInput"


ABORTED_BY_ABORT_REQ = "Aborted by AbortReq."


def layout_unreachable(version: str, addr: str) -> str:
    """Why decode gave up fetching a prefill's layout: 0.5.9 fails the room at once, later releases abort it after
    `MAX_ENSURE_RETRIES` attempts."""
    if parse_version(version) < REGISTRY_SINCE:
        return f"Could not fetch prefill parallel info from bootstrap_addr: {addr}"
    return ABORTED_BY_ABORT_REQ


def prefill_down(addr: str, room: int) -> str:
    return (
        f"Prefill server with bootstrap_addr: {addr} is healthy before, but now it is down. Request (bootstrap_room: "
        f"{room}) has been marked as failed."
    )


def failure_message(stage: str, tp_rank: int, rid: str, room: int, reason: str | None) -> str:
    """The abort message of a failed request: stage is "Prefill bootstrap", "Prefill transfer", "Decode handshake"
    or "Decode transfer"; the names are the scheduler's (`req.rid=` on prefill, `decode_req.req.rid=` on decode)."""
    who = "decode_req.req" if stage.startswith("Decode") else "req"
    return (
        f"{stage} failed for request rank={tp_rank} {who}.rid={rid!r} {who}.bootstrap_room={room} with exception "
        f"{kv_transfer_error(room, reason)}"
    )


# --- transfer model -----------------------------------------------------------------------------------------------


def transfer_seconds(tokens: int, bytes_per_token: float, gb_per_s: float) -> float:
    """Unscaled KV write time of `tokens` prompt tokens."""
    return tokens * bytes_per_token / (gb_per_s * 1e9)


def extra_decode_slots(args: ServerArgs, per_rank: int) -> int:
    """Decode request slots for requests still receiving KV, on top of the running ones: the flag (0.5.14+), else
    twice the per-worker batch when that is at most 32 (0.5.9-0.5.13: always; 0.5.14+: only when
    --max-running-requests is given)."""
    if args.disaggregation_decode_extra_slots is not None:
        return max(0, args.disaggregation_decode_extra_slots)
    if parse_version(args.sglang_version) >= (0, 5, 14) and args.max_running_requests is None:
        return 0
    return per_rank * 2 if per_rank <= 32 else 0


# --- queue state ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PdRankLoad:
    """One DP rank's PD queues, the `disagg` section of /v1/loads and the per-role gauges."""

    dp_rank: int
    bootstrap: int = 0  # prefill: waiting for the decode's metadata
    inflight: int = 0  # prefill: prefilled, KV being written
    prealloc: int = 0  # decode: handshake / waiting for a free slot
    transfer: int = 0  # decode: preallocated, waiting for the KV
    pending_tokens: int = 0  # tokens of the bootstrap (prefill) or prealloc (decode) queue
    held_tokens: int = 0  # tokens whose KV this rank holds outside the engine (inflight / transfer queue)
    kv_transfer_speed_gb_s: float = 0.0  # prefill: last transfer
    kv_transfer_latency_ms: float = 0.0

    @property
    def waiting(self) -> int:
        """Requests SGLang adds to num_waiting_reqs (bootstrap on prefill; prealloc and transfer on decode)."""
        return self.bootstrap + self.prealloc + self.transfer


@dataclass
class _RankQueues:
    bootstrap: dict[str, int] = field(default_factory=dict)  # rid -> prompt tokens
    inflight: dict[str, int] = field(default_factory=dict)
    prealloc: dict[str, int] = field(default_factory=dict)
    transfer: dict[str, int] = field(default_factory=dict)


class PdQueues:
    """Which request sits in which PD queue of which DP rank, and the last transfer's numbers (prefill)."""

    QUEUES = ("bootstrap", "inflight", "prealloc", "transfer")

    def __init__(self, num_ranks: int) -> None:
        self._ranks = [_RankQueues() for _ in range(num_ranks)]
        self.last_speed_gb_s = 0.0
        self.last_latency_ms = 0.0

    def enter(self, queue: str, rank: int, rid: str, tokens: int) -> None:
        self._queue(queue, rank)[rid] = tokens

    def leave(self, queue: str, rank: int, rid: str) -> None:
        self._queue(queue, rank).pop(rid, None)

    def count(self, queue: str, rank: int) -> int:
        return len(self._queue(queue, rank))

    def _queue(self, queue: str, rank: int) -> dict[str, int]:
        if queue not in self.QUEUES:
            raise ValueError(f"unknown PD queue {queue!r}")
        q: dict[str, int] = getattr(self._ranks[rank], queue)
        return q

    def record_transfer(self, latency_s: float, total_bytes: float) -> tuple[float, float, float]:
        """(latency ms, MB, GB/s) of a finished transfer, kept as the last values /v1/loads reports."""
        latency_ms = latency_s * 1000
        total_mb = total_bytes / (1024 * 1024)
        speed = (total_mb / 1024) / latency_s if latency_s > 0 else 0.0
        if latency_s > 0:
            self.last_latency_ms, self.last_speed_gb_s = latency_ms, speed
        return latency_ms, total_mb, speed

    def loads(self) -> list[PdRankLoad]:
        return [
            PdRankLoad(
                dp_rank=i,
                bootstrap=len(r.bootstrap),
                inflight=len(r.inflight),
                prealloc=len(r.prealloc),
                transfer=len(r.transfer),
                pending_tokens=sum(r.bootstrap.values()) + sum(r.prealloc.values()),
                held_tokens=sum(r.inflight.values()) + sum(r.transfer.values()),
                kv_transfer_speed_gb_s=self.last_speed_gb_s,
                kv_transfer_latency_ms=self.last_latency_ms,
            )
            for i, r in enumerate(self._ranks)
        ]


def disagg_section(mode: str, version: str, pd: PdRankLoad | None) -> dict[str, Any]:
    """`/v1/loads` `disaggregation` of one DP rank, the release's field names (0.5.9-0.5.11 called the prefill
    bootstrap queue `prefill_prealloc_queue_reqs`)."""
    p = pd or PdRankLoad(dp_rank=0)
    first = (
        "prefill_bootstrap_queue_reqs"
        if parse_version(version) >= BOOTSTRAP_QUEUE_NAMES_SINCE
        else "prefill_prealloc_queue_reqs"
    )
    prefill, decode = mode == "prefill", mode == "decode"
    return {
        "mode": mode if mode in ("prefill", "decode") else "null",
        first: p.bootstrap if prefill else 0,
        "prefill_inflight_queue_reqs": p.inflight if prefill else 0,
        "decode_prealloc_queue_reqs": p.prealloc if decode else 0,
        "decode_transfer_queue_reqs": p.transfer if decode else 0,
        "decode_retracted_queue_reqs": 0,
        "kv_transfer_speed_gb_s": p.kv_transfer_speed_gb_s if prefill else 0.0,
        "kv_transfer_latency_ms": p.kv_transfer_latency_ms if prefill else 0.0,
    }
