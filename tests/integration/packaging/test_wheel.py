"""Only the product ships: the wheel built from the repository root holds the `sglang_operator` package alone (no
simulator, no local cluster, no tests), the operator imports nothing from testing/'s distribution, and the operator
image's build copies no test code."""

import ast
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[3]
PACKAGE_DIR = REPO_ROOT / "operator" / "sglang_operator"
TEST_RIG = ("sglang_sim", "localcluster", "tests", "bench")
"""Top-level packages the operator must never import: testing/'s distribution and the repository's test code."""


def checkout_copy(destination: Path) -> Path:
    """The files a clone of this checkout would hold (tracked and untracked, not ignored), copied to `destination`,
    so that build outputs left in the working tree (`build/`, `*.egg-info`) can neither leak into the wheel nor be
    written by this test."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO_ROOT,
        check=True,
        capture_output=True,
        timeout=60,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = REPO_ROOT / name
        if source.is_file():  # a tracked file deleted in the working tree is not in a clone of it
            target = destination / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return destination


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel pip builds from the repository root, as `pip install .` would, offline: the venv's own
    setuptools, no build isolation."""
    root = checkout_copy(tmp_path_factory.mktemp("checkout"))
    out = tmp_path_factory.mktemp("wheel")
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), "."]
    subprocess.run(command, cwd=root, check=True, capture_output=True, timeout=300)
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


def imported_top_levels(path: Path) -> set[str]:
    """The top-level names `path` imports absolutely, function-level imports included."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_the_operator_imports_nothing_from_the_test_rig() -> None:
    """`pip install sglang-operator` brings no simulator and no local cluster, so no operator module may need them."""
    offenders = {
        str(path.relative_to(REPO_ROOT)): sorted(imported_top_levels(path) & set(TEST_RIG))
        for path in sorted(PACKAGE_DIR.rglob("*.py"))
    }
    assert {path: names for path, names in offenders.items() if names} == {}


def test_the_image_copies_no_test_code() -> None:
    copied = [
        line.split()[1:-1]
        for line in (REPO_ROOT / "Dockerfile").read_text().splitlines()
        if line.startswith("COPY") and "--from=" not in line
    ]
    assert sorted(source for sources in copied for source in sources) == ["README.md", "operator/", "pyproject.toml"]


def test_the_build_context_holds_no_test_code() -> None:
    """.dockerignore excludes everything, then admits what the Dockerfile copies and nothing else, so the context
    `make image` sends to the builder carries no simulator, local cluster or tests either."""
    rules = [
        line.strip()
        for line in (REPO_ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert rules[0] == "*"
    assert sorted(rule[1:] for rule in rules if rule.startswith("!")) == ["README.md", "operator", "pyproject.toml"]
