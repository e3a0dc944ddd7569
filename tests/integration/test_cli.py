"""The installed `sglang-operator` console script: output shapes and exit codes."""

import io
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from sglang_operator import cli
from sglang_operator.api.validation import parse_spec
from sglang_operator.topology import topology
from tests.conftest import EXAMPLES, REPO
from tests.support.hostile.corpus import MALFORMED, Malformed

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
    # deepseek-v3-dpa.yaml caches weights under /models on the node: valid where the operator allows that path.
    # autoscaling.yaml names its own Prometheus: valid where the operator allows that URL.
    # deepseek-v3-pd.yaml moves KV over RDMA: valid where the operator names the RDMA device resource.
    allow = ["--allow-host-path", "/models", "--allow-prometheus-url", "http://prometheus-operated.monitoring.svc:9090",
             "--rdma-resource", "rdma/ib"]  # fmt: skip
    result = run("validate", "-f", str(example), *allow)
    assert result.returncode == 0, result.stderr
    assert "valid" in result.stdout


def test_host_path_cache_needs_the_operator_to_allow_it() -> None:
    example = str(REPO / "examples" / "deepseek-v3-dpa.yaml")
    refused = run("validate", "-f", example)
    assert refused.returncode == 1 and refused.stdout == ""
    assert refused.stderr == (
        f"error: {example}: spec.model.cache.hostPath: /models/hf-cache is not under a node directory the operator "
        "allows (allowed: none); use a persistentVolumeClaim or emptyDir cache, or ask the cluster admin to allow "
        "the path (--allow-host-path).\n"
    )
    elsewhere = run("render", "-f", example, "--allow-host-path", "/data")
    assert elsewhere.returncode == 1 and elsewhere.stdout == "" and "(allowed: /data)" in elsewhere.stderr
    assert run("render", "-f", example, "--allow-host-path", "/models/").returncode == 0


def test_own_prometheus_needs_the_operator_to_allow_it() -> None:
    example = str(REPO / "examples" / "autoscaling.yaml")
    refused = run("validate", "-f", example, "--allow-prometheus-url", "http://prometheus-operated.monitoring.svc:90")
    assert refused.returncode == 1 and refused.stdout == ""
    assert refused.stderr.startswith(
        f"error: {example}: spec.autoscaling.prometheusURL: is not a Prometheus the operator allows (allowed: "
        "http://prometheus-operated.monitoring.svc:90): "
    )
    assert len(refused.stderr.splitlines()) == 1
    allowed = run(
        "validate", "-f", example, "--allow-prometheus-url", "http://prometheus-operated.monitoring.svc:9090/"
    )
    assert allowed.returncode == 0, allowed.stderr


@pytest.mark.parametrize("value", ["rdma/ib", "rdma hca", "rdma", "RDMA/ib", "rdma/ib,rdma/roce", " rdma/ib", ""])
def test_validate_reads_the_rdma_resource_as_run_does(value: str) -> None:
    """Issue 37: `validate --rdma-resource "rdma hca"` accepted the RDMA fleet that `run` (which reads a value that
    is no extended resource name as none) and the chart's policy refuse. One parser for both: `settings`."""
    validate = cli._settings(cli.build_parser().parse_args(["validate", "-f", "x", "--rdma-resource", value]))
    run_args = cli.build_parser().parse_args(["run", "--rdma-resource", value])
    assert validate.pod_policy == cli.run_settings(run_args, {}).pod_policy


def test_an_rdma_resource_run_would_not_read_allows_no_rdma_fleet() -> None:
    example = str(REPO / "examples" / "deepseek-v3-pd.yaml")
    for command in ("validate", "render"):
        refused = run(command, "-f", example, "--rdma-resource", "rdma hca")
        assert refused.returncode == 1 and refused.stdout == "", command
        assert f"error: {example}: spec.disaggregation.transferBackend: mooncake moves KV over RDMA" in refused.stderr
    assert run("validate", "-f", example, "--rdma-resource", "rdma/ib").returncode == 0


def test_the_gpu_resource_must_not_be_the_rdma_resource(tmp_path: Path) -> None:
    """Issue 37: under `--rdma-resource rdma/ib`, `gpuResourceName: rdma/ib` replaced a worker's GPUs by one RDMA
    device; refused naming the field."""
    path = write(tmp_path, "apiVersion: sglang.ai/v1alpha1\nkind: SGLangDeployment\nmetadata: {name: g}\n"
                           "spec: {model: {path: m}, resources: {gpuResourceName: rdma/ib}}\n")  # fmt: skip
    refused = run("validate", "-f", path, "--rdma-resource", "rdma/ib")
    assert refused.returncode == 1
    assert refused.stderr.startswith(f"error: {path}: spec.resources.gpuResourceName: rdma/ib is the RDMA device")
    assert run("validate", "-f", path).returncode == 0


