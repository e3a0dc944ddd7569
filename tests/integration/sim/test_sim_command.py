"""The simulator's own commands (testing/'s distribution): the console script `sglang-sim` and `python -m
sglang_sim`, which the local cluster's SGLang pods run (localcluster/nodeagent/images.py). Both take
`sglang.launch_server`'s flags untouched and refuse what the release refuses, with SGLang's words."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SIM = shutil.which("sglang-sim", path=str(Path(sys.executable).parent)) or "sglang-sim"


@pytest.mark.parametrize("command", [[SIM], [sys.executable, "-m", "sglang_sim"]], ids=["script", "module"])
def test_the_simulator_takes_launch_server_flags(command: list[str]) -> None:
    result = subprocess.run(
        [*command, "--model-path", "m", "--tp-size", "6", "--nnodes", "4"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 1
    assert "tp_size must be divisible by number of nodes" in result.stderr
