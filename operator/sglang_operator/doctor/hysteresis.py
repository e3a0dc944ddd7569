"""Hysteresis, as a pure function of the previous `status.diagnostics` and one evaluation.

A (type, subject) reading must hold for `appearAfter` evaluations in a row before it is reported, and a reported
finding clears after `clearAfter` evaluations in a row without it; while its inputs are unknown (Prometheus
unreachable, say) its memory is held as it was. The memory lives in `status.diagnostics.tracking`, so a restarted
or newly elected operator continues where the last one stopped. Anything malformed in the previous status is
dropped, not raised: the memory is advisory.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .model import FINDING_TYPES, Candidate, Diagnosis

_ORDER: dict[str, int] = {kind: i for i, kind in enumerate(FINDING_TYPES)}


@dataclass(frozen=True)
class Evolution:
    status: dict[str, Any]
    """The new `status.diagnostics`."""
    appeared: tuple[dict[str, Any], ...]
    """Findings reported from this evaluation on (the Warning events)."""
    cleared: tuple[dict[str, Any], ...]
    """Findings no longer reported."""


def _key(item: Mapping[str, Any]) -> tuple[str, str] | None:
    kind, subject = item.get("type"), item.get("subject", item.get("pod", ""))
    if kind not in _ORDER or not isinstance(subject, str):
        return None
    return (kind, subject)


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _finding(candidate: Candidate, since: str) -> dict[str, Any]:
    return {
        "type": candidate.type,
        "replica": candidate.replica,
        "pod": candidate.subject,
        "node": candidate.node,
        "evidence": candidate.evidence,
        "action": candidate.action,
        "since": since,
    }


def _sort_key(item: Mapping[str, Any]) -> tuple[int, str]:
    return (_ORDER.get(str(item.get("type")), 99), str(item.get("subject", item.get("pod", ""))))


def evolve(previous: Any, diagnosis: Diagnosis, appear_after: int, clear_after: int, now: str) -> Evolution:
    """The next `status.diagnostics` from the previous one (anything, as read from the CR) and this evaluation."""
    previous = previous if isinstance(previous, dict) else {}
    tracks: dict[tuple[str, str], dict[str, Any]] = {}
    for item in previous.get("tracking") or []:
        if isinstance(item, dict) and (key := _key(item)) is not None:
            tracks[key] = {"type": key[0], "subject": key[1], "seen": _count(item.get("seen")),
                           "missed": _count(item.get("missed"))}  # fmt: skip
    findings: dict[tuple[str, str], dict[str, Any]] = {}
    for item in previous.get("findings") or []:
        if isinstance(item, dict) and (key := _key(item)) is not None and isinstance(item.get("since"), str):
            findings[key] = dict(item)
    candidates = {c.key: c for c in diagnosis.candidates}
    new_tracks: dict[tuple[str, str], dict[str, Any]] = {}
    new_findings: dict[tuple[str, str], dict[str, Any]] = {}
    appeared, cleared = [], []
    for key in sorted(set(tracks) | set(findings) | set(candidates), key=lambda k: (_ORDER[k[0]], k[1])):
        track = tracks.get(key, {"type": key[0], "subject": key[1], "seen": 0, "missed": 0})
        reported = findings.get(key)
        if key[0] in diagnosis.unknown:  # inputs unknown: hold the memory as it was
            new_tracks[key] = track
            if reported is not None:
                new_findings[key] = reported
            continue
        candidate = candidates.get(key)
        if candidate is not None:
            seen = track["seen"] + 1
            new_tracks[key] = {**track, "seen": seen, "missed": 0}
            if reported is not None:
                new_findings[key] = _finding(candidate, reported["since"])
            elif seen >= appear_after:
                new_findings[key] = _finding(candidate, now)
                appeared.append(new_findings[key])
        elif reported is not None:
            missed = track["missed"] + 1
            if missed >= clear_after:
                cleared.append(reported)
            else:
                new_tracks[key] = {**track, "missed": missed}
                new_findings[key] = reported
        # a reading that was not reported yet and is gone now is forgotten: `appearAfter` counts in a row
    status = {
        "findings": sorted(new_findings.values(), key=_sort_key),
        "tracking": sorted(new_tracks.values(), key=_sort_key),
        "unknown": sorted(f"{kind}: {why}" for kind, why in diagnosis.unknown.items()) if new_tracks else [],
    }
    return Evolution(status, tuple(appeared), tuple(cleared))


def is_empty(status: Any) -> bool:
    """True for a `status.diagnostics` with nothing in it (absent, or three empty lists)."""
    return not isinstance(status, dict) or not any(status.get(k) for k in ("findings", "tracking", "unknown"))
