"""Hysteresis, as a pure function of the previous `status.diagnostics` and one evaluation.

A (type, subject) reading must hold for `appearAfter` evaluations in a row before it is reported, and a reported
finding clears after `clearAfter` evaluations in a row without it; while its inputs are unknown (Prometheus
unreachable, say) its memory is held as it was. The memory lives in `status.diagnostics.tracking`, so a restarted
or newly elected operator continues where the last one stopped. Anything malformed in the previous status is
dropped, not raised: the memory is advisory.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field
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
    tracks, findings = _previous_tracks(previous), _previous_findings(previous)
    candidates = {c.key: c for c in diagnosis.candidates}
    step = _Step(appear_after, clear_after, now)
    for key in sorted(set(tracks) | set(findings) | set(candidates), key=lambda k: (_ORDER[k[0]], k[1])):
        track = tracks.get(key, {"type": key[0], "subject": key[1], "seen": 0, "missed": 0})
        reported = findings.get(key)
        if key[0] in diagnosis.unknown:  # inputs unknown: hold the memory as it was
            step.hold(key, track, reported)
        elif key in candidates:
            step.seen(key, track, reported, candidates[key])
        elif reported is not None:
            step.missed(key, track, reported)
        # a reading that was not reported yet and is gone now is forgotten: `appearAfter` counts in a row
    status = {
        "findings": sorted(step.findings.values(), key=_sort_key),
        "tracking": sorted(step.tracks.values(), key=_sort_key),
        "unknown": sorted(f"{kind}: {why}" for kind, why in diagnosis.unknown.items()) if step.tracks else [],
    }
    return Evolution(status, tuple(step.appeared), tuple(step.cleared))


def _previous_tracks(previous: Mapping[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    """The readings being tracked, as the last status holds them (anything malformed is dropped)."""
    tracks = {}
    for item in previous.get("tracking") or []:
        if isinstance(item, dict) and (key := _key(item)) is not None:
            tracks[key] = {"type": key[0], "subject": key[1], "seen": _count(item.get("seen")),
                           "missed": _count(item.get("missed"))}  # fmt: skip
    return tracks


def _previous_findings(previous: Mapping[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    """The findings reported so far, each with the time it first appeared."""
    findings = {}
    for item in previous.get("findings") or []:
        if isinstance(item, dict) and (key := _key(item)) is not None and isinstance(item.get("since"), str):
            findings[key] = dict(item)
    return findings


@dataclass
class _Step:
    """One evaluation's effect on the tracks and findings, key by key."""

    appear_after: int
    clear_after: int
    now: str
    tracks: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    findings: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    appeared: list[dict[str, Any]] = field(default_factory=list)
    cleared: list[dict[str, Any]] = field(default_factory=list)

    def hold(self, key: tuple[str, str], track: dict[str, Any], reported: dict[str, Any] | None) -> None:
        """Inputs unknown: the memory stays as it was."""
        self.tracks[key] = track
        if reported is not None:
            self.findings[key] = reported

    def seen(
        self, key: tuple[str, str], track: dict[str, Any], reported: dict[str, Any] | None, candidate: Candidate
    ) -> None:
        """Seen again: reported once seen `appearAfter` times in a row (its first time kept once reported)."""
        seen = track["seen"] + 1
        self.tracks[key] = {**track, "seen": seen, "missed": 0}
        if reported is not None:
            self.findings[key] = _finding(candidate, reported["since"])
        elif seen >= self.appear_after:
            self.findings[key] = _finding(candidate, self.now)
            self.appeared.append(self.findings[key])

    def missed(self, key: tuple[str, str], track: dict[str, Any], reported: dict[str, Any]) -> None:
        """A reported finding not seen: cleared once missed `clearAfter` times in a row."""
        missed = track["missed"] + 1
        if missed >= self.clear_after:
            self.cleared.append(reported)
        else:
            self.tracks[key] = {**track, "missed": missed}
            self.findings[key] = reported


def is_empty(status: Any) -> bool:
    """True for a `status.diagnostics` with nothing in it (absent, or three empty lists)."""
    return not isinstance(status, dict) or not any(status.get(k) for k in ("findings", "tracking", "unknown"))
