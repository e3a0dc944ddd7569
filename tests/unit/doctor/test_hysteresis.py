"""Hysteresis as a pure function of the previous status and one evaluation, driven over time like the daemon does."""

from typing import Any

from sglang_operator.doctor.hysteresis import evolve, is_empty
from sglang_operator.doctor.model import Candidate, Diagnosis

SLOW = Candidate("SlowReplica", "chat-abc-1-0", "itl 41 ms vs 10 ms", "check node-1", "1", "node-1")
SLOW_AGAIN = Candidate("SlowReplica", "chat-abc-1-0", "itl 44 ms vs 10 ms", "check node-1", "1", "node-1")
FLEET = Candidate("SlowScaleUp", "", "scale-up 1 -> 2 took 300s", "keep warm replicas")


def run(steps: list[Diagnosis], appear: int = 3, clear: int = 2) -> list[tuple[dict[str, Any], list[str], list[str]]]:
    """Each step's (status, appeared subjects, cleared subjects), feeding each status into the next step."""
    status: Any = None
    out = []
    for i, step in enumerate(steps):
        evolution = evolve(status, step, appear, clear, f"t{i}")
        status = evolution.status
        out.append((status, [f["pod"] for f in evolution.appeared], [f["pod"] for f in evolution.cleared]))
    return out


def seen(*candidates: Candidate) -> Diagnosis:
    return Diagnosis(tuple(candidates))


def test_a_finding_appears_after_n_evaluations_in_a_row_and_clears_after_m_without() -> None:
    steps = run([seen(SLOW), seen(SLOW), seen(SLOW_AGAIN), seen(SLOW), seen(), seen(), seen()])
    reported = [[f["pod"] for f in status["findings"]] for status, _, _ in steps]
    assert reported == [[], [], ["chat-abc-1-0"], ["chat-abc-1-0"], ["chat-abc-1-0"], [], []]
    assert [appeared for _, appeared, _ in steps] == [[], [], ["chat-abc-1-0"], [], [], [], []]
    assert [cleared for _, _, cleared in steps] == [[], [], [], [], [], ["chat-abc-1-0"], []]
    finding = steps[3][0]["findings"][0]
    assert finding == {"type": "SlowReplica", "replica": "1", "pod": "chat-abc-1-0", "node": "node-1",
                       "evidence": "itl 41 ms vs 10 ms", "action": "check node-1", "since": "t2"}  # fmt: skip
    assert steps[4][0]["findings"][0]["since"] == "t2"  # held with its last evidence while fading
    assert is_empty(steps[-1][0])


def test_an_interrupted_reading_starts_counting_again() -> None:
    steps = run([seen(SLOW), seen(SLOW), seen(), seen(SLOW), seen(SLOW)])
    assert all(not status["findings"] for status, _, _ in steps)
    assert steps[-1][0]["tracking"] == [{"type": "SlowReplica", "subject": "chat-abc-1-0", "seen": 2, "missed": 0}]


def test_one_flap_does_not_clear_a_reported_finding() -> None:
    steps = run([seen(FLEET), seen(FLEET), seen(FLEET), seen(), seen(FLEET), seen()])
    assert [bool(status["findings"]) for status, _, _ in steps] == [False, False, True, True, True, True]
    assert sum(len(appeared) for _, appeared, _ in steps) == 1  # one Warning event, not one per flap


def test_unknown_inputs_hold_the_memory_of_their_type_only() -> None:
    status: Any = None
    for i in range(3):
        status = evolve(status, seen(SLOW, FLEET), 3, 2, f"t{i}").status
    blind = Diagnosis((), {"SlowReplica": "Prometheus unreachable"})
    for i in range(3, 6):
        evolution = evolve(status, blind, 3, 2, f"t{i}")
        status = evolution.status
    assert [f["type"] for f in status["findings"]] == ["SlowReplica"]  # held; SlowScaleUp (known, absent) cleared
    assert status["unknown"] == ["SlowReplica: Prometheus unreachable"]


def test_a_healthy_fleet_stays_empty_and_malformed_memory_is_dropped() -> None:
    assert evolve(None, seen(), 3, 3, "t0").status == {"findings": [], "tracking": [], "unknown": []}
    garbage = {
        "findings": [{"type": "Nope"}, "x", {"type": "SlowReplica", "pod": "p"}],
        "tracking": [{"type": "SlowStart", "subject": 3}, {"type": "SlowReplica", "subject": "p", "seen": -4}],
    }
    status = evolve(garbage, seen(), 3, 3, "t0").status
    assert status["findings"] == []  # the only well-typed finding had no `since`
    assert status["tracking"] == []
