"""The installed `sglang-operator` console script: output shapes and exit codes."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from .conftest import EXAMPLES, REPO

CLI = shutil.which("sglang-operator", path=str(Path(sys.executable).parent)) or "sglang-operator"


def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CLI, *args], capture_output=True, text=True, input=stdin, timeout=60, check=False)


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "cr.yaml"
    path.write_text(text)
    return str(path)


INVALID = """
apiVersion: sglang.ai/v1alpha1
kind: SGLangDeployment
metadata: {name: bad}
spec:
  model: {path: m}
  parallelism: {tp: 6, attentionDP: 4}
"""


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_examples_validate(example: Path) -> None:
    result = run("validate", "-f", str(example))
    assert result.returncode == 0, result.stderr
    assert "valid" in result.stdout


def test_validate_json_errors(tmp_path: Path) -> None:
    result = run("validate", "-f", write(tmp_path, INVALID), "-o", "json")
    assert result.returncode == 1
    payload = json.loads(result.stdout)
    assert payload["valid"] is False
    assert payload["errors"][0]["field"] == "spec.parallelism.attentionDP"
    assert "divisible by attentionDP" in payload["errors"][0]["message"]


def test_validate_text_errors_go_to_stderr(tmp_path: Path) -> None:
    result = run("validate", "-f", write(tmp_path, INVALID))
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.startswith("error: spec.parallelism.attentionDP: ")


def test_render_yaml_stream_and_json_list() -> None:
    yaml_out = run("render", "-f", str(REPO / "examples" / "llama-70b-tp4.yaml"))
    assert yaml_out.returncode == 0
    kinds = [doc["kind"] for doc in yaml.safe_load_all(yaml_out.stdout)]
    assert kinds == ["Pod", "Pod", "Deployment", "Service"]
    json_out = run("render", "-f", str(REPO / "examples" / "llama-70b-tp4.yaml"), "-o", "json")
    payload = json.loads(json_out.stdout)
    assert payload["kind"] == "List" and [i["kind"] for i in payload["items"]] == kinds


def test_render_invalid_prints_nothing_on_stdout(tmp_path: Path) -> None:
    result = run("render", "-f", write(tmp_path, INVALID))
    assert result.returncode == 1 and result.stdout == "" and "attentionDP" in result.stderr


def test_render_reads_stdin() -> None:
    result = run("render", "-f", "-", stdin=(REPO / "examples" / "quickstart.yaml").read_text())
    assert result.returncode == 0 and "sglang.launch_server" in result.stdout


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("spec: [unclosed", "invalid YAML at line 1"),
        ("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\n", "expected kind SGLangDeployment"),
        (
            "apiVersion: sglang.ai/v1\nkind: SGLangDeployment\nmetadata: {name: x}\n",
            "apiVersion sglang.ai/v1alpha1",
        ),
    ],
)
def test_unusable_input_is_one_line_exit_2(tmp_path: Path, text: str, fragment: str) -> None:
    for command in ("validate", "render"):
        result = run(command, "-f", write(tmp_path, text))
        assert result.returncode == 2
        assert result.stdout == ""
        assert fragment in result.stderr and len(result.stderr.strip().splitlines()) == 1
        assert "Traceback" not in result.stderr


def test_unreadable_file_exit_2(tmp_path: Path) -> None:
    result = run("validate", "-f", str(tmp_path / "missing.yaml"))
    assert result.returncode == 2 and "cannot read" in result.stderr


def test_too_long_name_is_rejected(tmp_path: Path) -> None:
    text = INVALID.replace("name: bad", "name: " + "x" * 41).replace("tp: 6, attentionDP: 4", "tp: 1")
    result = run("validate", "-f", write(tmp_path, text), "-o", "json")
    assert result.returncode == 1
    assert json.loads(result.stdout)["errors"][0]["field"] == "metadata.name"


@pytest.mark.parametrize(
    ("qps", "latency", "concurrency", "replicas", "with_headroom"),
    [("200", "1.5", "64", 5, 7), ("100", "2", "64", 4, 5)],
)
def test_plan(qps: str, latency: str, concurrency: str, replicas: int, with_headroom: int) -> None:
    result = run("plan", "--qps", qps, "--latency", latency, "--concurrency", concurrency, "-o", "json")
    assert result.returncode == 0
    assert json.loads(result.stdout) == {"replicas": replicas, "replicasWithHeadroom": with_headroom}
    text = run("plan", "--qps", qps, "--latency", latency, "--concurrency", concurrency)
    assert f"-> {replicas} replicas" in text.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["--qps", "0", "--latency", "1", "--concurrency", "8"],
        ["--qps", "10", "--latency", "-1", "--concurrency", "8"],
        ["--qps", "10", "--latency", "1"],
        ["--qps", "abc", "--latency", "1", "--concurrency", "8"],
        ["--qps", "10", "--latency", "1", "--concurrency", "8", "--headroom", "-0.5"],
    ],
)
def test_plan_rejects_bad_input(args: list[str]) -> None:
    result = run("plan", *args)
    assert result.returncode == 2 and result.stdout == "" and "Traceback" not in result.stderr


def test_sim_takes_launch_server_flags() -> None:
    result = run("sim", "--model-path", "m", "--tp-size", "6", "--nnodes", "4")
    assert result.returncode == 1
    assert "tp_size must be divisible by number of nodes" in result.stderr
