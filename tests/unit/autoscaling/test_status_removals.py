"""The autoscaler's status is written as a merge patch: what a pass no longer reports is deleted, not kept."""

from sglang_operator.autoscaling.autoscale_pass import with_removals


def test_a_key_the_new_status_lacks_is_sent_as_null() -> None:
    previous = {"observed": {"queued": "8", "backlogReplicas": "1.35"}, "roles": {"prefill": {"observed": {"a": "1"}}},
                "history": [{"replicas": 1}]}  # fmt: skip
    new = {"observed": {"queued": "0"}, "roles": {"prefill": {"observed": {}}}, "history": [{"replicas": 2}]}
    assert with_removals(previous, new) == {
        "observed": {"queued": "0", "backlogReplicas": None},
        "roles": {"prefill": {"observed": {"a": None}}},
        "history": [{"replicas": 2}],  # lists are replaced whole
    }


def test_nothing_removed_is_the_new_status_itself() -> None:
    new = {"observed": {"queued": "0"}, "groups": {"p": 1}}
    assert with_removals({"observed": {"queued": "3"}, "groups": {"p": 2}}, new) == new
    assert with_removals(None, new) == new
