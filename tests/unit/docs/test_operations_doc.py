"""docs/operations.md keeps up with the code: every metric the operator exports, every alert, every problem reason
and condition type, and the ArgoCD key it documents."""

from __future__ import annotations

from pathlib import Path

import yaml

from sglang_operator import metrics
from sglang_operator.controller.status import PROBLEM_REASONS
from sglang_operator.runtime.conditions import CONDITION_TYPES

REPO_ROOT = Path(__file__).resolve().parents[3]
DOC = (REPO_ROOT / "docs" / "operations.md").read_text()


def test_every_exported_metric_is_in_the_reference() -> None:
    names = {family.name for family in metrics.REGISTRY.collect()}
    assert names
    missing = sorted(name for name in names if f"`{name}`" not in DOC and f"`{name}_total`" not in DOC)
    assert not missing, f"docs/operations.md, Metrics, lacks: {missing}"


def test_every_alert_is_documented() -> None:
    groups = yaml.safe_load((REPO_ROOT / "manifests" / "monitoring" / "alerts.yaml").read_text())["groups"]
    alerts = [rule["alert"] for group in groups for rule in group["rules"] if "alert" in rule]
    assert not [a for a in alerts if f"`{a}`" not in DOC]


def test_every_condition_and_problem_reason_is_in_troubleshooting() -> None:
    assert not [t for t in CONDITION_TYPES if f"### {t}" not in DOC]
    assert not [r for r in PROBLEM_REASONS if f"`{r}`" not in DOC]


def test_the_argocd_key_and_uninstall_commands_match_the_files() -> None:
    patch = yaml.safe_load((REPO_ROOT / "manifests" / "argocd" / "argocd-cm-patch.yaml").read_text())
    (key,) = patch["data"]
    assert f"`{key}`" in DOC
    assert "kubectl delete crd sglangdeployments.sglang.ai" in DOC
    assert '{"metadata":{"finalizers":null}}' in DOC