def test_validate_json_errors(tmp_path: Path) -> None:
    result = run("validate", "-f", write(tmp_path, INVALID), "-o", "json")
    assert result.returncode == 1
    payload = json.loads(result.stdout)
    assert payload["valid"] is False and payload["file"].endswith("cr.yaml")
    assert payload["errors"][0]["field"] == "spec.parallelism.attentionDP"
    assert "divisible by attentionDP" in payload["errors"][0]["message"]


def test_validate_text_errors_go_to_stderr(tmp_path: Path) -> None:
    path = write(tmp_path, INVALID)
    result = run("validate", "-f", path)
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.startswith(f"error: {path}: spec.parallelism.attentionDP: ")


def test_every_problem_is_one_line_naming_file_and_field(tmp_path: Path) -> None:
    text = INVALID.replace("name: bad", "name: Bad.Name").replace("tp: 6, attentionDP: 4", "tp: 1, dp: 0")
    text += "  replica: 3\n"
    path = write(tmp_path, text)
    result = run("validate", "-f", path)
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    fields = [line.removeprefix(f"error: {path}: ").split(": ", 1)[0] for line in lines]
    assert fields == ["metadata.name", "spec.replica", "spec.parallelism.dp"], result.stderr
    assert "did you mean replicas?" in lines[1]


def test_stdin_is_named_stdin() -> None:
    result = run("validate", "-f", "-", stdin="apiVersion: sglang.ai/v1alpha1\nkind: SGLangDeployment\nspec: {}\n")
    assert result.returncode == 1
    assert result.stderr.splitlines()[0] == "error: <stdin>: metadata.name: is required."


def test_a_terminal_without_unicode_gets_escapes(tmp_path: Path) -> None:
    text = INVALID.replace("name: bad", "name: bad, namespace: équipe").replace("tp: 6, attentionDP: 4", "tp: 1")
    path = write(tmp_path, text + "  caché: 1\n")
    result = subprocess.run(
        [CLI, "validate", "-f", path], capture_output=True, timeout=60, env={**os.environ, "PYTHONIOENCODING": "ascii"}
    )
    assert result.returncode == 1 and result.stdout == b""
    assert result.stderr.decode("ascii").splitlines() == [
        f"error: {path}: metadata.namespace: must be a DNS-1123 label of at most 63 characters (lower-case letters, "
        "digits and '-'): no namespace has another name.",
        f"error: {path}: spec.cach\\xe9: unknown field; known fields: model, engine, parallelism, resources, "
        "replicas, router, autoscaling, template, updateStrategy, monitoring, networkPolicy, inferencePool, "
        "diagnostics, disaggregation, workerGroups.",
    ]


def test_control_characters_in_fields_are_shown_escaped(tmp_path: Path) -> None:
    text = INVALID.replace("tp: 6, attentionDP: 4", 'tp: 1, "evil\\e[2J\\nkey": 1')
    result = run("validate", "-f", write(tmp_path, text))
    assert result.returncode == 1
    assert "\x1b" not in result.stderr and "spec.parallelism.evil\\x1b[2J\\nkey: unknown field" in result.stderr
    assert len(result.stderr.splitlines()) == 1


def test_many_problems_are_capped(tmp_path: Path) -> None:
    env = ", ".join(f"{{name: 'bad name {i}'}}" for i in range(40))
    sidecars = ", ".join(f"{{name: 'Side{i}', image: 'a b'}}" for i in range(8))
    text = INVALID.replace("tp: 6, attentionDP: 4", "tp: 1") + "  engine: {env: [" + env + "]}\n"
    text += "  template: {spec: {containers: [" + sidecars + "]}}\n"
    text += "".join(f"  unknown{i}: 1\n" for i in range(90))
    path = write(tmp_path, text)
    result = run("validate", "-f", path)
    lines = result.stderr.splitlines()
    assert result.returncode == 1 and len(lines) == 101
    assert lines[-1].startswith(f"error: {path}: ... and ") and lines[-1].endswith(" more")
    payload = json.loads(run("validate", "-f", path, "-o", "json").stdout)
    assert len(payload["errors"]) == 100 and payload["moreErrors"] == int(lines[-1].split()[-2])


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
        ("spec: [unclosed", "did not find expected ',' or ']' (while parsing a flow sequence at line 1)"),
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


ISSUE_16_CRASHES = ["non-utf8", "deep-flow-20k", "surrogate-escape", "billion-laughs", "huge-integer"]


@pytest.mark.parametrize("case", [m for m in MALFORMED if m.id in ISSUE_16_CRASHES], ids=lambda m: m.id)
def test_issue_16_crashes_through_the_console_script(case: Malformed, tmp_path: Path) -> None:
    path = tmp_path / "cr.yaml"
    path.write_bytes(case.data)
    for command in ("validate", "render"):
        start = time.perf_counter()
        result = run(command, "-f", str(path))
        assert time.perf_counter() - start < 10  # the process, imports included; in-process runs take < 1 s
        assert result.returncode == 2 and result.stdout == ""
        assert result.stderr.startswith(f"error: {path}: ") and len(result.stderr.splitlines()) == 1
        assert case.fragment in result.stderr


