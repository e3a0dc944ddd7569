"""engine.apiKeySecretRef: the workers' API key reaches SGLang from a Secret, never through a command line."""

import json
import os
import subprocess
import sys
from pathlib import Path

from localcluster.nodeagent.images import Runnable, Toolchain, map_container
from sglang_operator.api.validation import parse_spec
from sglang_operator.render import Owner, render_all
from sglang_operator.render.workers import API_KEY_ENV, LAUNCH_WITH_API_KEY

SPEC = {"model": {"path": "m"}, "engine": {"apiKeySecretRef": {"name": "worker-key", "key": "key"}}}


def _worker(raw: dict[str, object]) -> dict[str, object]:
    spec, errors = parse_spec(raw)
    assert errors == [] and spec is not None
    container: dict[str, object] = render_all(spec, Owner("f", "ns", "uid"))[0]["spec"]["containers"][0]
    return container


def test_the_key_is_a_secret_reference_and_the_command_carries_none() -> None:
    container = _worker(SPEC)
    command = container["command"]
    assert isinstance(command, list) and command[:3] == ["python3", "-c", LAUNCH_WITH_API_KEY]
    assert "--api-key" not in command and "--model-path" in command
    env = {var["name"]: var for var in container["env"]}  # type: ignore[attr-defined]
    assert env[API_KEY_ENV]["valueFrom"] == {"secretKeyRef": {"name": "worker-key", "key": "key"}}


def test_without_a_key_the_command_is_the_plain_module() -> None:
    assert _worker({"model": {"path": "m"}})["command"][:3] == ["python3", "-m", "sglang.launch_server"]  # type: ignore[index]


def test_the_launcher_hands_the_key_to_the_server_in_argv_only_inside_the_process(tmp_path: Path) -> None:
    """Run the launcher against a stand-in `sglang.launch_server` that reports its argv, its environment and the
    process's own command line as the kernel shows it to `ps`."""
    package = tmp_path / "sglang"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "launch_server.py").write_text(
        "import json, os, sys\n"
        "cmdline = open('/proc/self/cmdline', 'rb').read().decode().split('\\0')\n"
        f"print(json.dumps({{'argv': sys.argv[1:], 'env': os.environ.get({API_KEY_ENV!r}), 'cmdline': cmdline}}))\n"
    )
    env = {**os.environ, API_KEY_ENV: "s3cret-key", "PYTHONPATH": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "-c", LAUNCH_WITH_API_KEY, "--model-path", "m", "--port", "1"],
        env=env, capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    seen = json.loads(result.stdout)
    assert seen["argv"] == ["--model-path", "m", "--port", "1", "--api-key", "s3cret-key"]
    assert seen["env"] is None  # taken out of the environment the server and its children see
    assert not any("s3cret-key" in part for part in seen["cmdline"])


def test_the_local_cluster_runs_the_launcher_with_the_simulator() -> None:
    container = _worker(SPEC)
    tools = Toolchain(python="/venv/bin/python", bindir="/venv/bin")
    mapped = map_container("lmsysorg/sglang:v0.5.21", container["command"], [], "127.0.0.5", tools)  # type: ignore[arg-type]
    assert isinstance(mapped, Runnable)
    assert mapped.argv[:2] == ("/venv/bin/python", "-c")
    assert "'sglang_sim'" in mapped.argv[2] and "sglang.launch_server" not in mapped.argv[2]
    assert mapped.argv[3:5] == ("--sim-version", "0.5.21") and "--model-path" in mapped.argv
