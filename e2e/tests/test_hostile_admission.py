"""The hostile-input corpus (tests/support/hostile/corpus.py) at admission on the real API server (dry runs).

- `SCHEMA` cases: a dry-run create is refused, naming the field `validate` names.
- `UNKNOWN` cases: refused under strict field validation (`kubectl --validate=strict`), naming the field.
- `POLICY` cases: the API server accepts them (only the operator's settings refuse them, as
  `tests/unit/hostile/test_corpus.py` checks through `check_pod_policy` and the Prometheus allow-list).

Every case is sent; the mismatches are collected and reported together, so one run shows all of them.
"""

from __future__ import annotations

import json
import re
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from localcluster.fleet import install_crd
from sglang_operator.api.constants import GROUP, PLURAL, VERSION
from tests.support.hostile.corpus import CASES, POLICY, SCHEMA, UNKNOWN, Hostile


def _dry_run(api_client: client.ApiClient, namespace: str, doc: dict[str, Any], strict: bool) -> str | None:
    """The API server's refusal (its response body), or None when it would store the object."""
    extra = {"field_validation": "Strict"} if strict else {}
    try:
        client.CustomObjectsApi(api_client).create_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, doc, dry_run="All", **extra
        )
    except ApiException as exc:
        return _said(exc)
    return None


def _said(exc: ApiException) -> str:
    """The Status' message and the fields of its causes: what the API server says about the object (not the rest
    of the Status, whose own `metadata` would match any field named metadata)."""
    try:
        status = json.loads(exc.body)
    except (TypeError, ValueError):
        return f"{exc.status}: {exc.body}"
    causes = (status.get("details") or {}).get("causes") or []
    fields = " ".join(str(cause.get("field", "")) for cause in causes)
    return f"{exc.status}: {status.get('message', '')} [fields: {fields}]"


def _path(text: str) -> str:
    """A field path with `[0]` and `[key]` written as `.0` and `.key` (the API server writes map keys `labels[a]`,
    validate `labels.a`)."""
    return re.sub(r"\[([^\[\]\s]*)\]", r".\1", text)


def _names(refusal: str, case: Hostile) -> bool:
    """The refusal names the case's field, or (for a request refused before any field is looked at) says what
    the case expects instead."""
    return _path(case.field) in _path(refusal) or (case.admission is not None and case.admission in refusal)


def _mismatches(api_client: client.ApiClient, namespace: str, kind: str, strict: bool) -> list[str]:
    found = []
    for case in (c for c in CASES if c.refused_by == kind):
        refusal = _dry_run(api_client, namespace, case.doc, strict=strict)
        if refusal is None:
            found.append(f"{case.id}: ACCEPTED at admission ({case.why}); validate names {case.field}")
        elif not _names(refusal, case):
            found.append(f"{case.id}: refused without naming {case.field}: {refusal[:400]}")
    return found


def test_schema_cases_are_refused_at_admission(api_client: client.ApiClient, namespace: str) -> None:
    install_crd(api_client)
    mismatches = _mismatches(api_client, namespace, SCHEMA, strict=False)
    assert not mismatches, "\n".join(mismatches)


def test_unknown_fields_are_refused_under_strict_validation(api_client: client.ApiClient, namespace: str) -> None:
    install_crd(api_client)
    mismatches = _mismatches(api_client, namespace, UNKNOWN, strict=True)
    assert not mismatches, "\n".join(mismatches)


def test_policy_cases_pass_admission(api_client: client.ApiClient, namespace: str) -> None:
    """What only the operator's settings refuse is, to the API server, a valid CR: the operator is the one that must
    refuse it (unit-tested in tests/unit/hostile/test_corpus.py, end to end in test_tenant.py)."""
    install_crd(api_client)
    refused = [
        f"{case.id}: {refusal[:300]}"
        for case in CASES
        if case.refused_by == POLICY and (refusal := _dry_run(api_client, namespace, case.doc, strict=True))
    ]
    assert not refused, "\n".join(refused)
