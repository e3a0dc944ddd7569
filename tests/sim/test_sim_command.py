"""The simulator's own console script, `sglang-sim` (testing/'s distribution): it takes `sglang.launch_server`'s
flags untouched and refuses what the release refuses, with SGLang's words."""

import shutil
import subprocess
import sys
from pathlib import Path

SIM = shutil.which("sglang-sim", path=str(Path(sys.executable).parent)) or "sglang-sim"


def test_sglang_sim_takes_launch_server_flags() -> None:
    result = subprocess.run(
        [SIM, "--model-path", "m", "--tp-size", "6", "--nnodes", "4"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 1
    assert "tp_size must be divisible by number of nodes" in result.stderr
