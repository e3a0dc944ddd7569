"""The local cluster lives in testing/ but works on the checkout: its Go modules, the chart, the install manifest and
the examples it reads, and its default `.bin`/`.state` under `e2e/`, all resolve from its own location."""

from pathlib import Path

import pytest

from localcluster import adapter, build, gotools, helm, paths

REPO_ROOT = Path(__file__).resolve().parents[3]


def test_the_repository_root_is_the_checkout() -> None:
    assert paths.REPO_ROOT == REPO_ROOT
    assert paths.E2E_DIR == REPO_ROOT / "e2e"


GO_MODULES = (
    *(paths.GO_MODULE_DIR, build.PROMETHEUS_MODULE_DIR, helm.TOOLS_MODULE_DIR, adapter.MODULE_DIR),
    *(gotools.PROMTOOL_MODULE_DIR, gotools.LUATEST_MODULE_DIR),
)


@pytest.mark.parametrize("module_dir", GO_MODULES)
def test_every_go_module_it_builds_is_in_the_checkout(module_dir: Path) -> None:
    assert (module_dir / "go.mod").is_file(), module_dir


def test_what_it_installs_and_reads_is_in_the_checkout() -> None:
    assert (helm.CHART_DIR / "Chart.yaml").is_file()
    assert helm.INSTALL_MANIFEST.is_file()
    assert gotools.HEALTH_SCRIPT.is_file()
    assert (REPO_ROOT / "examples" / "quickstart.yaml").is_file()  # localcluster.fleet's examples


def test_binaries_and_state_default_to_e2e(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LOCALCLUSTER_BIN_DIR", raising=False)
    monkeypatch.delenv("LOCALCLUSTER_STATE_DIR", raising=False)
    assert paths.bin_dir() == (REPO_ROOT / "e2e" / ".bin").resolve()
    assert paths.state_dir() == (REPO_ROOT / "e2e" / ".state").resolve()
