"""Bodies of the introspection endpoints (`/server_info`, `/v1/loads`), built purely from state snapshots."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .args import ServerArgs
from .disagg import PdRankLoad, disagg_section
from .engine import RankLoad

LOAD_SECTIONS = frozenset({"core", "memory", "spec", "lora", "disagg", "queues", "all"})
_KV_GB_PER_TOKEN = 0.000125  # ~128 KiB of KV per token, an 8B-class model in bf16
_WEIGHT_GB = 16.0
_GRAPH_GB = 1.5


@dataclass(frozen=True)
class Capacity:
    """The limits the simulated scheduler resolved at start-up."""

    context_length: int
    max_running_requests: int  # the replica-wide value shown as --max-running-requests
    max_running_per_rank: int
    max_total_tokens_per_rank: int


def memory(cap: Capacity) -> dict[str, Any]:
    return {
        "weight_gb": _WEIGHT_GB,
        "kv_cache_gb": round(cap.max_total_tokens_per_rank * _KV_GB_PER_TOKEN, 3),
        "graph_gb": _GRAPH_GB,
        "token_capacity": cap.max_total_tokens_per_rank,
    }


def server_info(
    args: ServerArgs,
    cap: Capacity,
    loads: Sequence[RankLoad],
    launch_command: str,
    startup_time: float,
    status: str,
) -> dict[str, Any]:
    resolved = args.public_dict()
    resolved["context_length"] = cap.context_length
    resolved["max_running_requests"] = cap.max_running_requests
    resolved["max_total_tokens"] = cap.max_total_tokens_per_rank
    internal_states = [
        {
            "dp_rank": r.dp_rank,
            "attention_backend": "fa3",
            "max_total_num_tokens": r.max_total_num_tokens,
            "max_running_requests": r.max_running_requests,
            "max_req_input_len": cap.context_length - 1,
            "last_gen_throughput": r.gen_throughput,
            "load": r.num_running_reqs + r.num_waiting_reqs,
            "memory_usage": {
                "weight": _WEIGHT_GB,
                "kvcache": memory(cap)["kv_cache_gb"],
                "token_capacity": r.max_total_num_tokens,
                "graph": _GRAPH_GB,
            },
        }
        for r in loads
    ]
    return {
        **resolved,
        "launch_command": launch_command,
        "scheduler_info": {
            "status": "ready" if status == "Up" else "starting",
            "max_total_num_tokens": cap.max_total_tokens_per_rank,
            "max_req_input_len": cap.context_length - 1,
            "max_running_requests": cap.max_running_per_rank,
            "startup_time": startup_time,
        },
        "kv_events": None,
        "startup_time": startup_time,
        "internal_states": internal_states,
        "version": args.sglang_version,
        "frontend": "python",
    }


def parse_include(raw: str | None) -> frozenset[str] | None:
    """`include=core,memory`; None means everything. Raises ValueError with SGLang's message."""
    if not raw:
        return None
    sections = frozenset(s.strip() for s in raw.split(","))
    invalid = sections - LOAD_SECTIONS
    if invalid:
        raise ValueError(f"Invalid include sections: {set(invalid)}. Valid options: {sorted(LOAD_SECTIONS)}")
    return None if "all" in sections else sections


def load_entry(
    args: ServerArgs,
    cap: Capacity,
    r: RankLoad,
    include: frozenset[str] | None,
    ts: float,
    pd: PdRankLoad | None = None,
) -> dict[str, Any]:
    """One DP rank. PD queues count as waiting (bootstrap on prefill, prealloc and transfer on decode), KV held for a
    transfer as used, and the bootstrap / prealloc queues' prompts as pending, as SGLang's load inquirer counts them."""

    def want(section: str) -> bool:
        return include is None or section in include

    p = pd or PdRankLoad(dp_rank=r.dp_rank)
    used = r.num_used_tokens + p.held_tokens
    # The core keys are in every answer, whatever `include` names (`LoadSnapshot.to_dict`: the sections are added
    # to them; 0.5.9's scheduler computes them for every request too).
    d: dict[str, Any] = {
        "dp_rank": r.dp_rank,
        "timestamp": ts,
        "num_running_reqs": r.num_running_reqs,
        "num_waiting_reqs": r.num_waiting_reqs + p.waiting,
        "num_used_tokens": used,
        "num_total_tokens": r.num_total_tokens + p.held_tokens + p.pending_tokens,
        "max_total_num_tokens": r.max_total_num_tokens,
        "token_usage": used / r.max_total_num_tokens if r.max_total_num_tokens else 0.0,
        "gen_throughput": r.gen_throughput,
        "cache_hit_rate": r.cache_hit_rate,
        "utilization": r.utilization,
        "max_running_requests": r.max_running_requests,
    }
    if want("memory"):
        d["memory"] = memory(cap)
    if want("queues"):
        d["queues"] = {"waiting": r.num_waiting_reqs, "grammar": 0, "paused": 0, "retracted": 0}
    if want("disagg"):
        d["disaggregation"] = disagg_section(args.disaggregation_mode, args.sglang_version, p)
    return d


def accelerators_per_dp_rank(args: ServerArgs) -> int:
    n = args.tp_size * args.pp_size
    return n // args.attn_dp_size if args.attn_dp_size > 1 else n


def loads_body(
    args: ServerArgs,
    cap: Capacity,
    loads: Sequence[RankLoad],
    include: frozenset[str] | None,
    ts: float,
    iso_time: str,
    accelerator: str,
    pd: Sequence[PdRankLoad] = (),
) -> dict[str, Any]:
    by_rank = {p.dp_rank: p for p in pd}
    return {
        "timestamp": iso_time,
        "version": args.sglang_version,
        "accelerator": accelerator,
        "num_accelerators": accelerators_per_dp_rank(args),
        "loads": [load_entry(args, cap, r, include, ts, by_rank.get(r.dp_rank)) for r in loads],
    }


def loads_prometheus(entries: Sequence[dict[str, Any]]) -> str:
    """`/v1/loads?format=prometheus`: one gauge per numeric field, labelled by dp_rank."""
    prefixes = {"disaggregation": "disagg"}
    samples: dict[str, list[tuple[int, Any]]] = {}
    for entry in entries:
        e = dict(entry)
        rank = e.pop("dp_rank")
        for key, value in e.items():
            if isinstance(value, dict):
                for sub, v in value.items():
                    if isinstance(v, int | float) and not isinstance(v, bool):
                        samples.setdefault(f"sglang_{prefixes.get(key, key)}_{sub}", []).append((rank, v))
            elif isinstance(value, int | float) and not isinstance(value, bool):
                samples.setdefault(f"sglang_{key}", []).append((rank, value))
    lines = []
    for name, vals in samples.items():
        lines.append(f"# TYPE {name} gauge")
        lines.extend(f'{name}{{dp_rank="{rank}"}} {v}' for rank, v in vals)
    return "\n".join(lines) + "\n"
