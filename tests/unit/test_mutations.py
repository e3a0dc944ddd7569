"""The planted faults of `tests/mutations/run.py` still fit the code: each one's text occurs exactly once in its file
and names tests that exist, so moving the code fails `make unit`, not only the mutation script (docs/testing.md)."""

from tests.mutations.run import FAULTS, check_faults


def test_every_planted_fault_still_finds_its_place() -> None:
    assert check_faults(FAULTS) == []


def test_the_eight_faults_of_issue_38_are_planted() -> None:
    assert len(FAULTS) == 8
