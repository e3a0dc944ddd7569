"""`bench/scale.py` end to end at N=3 (one real fleet, two light): the JSON it promises, with measured numbers.

The benchmark starts its own small cluster in a state dir of its own (never the session's shared cluster) and
stops it again; this checks that every number of issue 17's table is actually measured on a live cluster, not that
the targets are met (that is docs/scale.md's job, at N = 10, 50 and 200).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TIMEOUT_S = 420  # about 90 s on an idle 2-core machine; the cluster start dominates


def test_scale_bench_measures_every_number_at_n3() -> None:
    state = REPO / "bench" / "out" / f"scale-smoke-{os.getpid()}"
    command = [sys.executable, str(REPO / "bench" / "scale.py"), "--n", "3", "--real", "1", "--json"]
    command += ["--quiet-seconds", "10", "--settle-seconds", "2", "--ready-timeout", "180", "--state-dir", str(state)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S, check=False, cwd=REPO)
    finally:
        shutil.rmtree(state, ignore_errors=True)
    assert done.returncode == 0, done.stderr[-3000:]
    (run,) = json.loads(done.stdout)["runs"]
    assert set(run) >= {"n", "all_ready_s", "register_p99_s", "api_requests_per_min", "rss_mib", "handover_s"}
    assert (run["n"], run["real"], run["light"]) == (3, 1, 2)
    assert run["ready_count"] == 3 and run["registered"] == 3, run["notes"]
    numbers = ("all_ready_s", "register_p99_s", "register_after_routers_p99_s", "register_running_p99_s",
               "api_requests_per_min", "api_per_cr_without_lease", "cpu_s")  # fmt: skip
    for key in (*numbers, "api_all_clients_per_min"):
        assert isinstance(run[key], float) and run[key] >= 0, (key, run)
    assert run["register_p50_s"] <= run["register_p99_s"]
    assert run["register_after_routers_p99_s"] <= run["register_p99_s"]  # counted from a later start
    assert run["register_running_p50_s"] <= run["register_running_p99_s"]
    assert 10 <= run["quiet_s"] < 30
    assert run["api_all_clients_per_min"] >= run["api_requests_per_min"]  # the operator is one client of several
    assert 10 < run["rss_mib"] < 4096  # a Python process's peak RSS, read from /proc
    if run["handover_s"] is None:  # only an operator without --leader-elect may leave it out, and must say so
        assert any("leader-elect" in note for note in run["notes"]), run["notes"]
    else:
        assert 0 < run["handover_lease_s"] <= run["handover_s"] < 90
        # The standby runs kopf's watches and indexes from its start (a warm standby), and writes nothing.
        standby = run["standby_requests"]
        assert standby["write"] == 0 and standby["watch"] + standby["list"] > 0, standby
