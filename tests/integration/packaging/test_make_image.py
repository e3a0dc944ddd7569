"""`make image` builds the operator image with the builder the machine has, tagged as the chart runs it by default
(image.repository : appVersion), and says clearly why it cannot when there is none.

The builders are stand-in scripts on a PATH of their own that record how they were called (no image is built here:
this machine has no container runtime to build with).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parents[3]
CHART = REPO_ROOT / "charts" / "sglang-operator"


def default_image() -> str:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    return f"{values['image']['repository']}:{values['image']['tag'] or chart['appVersion']}"


def make_image(bin_dir: Path) -> subprocess.CompletedProcess[str]:
    """`make image` with only `bin_dir` (plus sh and sed) on PATH."""
    for tool in ("sh", "sed"):
        found = shutil.which(tool)
        assert found, tool
        (bin_dir / tool).symlink_to(found)
    make = shutil.which("make")
    assert make
    env = {"PATH": str(bin_dir), "HOME": os.environ.get("HOME", "/tmp")}
    return subprocess.run([make, "-s", "image"], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60)


def fake(bin_dir: Path, name: str, log: Path, info_ok: bool = True) -> None:
    script = bin_dir / name
    info = "exit 0" if info_ok else "echo 'Cannot connect to the Docker daemon' >&2; exit 1"
    script.write_text(f'#!/bin/sh\nif [ "$1" = info ]; then {info}; fi\necho "{name} $*" >> {log}\n')
    script.chmod(0o755)


@pytest.fixture
def bin_dir(tmp_path: Path) -> Path:
    path = tmp_path / "bin"
    path.mkdir()
    return path


def test_without_a_builder_it_fails_and_says_so(bin_dir: Path) -> None:
    result = make_image(bin_dir)
    assert result.returncode != 0
    assert "no container builder found (docker, buildah or podman)" in result.stderr, result.stderr
    assert default_image() in result.stderr


def test_docker_without_its_daemon_and_nothing_else_fails_and_says_so(bin_dir: Path, tmp_path: Path) -> None:
    fake(bin_dir, "docker", tmp_path / "calls", info_ok=False)
    result = make_image(bin_dir)
    assert result.returncode != 0
    assert "docker is installed but its daemon does not answer" in result.stderr, result.stderr
    assert not (tmp_path / "calls").exists()  # no build was attempted


def test_docker_builds_the_chart_default_image(bin_dir: Path, tmp_path: Path) -> None:
    fake(bin_dir, "docker", tmp_path / "calls")
    result = make_image(bin_dir)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "calls").read_text().splitlines() == [f"docker build -t {default_image()} ."]


def test_buildah_builds_when_docker_cannot(bin_dir: Path, tmp_path: Path) -> None:
    fake(bin_dir, "docker", tmp_path / "calls", info_ok=False)
    fake(bin_dir, "buildah", tmp_path / "calls")
    result = make_image(bin_dir)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "calls").read_text().splitlines() == [f"buildah build -t {default_image()} ."]
