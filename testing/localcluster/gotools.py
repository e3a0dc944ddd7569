"""Test tools built from Go modules, like the cluster's binaries (`build.ensure_built`: a stamp per tool, rebuilt
only when its module changes, cached in e2e/.bin):

- `luatest` (manifests/argocd/luatest): runs the ArgoCD health script on gopher-lua, the engine ArgoCD uses;
- `promtool` (e2e/tools/promtool: the Prometheus release the cluster's Prometheus is built from, plus the few
  packages only promtool needs): `promtool test rules` and `check rules` for manifests/monitoring/alerts.yaml.

The Go module proxy is used at build time only; tests run the built binaries.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from localcluster.build import Target, ensure_built, prometheus_version
from localcluster.paths import E2E_DIR, REPO_ROOT, bin_dir

LUATEST_MODULE_DIR = REPO_ROOT / "manifests" / "argocd" / "luatest"
HEALTH_SCRIPT = REPO_ROOT / "manifests" / "argocd" / "health.lua"
PROMTOOL_MODULE_DIR = E2E_DIR / "tools" / "promtool"


def luatest_target() -> Target:
    return Target(
        name="argocd-luatest",
        module_dir=LUATEST_MODULE_DIR,
        packages={"argocd-luatest": "sglang.ai/manifests/argocd/luatest"},
        go_names={"argocd-luatest": "luatest"},
    )


def promtool_target() -> Target:
    pkg = "github.com/prometheus/common/version"
    return Target(
        name="promtool",
        module_dir=PROMTOOL_MODULE_DIR,
        packages={"promtool": "github.com/prometheus/prometheus/cmd/promtool"},
        ldflags=[f"-X {pkg}.Version={prometheus_version(PROMTOOL_MODULE_DIR)}", f"-X {pkg}.Branch=localcluster"],
        tags="remove_all_sd",  # rule tests need no service discovery
    )


def ensure_luatest(log: bool = True) -> Path:
    return ensure_built(bin_dir(), luatest_target(), log).bin_dir / "argocd-luatest"


def ensure_promtool(log: bool = True) -> Path:
    return ensure_built(bin_dir(), promtool_target(), log).bin_dir / "promtool"


def argocd_health(objects: list[dict[str, Any]], script: Path = HEALTH_SCRIPT) -> list[dict[str, str]]:
    """ArgoCD's verdict on each object: {"status", "message"}, or {"error"} when the script failed on it."""
    proc = subprocess.run(
        [str(ensure_luatest(log=False)), str(script)],
        input=json.dumps(objects),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    results: list[dict[str, str]] = json.loads(proc.stdout)
    return results


if __name__ == "__main__":  # python -m localcluster.gotools: build both, print their paths
    print(ensure_luatest(), ensure_promtool(), sep="\n", file=sys.stdout)
