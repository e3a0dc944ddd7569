"""A refused child's status message names the fields the API server gave as causes, never the values."""

import json

from kubernetes.client.exceptions import ApiException

from sglang_operator.controller.apierrors import MAX_CAUSES, causes, describe_causes, without_value
from sglang_operator.controller.reconcile import describe_failure

# The shape kube-apiserver v1.37.2 answers a pod create with two invalid fields (422, reason Invalid; as read from it).
REFUSED_POD = {
    "kind": "Status",
    "apiVersion": "v1",
    "status": "Failure",
    "message": 'Pod "f-0-0" is invalid: [spec.containers[1].volumeMounts.subPath: Invalid value: "../etc": must '
    "not contain '..', spec.initContainers[0].name: Duplicate value: \"sglang\"]",
    "reason": "Invalid",
    "details": {
        "name": "f-0-0",
        "kind": "Pod",
        "causes": [
            {
                "reason": "FieldValueInvalid",
                "message": "Invalid value: \"../etc\": must not contain '..'",
                "field": "spec.containers[1].volumeMounts.subPath",
            },
            {
                "reason": "FieldValueDuplicate",
                "message": 'Duplicate value: "sglang"',
                "field": "spec.initContainers[0].name",
            },
        ],
    },
    "code": 422,
}


def _refusal(body: object) -> ApiException:
    exc = ApiException(status=422, reason="Unprocessable Entity")
    exc.body = json.dumps(body)
    return exc


def test_the_condition_names_each_field_and_rule_but_no_value() -> None:
    message = describe_failure("applying the replica plan", _refusal(REFUSED_POD))
    assert message == (
        "applying the replica plan: the API server answered 422 Unprocessable Entity: Pod f-0-0: "
        "spec.containers[1].volumeMounts.subPath: Invalid value: must not contain '..' (FieldValueInvalid); "
        "spec.initContainers[0].name: Duplicate value (FieldValueDuplicate)"
    )
    assert "../etc" not in message


def test_values_are_left_out_of_every_kind_of_message() -> None:
    assert without_value('Invalid value: "a \\"quoted\\": b": must be short') == "Invalid value: must be short"
    assert without_value("Invalid value: 70000: must be between 1 and 65535") == (
        "Invalid value: must be between 1 and 65535"
    )
    assert without_value('Unsupported value: "x": supported values: "a", "b"') == (
        'Unsupported value: supported values: "a", "b"'
    )
    assert without_value("Required value") == "Required value"
    assert without_value("Too long: may not be more than 63 bytes") == "Too long: may not be more than 63 bytes"


def test_a_body_that_is_no_status_adds_nothing() -> None:
    for body in (None, "", "not json", "[1]", json.dumps({"details": {"causes": "x"}}), "{" * 100_000):
        assert describe_causes(body) == ""
    plain = ApiException(status=500, reason="Internal Server Error")
    assert describe_failure("reading pods", plain) == "reading pods: the API server answered 500 Internal Server Error"


def test_causes_are_bounded() -> None:
    many = {"details": {"causes": [{"field": "f" * 1000, "reason": "R", "message": "m"}] * 50}}
    found = causes(json.dumps(many))
    assert len(found) == MAX_CAUSES
    assert all(len(cause.field) <= 200 for cause in found)