def test_issue_16_metadata_string_and_a_million_replicas(tmp_path: Path) -> None:
    oops = write(tmp_path, INVALID.replace("metadata: {name: bad}", 'metadata: "oops"'))
    result = run("validate", "-f", oops)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert (
        result.stderr.splitlines()[0]
        == f"error: {oops}: metadata: must be an object with at least a name (got 'oops')."
    )
    million = write(tmp_path, INVALID.replace("tp: 6, attentionDP: 4", "tp: 1") + "  replicas: 1000000\n")
    result = run("render", "-f", million)
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.startswith(f"error: {million}: spec.replicas: must be at least 0 and at most 512")


def test_unreadable_file_exit_2(tmp_path: Path) -> None:
    result = run("validate", "-f", str(tmp_path / "missing.yaml"))
    assert result.returncode == 2 and "cannot read" in result.stderr
    directory = run("render", "-f", str(tmp_path))
    assert directory.returncode == 2 and directory.stderr == f"error: cannot read {tmp_path}: Is a directory\n"


def test_render_refuses_more_pods_than_it_prints(tmp_path: Path) -> None:
    big = INVALID.replace("tp: 6, attentionDP: 4", "tp: 8, nnodes: 8") + "  replicas: 512\n"
    result = run("render", "-f", write(tmp_path, big))
    assert result.returncode == 2 and result.stdout == ""
    assert "render prints at most 1024 worker pods and this fleet has 4096 (replicas x nnodes)" in result.stderr
    assert run("validate", "-f", write(tmp_path, big)).returncode == 0  # a valid fleet, only too big to print
    at_limit = INVALID.replace("tp: 6, attentionDP: 4", "tp: 8, nnodes: 2") + "  replicas: 512\n"
    result = run("render", "-f", write(tmp_path, at_limit), "-o", "json")
    assert result.returncode == 0
    assert sum(item["kind"] == "Pod" for item in json.loads(result.stdout)["items"]) == 1024


def test_render_into_a_closed_pipe_is_quiet(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # `render | head`: this sandbox's pipes never report a closed reader, so the closed pipe is played in-process.
    class ClosedPipe(io.StringIO):
        def write(self, _: str) -> int:
            raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    assert cli.main(["render", "-f", str(REPO / "examples" / "quickstart.yaml")]) == 1
    assert capsys.readouterr().err == ""


def test_last_resort_guard_is_one_line(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def explode(*_: object, **__: object) -> None:
        raise RuntimeError("boom\nsecond line")

    monkeypatch.setattr(cli, "check_cr", explode)
    assert cli.main(["validate", "-f", str(REPO / "examples" / "quickstart.yaml")]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == "error: internal error: RuntimeError: boom\\nsecond line\n"


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
        ["--qps", "nan", "--latency", "1", "--concurrency", "8"],
        ["--qps", "inf", "--latency", "1", "--concurrency", "8"],
        ["--qps", "10", "--latency", "1", "--concurrency", "8", "--headroom", "nan"],
        ["--qps", "1e308", "--latency", "1e308", "--concurrency", "1"],
        ["--qps", "1e6", "--latency", "3600", "--concurrency", "0.001"],
    ],
)
def test_plan_rejects_bad_input(args: list[str]) -> None:
    result = run("plan", *args)
    assert result.returncode == 2 and result.stdout == "" and "Traceback" not in result.stderr
    assert len(result.stderr.splitlines()) == 1 and "internal error" not in result.stderr


def test_the_operators_command_ships_no_simulator() -> None:
    """The simulator is testing/'s own command (`sglang-sim`, tests/integration/sim/test_sim_command.py), not the
    product's."""
    result = run("sim", "--model-path", "m")
    assert result.returncode == 2 and "invalid choice: 'sim'" in result.stderr


def test_plan_takes_the_concurrency_from_a_spec_as_sglang_computes_it() -> None:
    """deepseek-v3-dpa: maxRunningRequests split over 16 attention-DP ranks gives 32 per replica (not 512), the same C
    the autoscaler and status use."""
    example = REPO / "examples" / "deepseek-v3-dpa.yaml"
    result = run("plan", "-f", str(example), "--qps", "10", "--latency", "20", "-o", "json")
    assert result.returncode == 0, result.stderr
    planned = json.loads(result.stdout)
    spec, _ = parse_spec(yaml.safe_load(example.read_text())["spec"])
    assert spec is not None
    assert planned["concurrencyPerReplica"] == topology(spec).concurrency_per_replica == 32
    assert (planned["replicas"], planned["replicasWithHeadroom"]) == (7, 9)  # ceil(200 / 32), ceil(260 / 32)
    assert planned["totalGPUs"] == 9 * 16
    both = run("plan", "-f", str(example), "--qps", "10", "--latency", "20", "--concurrency", "8")
    assert both.returncode == 2 and "not both" in both.stderr
