"""Smoke test of `bench/group_routing.py`: the real smg router in front of a tp=4 and two tp=2 simulator replicas.

Runs the benchmark itself (a subprocess, as a user would; well under a minute): round-robin and the policy
docs/worker-groups-routing.md recommends for fleets with unequal worker groups, one load level each. Every
policy's shares must add up to 1; the recommended one must keep every replica within 20 % of its capacity share
(16, 8 and 8 slots: 1/2, 1/4, 1/4) at the load the document names for it.
"""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
RECOMMENDED = "cache_aware"  # docs/worker-groups-routing.md: the default policy, smg's flags as they are
LOAD = 1.2  # of the fleet's 32 slots: where the document says the 20 % bound holds
BOUND = 0.2

pytestmark = pytest.mark.skipif(
    shutil.which("smg", path=str(Path(sys.executable).parent)) is None and shutil.which("smg") is None,
    reason="needs smg (pip install smg==1.13.0)",
)


def test_bench_runs_and_recommended_policy_shares_by_capacity() -> None:
    out = subprocess.run(
        [sys.executable, "bench/group_routing.py", "--variants", f"round_robin,{RECOMMENDED}", "--levels", str(LOAD),
         "--seconds", "12", "--json"],
        cwd=REPO, capture_output=True, text=True, timeout=150, check=True,
    )  # fmt: skip
    result = json.loads(out.stdout)
    assert result["setup"]["capacity_shares"] == [0.5, 0.25, 0.25]
    for name, variant in result["variants"].items():
        assert variant["error"] is None, (name, variant["error"])
        (level,) = variant["levels"]
        assert level["failed"] == 0, name
        assert sum(level["counts"]) > 100, name
        assert sum(level["shares"]) == pytest.approx(1.0, abs=1e-3), name
    (recommended,) = result["variants"][RECOMMENDED]["levels"]
    assert recommended["max_deviation"] <= BOUND, recommended
