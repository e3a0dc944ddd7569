"""Conditions in the standard shape, shared by every loop that writes status (reconcile, autoscaler).

A condition keeps its lastTransitionTime unless its status flips, so a pass that changes nothing produces an
identical status (and the writer then skips the patch). Pure.
"""

from typing import Any

CONDITION_TYPES = ("Ready", "Progressing", "Degraded", "RouterSynced", "MetricsAvailable")


def condition(type_: str, ok: bool, reason: str, message: str, generation: int, now: str) -> dict[str, Any]:
    return {
        "type": type_,
        "status": "True" if ok else "False",
        "reason": reason,
        "message": message,
        "observedGeneration": generation,
        "lastTransitionTime": now,
    }


def merge_conditions(previous: list[dict[str, Any]], updates: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Replace conditions by type, keeping the old transition time when the status did not change."""
    by_type = {c["type"]: c for c in previous}
    for new in updates:
        old = by_type.get(new["type"])
        if old is not None and old.get("status") == new["status"]:
            new = {**new, "lastTransitionTime": old.get("lastTransitionTime", new["lastTransitionTime"])}
        by_type[new["type"]] = new
    return [by_type[t] for t in CONDITION_TYPES if t in by_type] + [
        c for t, c in by_type.items() if t not in CONDITION_TYPES
    ]
