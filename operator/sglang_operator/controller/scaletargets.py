"""Worker groups' scale targets (`SGLangWorkerGroup`, see `api.scaletarget`): which one sizes which group, and the
status each gets (the group's serving replicas and selector, which an HPA reads through its /scale). Pure."""

from dataclasses import dataclass
from typing import Any

from ..api.spec import SGLangDeploymentSpec
from ..desired import autoscaler_owns, status_count
from .status import worker_selector

STATUS_WRITES_PER_PASS = 32
"""Scale targets' status patches one pass makes at most: no number of them makes a pass do unbounded work."""


@dataclass(frozen=True)
class ScaleTargetVerdict:
    """Whether one SGLangWorkerGroup sizes its group now, and why (its status says it)."""

    name: str
    group: str
    in_effect: bool
    message: str


def scale_target_counts(
    spec: SGLangDeploymentSpec, deployment: str, targets: list[dict[str, Any]]
) -> tuple[dict[str, int], list[ScaleTargetVerdict]]:
    """The groups' counts that SGLangWorkerGroups set, and a verdict for each of them. One target per group is in
    effect (the oldest; ties by name), none while the built-in autoscaler owns the fleet or for a group the spec
    does not have. Pure."""
    names = {g.name for g in spec.worker_groups}
    ordered = sorted(targets, key=lambda t: (str((t.get("metadata") or {}).get("creationTimestamp") or ""),
                                            str((t.get("metadata") or {}).get("name") or "")))  # fmt: skip
    counts: dict[str, int] = {}
    holders: dict[str, str] = {}
    verdicts = []
    for target in ordered:
        name = str((target.get("metadata") or {}).get("name") or "")
        group = str((target.get("spec") or {}).get("group") or "")
        replicas = status_count((target.get("spec") or {}).get("replicas"))
        if autoscaler_owns(spec):
            why = f"the built-in autoscaler sizes {deployment} (spec.autoscaling); set recommendOnly or disable it"
        elif group not in names:
            why = f"SGLangDeployment {deployment} has no worker group {group!r}"
        elif group in holders:
            why = f"SGLangWorkerGroup {holders[group]} already sizes group {group}"
        elif replicas is None:
            why = "spec.replicas is not a replica count"
        else:
            counts[group], holders[group] = replicas, name
            verdicts.append(ScaleTargetVerdict(name, group, True, f"sizes group {group} of {deployment}"))
            continue
        verdicts.append(ScaleTargetVerdict(name, group, False, why))
    return counts, verdicts


def scale_target_status(
    verdict: ScaleTargetVerdict, target: dict[str, Any], serving: dict[str, int], deployment: str
) -> dict[str, Any]:
    """The status a scale target should have; `serving`: the groups' serving replicas (status.groups)."""
    known = verdict.group in serving
    return {
        "replicas": serving.get(verdict.group, 0),
        "selector": worker_selector(deployment, verdict.group) if known else "",
        "observedGeneration": (target.get("metadata") or {}).get("generation"),
        "inEffect": verdict.in_effect,
        "message": verdict.message,
    }
