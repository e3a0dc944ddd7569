"""`sglang-operator doctor NAME [-n NS] [-o table|json]`: one evaluation of a fleet, read as the operator reads it
(the CR and its pods from the API server with the caller's kubeconfig, Prometheus where the autoscaler reads it,
the routers' worker lists), printed with evidence and actions.

The command reports what one evaluation over `diagnostics.windowSeconds` finds, without the operator's hysteresis
(`status.diagnostics` holds the operator's reported findings; `-o json` includes them as `reported`). Exit codes:
0 no findings, 1 findings, 2 the fleet could not be read.
"""

import json
from collections.abc import Mapping
from typing import Any

from ..api.constants import GROUP, LABEL_DEPLOYMENT, PLURAL, VERSION
from ..api.validation import parse_spec
from ..settings import OperatorSettings
from .doctor_pass import evaluate
from .model import FINDING_TYPES, Candidate

COLUMNS = ("TYPE", "REPLICA", "POD", "NODE", "EVIDENCE", "ACTION")


class DoctorError(Exception):
    """The fleet could not be read (exit 2)."""


def default_namespace() -> str:
    """The kubeconfig context's namespace, else `default`."""
    from kubernetes import config

    try:
        _, active = config.list_kube_config_contexts()
        return str((active or {}).get("context", {}).get("namespace") or "default")
    except Exception:  # no kubeconfig (in a pod): the default namespace
        return "default"


def examine(
    name: str, namespace: str, prometheus_url: str | None = None, settings: OperatorSettings | None = None
) -> dict[str, Any]:
    """The report of one evaluation of the fleet `namespace/name`, as JSON-ready data. `settings`: where the CLI
    reads a CR without a Prometheus URL of its own (`$SGLANG_OPERATOR_PROMETHEUS_URL`)."""
    from kubernetes import client

    from ..runtime.kube import API_TIMEOUT, api_client

    try:
        api = api_client()
        custom = client.CustomObjectsApi(api)
        body = custom.get_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, name, _request_timeout=API_TIMEOUT
        )
        listed = client.CoreV1Api(api).list_namespaced_pod(
            namespace, label_selector=f"{LABEL_DEPLOYMENT}={name}", _request_timeout=API_TIMEOUT
        )
    except client.ApiException as e:
        raise DoctorError(f"cannot read sgld {namespace}/{name}: {e.status} {e.reason}") from e
    except Exception as e:  # no kubeconfig, API server unreachable
        raise DoctorError(f"cannot read sgld {namespace}/{name}: {type(e).__name__}: {str(e)[:200]}") from e
    spec, errors = parse_spec(body.get("spec"))
    if spec is None:
        raise DoctorError(f"sgld {namespace}/{name} has an invalid spec: {errors[0].field}: {errors[0].message}")
    pods = [dict(api.sanitize_for_serialization(pod)) for pod in listed.items]
    evaluation = evaluate(
        api, body, spec, pods, settings or OperatorSettings(), prometheus_url=prometheus_url, as_user=True
    )
    order = {kind: i for i, kind in enumerate(FINDING_TYPES)}
    candidates = sorted(evaluation.diagnosis.candidates, key=lambda c: (order[c.type], c.subject))
    return {
        "namespace": namespace,
        "name": name,
        "windowSeconds": spec.diagnostics.window_seconds,
        "findings": [_finding(c) for c in candidates],
        "unknown": dict(sorted(evaluation.diagnosis.unknown.items())),
        "reported": list(((body.get("status") or {}).get("diagnostics") or {}).get("findings") or []),
    }


def _finding(c: Candidate) -> dict[str, str]:
    return {"type": c.type, "replica": c.replica, "pod": c.subject, "node": c.node, "evidence": c.evidence,
            "action": c.action}  # fmt: skip


def render(report: Mapping[str, Any], output: str) -> str:
    """The report as `-o json` or as a table (findings, then one line per unknown signal)."""
    if output == "json":
        return json.dumps(report, indent=2) + "\n"
    findings = report["findings"]
    lines = []
    if findings:
        rows = [COLUMNS] + [
            tuple(f[k] or "-" for k in ("type", "replica", "pod", "node", "evidence", "action")) for f in findings
        ]
        widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS) - 1)]
        lines = ["   ".join([*(cell.ljust(w) for cell, w in zip(row, widths, strict=False)), row[-1]]) for row in rows]
    else:
        lines = [f"No findings for sgld {report['namespace']}/{report['name']} over {report['windowSeconds']}s."]
    for kind, why in report["unknown"].items():
        lines.append(f"unknown: {kind}: {why}")
    return "\n".join(lines) + "\n"
