"""`sglang-operator plan --group tp=4,count=1 --group tp=2,count=2`: the capacity of a mix of replica shapes. Pure.

Each group's concurrency is SGLang's arithmetic for its shape (`capacity.sglang_concurrency`: maxRunningRequests
per scheduler x schedulers), or `concurrency=N` when measured; with a load (`--qps`, `--latency`) the plan also
says how the built-in autoscaler would split the needed capacity across the groups (`fleet_split`).
"""

import math
from collections.abc import Sequence
from typing import Any

from .api.releases import NEWEST_SUPPORTED, format_version
from .autoscaling.fleet_split import GroupShape, split_capacity
from .capacity import sglang_concurrency

_KEYS = {"name", "tp", "dp", "attentionDP", "count", "maxRunningRequests", "concurrency", "max"}
_MAX_COUNT = 512


class GroupArgError(ValueError):
    """A `--group` value that does not parse; the message says which key and why."""


def parse_group(text: str, position: int) -> tuple[GroupShape, int]:
    """`tp=4,count=1[,dp=..][,attentionDP=..][,maxRunningRequests=..|concurrency=..][,max=..][,name=..]` ->
    (shape, count). `max` bounds the group in the autoscaler's split (default: count)."""
    fields: dict[str, str] = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep or key not in _KEYS:
            raise GroupArgError(f"--group {text!r}: {part!r} is not one of {', '.join(sorted(_KEYS))} as key=value")
        fields[key] = value
    numbers: dict[str, int] = {}
    for key in _KEYS - {"name"}:
        if key in fields:
            value = fields[key]
            if not (value.isascii() and value.isdecimal()) or not 0 <= int(value) <= 65_536:
                raise GroupArgError(f"--group {text!r}: {key} must be a whole number from 0 to 65536")
            numbers[key] = int(value)
    tp, dp, attn = numbers.get("tp", 1), numbers.get("dp", 1), numbers.get("attentionDP", 1)
    if min(tp, dp, attn) < 1:
        raise GroupArgError(f"--group {text!r}: tp, dp and attentionDP must be at least 1")
    count = numbers.get("count", 1)
    if count > _MAX_COUNT:
        raise GroupArgError(f"--group {text!r}: count must be at most {_MAX_COUNT}")
    concurrency = numbers.get("concurrency") or sglang_concurrency(
        numbers.get("maxRunningRequests"), dp, attn, format_version(NEWEST_SUPPORTED)
    )
    name = fields.get("name") or f"group{position}"
    return GroupShape(name, max(1, concurrency), tp * dp, 0, max(count, numbers.get("max", count))), count


def plan_groups(
    groups: Sequence[tuple[GroupShape, int]], qps: float | None, latency: float | None, headroom: float
) -> dict[str, Any]:
    """Per-group and total capacity; with a load, the concurrency it needs and the autoscaler's split for it."""
    rows = [
        {"name": g.name, "replicas": count, "concurrencyPerReplica": g.concurrency, "gpusPerReplica": g.gpus,
         "concurrency": g.concurrency * count, "gpus": g.gpus * count}
        for g, count in groups
    ]  # fmt: skip
    plan: dict[str, Any] = {
        "groups": rows,
        "totalConcurrency": sum(r["concurrency"] for r in rows),
        "totalGPUs": sum(r["gpus"] for r in rows),
    }
    if qps is not None and latency is not None:
        needed = math.ceil(qps * latency * (1 + headroom))
        split = split_capacity(needed, [g for g, _ in groups], None)
        plan.update({"neededConcurrency": needed, "covered": plan["totalConcurrency"] >= needed,
                     "split": split.replicas, "splitShort": split.short})  # fmt: skip
    return plan


def format_plan(plan: dict[str, Any]) -> str:
    lines = [f"{'GROUP':<12} {'REPLICAS':>8} {'C/REPLICA':>9} {'GPUS/REPLICA':>12} {'C':>6} {'GPUS':>5}"]
    for r in plan["groups"]:
        lines.append(f"{r['name']:<12} {r['replicas']:>8} {r['concurrencyPerReplica']:>9} {r['gpusPerReplica']:>12} "
                     f"{r['concurrency']:>6} {r['gpus']:>5}")  # fmt: skip
    lines.append(f"{'total':<12} {'':>8} {'':>9} {'':>12} {plan['totalConcurrency']:>6} {plan['totalGPUs']:>5}")
    if "neededConcurrency" in plan:
        verdict = "covers it" if plan["covered"] else "does not cover it"
        split = ", ".join(f"{name}={count}" for name, count in plan["split"].items())
        lines.append(f"the load needs {plan['neededConcurrency']} concurrent requests: this mix {verdict}; the "
                     f"autoscaler's split for it: {split}" + (" (short: groups at their max)" if plan["splitShort"]
                                                               else ""))  # fmt: skip
    return "\n".join(lines)
