"""The alerts (manifests/monitoring/alerts.yaml): `promtool check rules` accepts them, `promtool test rules` fires
each one when it should and not before (tests/integration/chart/alerts.test.yaml), they read only metrics the operator
exports, and the chart's PrometheusRule carries exactly the same groups.

promtool is built from the Prometheus release the local cluster runs (`localcluster.gotools`, e2e/tools/promtool;
about a minute cold on 2 cores, cached in e2e/.bin).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from localcluster.build import PROMETHEUS_MODULE_DIR, prometheus_version
from localcluster.gotools import PROMTOOL_MODULE_DIR, ensure_promtool
from localcluster.helm import CHART_DIR, ensure_helm, helm_template
from sglang_operator import metrics

REPO_ROOT = CHART_DIR.parent.parent
ALERTS = REPO_ROOT / "manifests" / "monitoring" / "alerts.yaml"
CHART_COPY = CHART_DIR / "files" / "alerts.yaml"
RULE_TESTS = Path(__file__).resolve().parent / "alerts.test.yaml"
# What the issue asks the alerts to cover, by alert name.
REQUIRED_ALERTS = {
    "SGLangDeploymentNotReady",  # fleet not Ready
    "SGLangDeploymentDown",
    "SGLangDeploymentReplicasBelowDesired",  # replicas below desired for long
    "SGLangDeploymentRouterOutOfSync",
    "SGLangDeploymentMetricsUnavailable",
    "SGLangDeploymentScalingCapped",  # by maxReplicas or maxGPUs
    "SGLangOperatorDrainTimeouts",
    "SGLangOperatorReconcileErrors",
    "SGLangDeploymentDegraded",
}


@pytest.fixture(scope="module")
def promtool() -> Path:
    return ensure_promtool()


def rules() -> list[dict[str, Any]]:
    return [rule for group in yaml.safe_load(ALERTS.read_text())["groups"] for rule in group["rules"]]


def run(promtool: Path, *args: str) -> str:
    proc = subprocess.run([str(promtool), *args], capture_output=True, text=True, timeout=120, cwd=REPO_ROOT)
    assert proc.returncode == 0, f"promtool {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def test_promtool_accepts_the_rules(promtool: Path) -> None:
    out = run(promtool, "check", "rules", str(ALERTS))
    assert f"SUCCESS: {len(rules())} rules found" in out, out


def test_promtool_rule_tests_pass(promtool: Path) -> None:
    out = run(promtool, "test", "rules", str(RULE_TESTS))
    assert "SUCCESS" in out, out


def test_every_alert_has_a_rule_test_that_fires_it() -> None:
    tests = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    fired = {case["alertname"] for test in tests for case in test["alert_rule_test"] if case["exp_alerts"]}
    alerts = {rule["alert"] for rule in rules() if "alert" in rule}
    assert alerts >= REQUIRED_ALERTS
    assert fired == alerts, f"alerts no test fires: {alerts - fired}"


def test_alerts_read_only_metrics_the_operator_exports() -> None:
    exported = {
        sample_name
        for family in metrics.REGISTRY.collect()
        for sample_name in (family.name, f"{family.name}_total", f"{family.name}_count", f"{family.name}_bucket")
    }
    recorded = {rule["record"] for rule in rules() if "record" in rule}
    used = {name for rule in rules() for name in re.findall(r"\bsglang_operator[:_][a-z_:]+", rule["expr"])}
    assert used, "no operator metric found in the rules"
    missing = used - recorded - exported
    assert not missing, f"not exported by operator/sglang_operator/metrics.py: {missing}"


def test_every_alert_has_a_severity_summary_and_description() -> None:
    for rule in rules():
        if "alert" in rule:
            assert rule["labels"]["severity"] in ("critical", "warning"), rule["alert"]
            assert {"summary", "description"} <= set(rule["annotations"]), rule["alert"]


def test_the_chart_copy_is_the_alerts_file() -> None:
    assert CHART_COPY.read_bytes() == ALERTS.read_bytes(), "run: cp manifests/monitoring/alerts.yaml " + str(
        CHART_COPY.relative_to(REPO_ROOT)
    )


def test_the_chart_prometheus_rule_carries_the_same_groups() -> None:
    helm = ensure_helm()
    assert "PrometheusRule" not in helm_template(helm)  # off by default: the CRD may not exist
    rendered = helm_template(
        helm, "--set", "prometheusRule.enabled=true", "--set-json", 'prometheusRule.labels={"release":"kps"}'
    )
    (rule,) = [doc for doc in yaml.safe_load_all(rendered) if doc and doc["kind"] == "PrometheusRule"]
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["labels"]["release"] == "kps"
    assert rule["spec"] == yaml.safe_load(ALERTS.read_text())


def test_promtool_is_the_cluster_prometheus_release() -> None:
    assert prometheus_version(PROMTOOL_MODULE_DIR) == prometheus_version(PROMETHEUS_MODULE_DIR)
