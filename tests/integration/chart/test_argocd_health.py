"""The ArgoCD health check (manifests/argocd/health.lua) on gopher-lua, the Lua engine ArgoCD runs it with, opened
the way ArgoCD opens it (base and table libraries only): every fixture in manifests/argocd/fixtures (hand-written
cases of each condition's reasons, and statuses captured from e2e runs) gets its expected health, and the
argocd-cm patch carries the script byte for byte. e2e/tests/test_argocd_health.py runs it on live CRs.

The runner (manifests/argocd/luatest) is built from Go modules on first use (`localcluster.gotools`, seconds).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from localcluster.gotools import HEALTH_SCRIPT, argocd_health

ARGOCD_DIR = HEALTH_SCRIPT.parent
FIXTURES = sorted((ARGOCD_DIR / "fixtures").glob("*.yaml"))
PATCH = ARGOCD_DIR / "argocd-cm-patch.yaml"
HEALTH_KEY = "resource.customizations.health.sglang.ai_SGLangDeployment"


def load(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(path.read_text())
    return doc


@pytest.fixture(scope="module")
def verdicts() -> dict[str, dict[str, str]]:
    """Every fixture's verdict, from one run of the runner."""
    results = argocd_health([load(path)["object"] for path in FIXTURES])
    return {path.stem: result for path, result in zip(FIXTURES, results, strict=True)}


@pytest.mark.parametrize("fixture", [path.stem for path in FIXTURES])
def test_fixture_gets_its_health(fixture: str, verdicts: dict[str, dict[str, str]]) -> None:
    expect = load(ARGOCD_DIR / "fixtures" / f"{fixture}.yaml")["expect"]
    verdict = verdicts[fixture]
    assert "error" not in verdict, verdict
    assert verdict["status"] == expect["status"], verdict
    assert expect["message"] in verdict["message"], verdict


def test_fixtures_cover_every_health_and_include_captured_statuses() -> None:
    docs = [load(path) for path in FIXTURES]
    assert {doc["expect"]["status"] for doc in docs} == {"Healthy", "Progressing", "Degraded", "Suspended"}
    captured = [doc for doc in docs if "captured" in doc]
    assert captured, "no status captured from an e2e run (e2e/tests/test_argocd_health.py writes them)"


def test_the_runner_refuses_what_argocd_refuses(tmp_path: Path) -> None:
    """The runner behaves like ArgoCD's VM: no string library, and a status outside ArgoCD's set is Unknown."""
    script = tmp_path / "probe.lua"
    script.write_text('return {status = string.upper("healthy")}')
    (no_string,) = argocd_health([{}], script)
    assert "error" in no_string and "string" in no_string["error"], no_string
    script.write_text('return {status = "Fine", message = "x"}')
    unknown = {"status": "Unknown", "message": "Lua returned an invalid health status"}
    assert argocd_health([{}], script) == [unknown]


def test_argocd_cm_patch_carries_the_script() -> None:
    patch = load(PATCH)
    assert (patch["kind"], patch["metadata"]["name"]) == ("ConfigMap", "argocd-cm")
    assert patch["data"][HEALTH_KEY] == HEALTH_SCRIPT.read_text()
