"""Only the product ships: the wheel built from the repository root holds the `sglang_operator` package alone (no
simulator, no local cluster, no tests), and the operator image copies no test code."""

import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel pip builds from the repository root, as `pip install .` (and the image) would, offline: the
    venv's own setuptools, no build isolation."""
    out = tmp_path_factory.mktemp("wheel")
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), "."]
    subprocess.run(command, cwd=REPO_ROOT, check=True, capture_output=True, timeout=300)
    (built,) = out.glob("sglang_operator-*.whl")
    return built


def test_the_wheel_holds_the_operator_package_alone(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    modules = [n for n in names if n.endswith(".py")]
    assert modules and all(n.startswith("sglang_operator/") for n in modules), [
        n for n in modules if not n.startswith("sglang_operator/")
    ]
    assert not [n for n in names if re.search(r"(^|/)(sim|sglang_sim|localcluster|tests?)(/|$)", n)]
    assert "sglang_operator/runtime/runner.py" in names and "sglang_operator/app.py" in names


def test_the_wheel_installs_only_the_operators_command(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        (entry_points,) = [n for n in archive.namelist() if n.endswith("entry_points.txt")]
        text = archive.read(entry_points).decode()
    assert "sglang-operator = sglang_operator.cli:main" in text and "sglang-sim" not in text


def test_the_image_copies_no_test_code() -> None:
    copied = [
        line.split()[1:-1]
        for line in (REPO_ROOT / "Dockerfile").read_text().splitlines()
        if line.startswith("COPY") and "--from=" not in line
    ]
    assert sorted(source for sources in copied for source in sources) == ["README.md", "operator/", "pyproject.toml"]
