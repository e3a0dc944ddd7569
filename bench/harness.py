"""Local-cluster costs: build time, start time, control-plane footprint, and how many simulator pods fit.

    .venv/bin/python bench/harness.py            # uses (or starts, then stops) the local cluster
    .venv/bin/python bench/harness.py --cold     # also rebuild with an empty Go build cache (10-30 min)
    .venv/bin/python bench/harness.py --pods 0   # skip the simulator-capacity steps

Every loop is bounded: capacity steps stop at --pods pods, at the first step whose start-up time or memory
degrades, or after --budget seconds.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from localcluster import cluster, controlplane, procs
from localcluster.build import build_env, kube_version, kubernetes_target, prometheus_target, read_stamp
from localcluster.paths import bin_dir, default_layout

CLK_TCK = os.sysconf("SC_CLK_TCK")
SIM_IMAGE = "lmsysorg/sglang:latest"
SIM_PORT = 30000


@dataclass(frozen=True)
class ProcSample:
    rss_mib: float
    cpu_s: float


def sample(pid: int) -> ProcSample:
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    rss_kib = next(
        int(line.split()[1])
        for line in Path(f"/proc/{pid}/status").read_text().splitlines()
        if line.startswith("VmRSS")
    )
    return ProcSample(rss_kib / 1024, (int(fields[11]) + int(fields[12])) / CLK_TCK)


def available_mib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable"):
            return int(line.split()[1]) / 1024
    return 0.0


def pods_rss_mib() -> float:
    """Total RSS of the processes the node agent runs for pods (marked, outside the tracked components)."""
    layout = default_layout()
    tracked = [pid for pid in cluster.status(layout).values() if pid]
    total = 0.0
    for pid in procs.marked_pids(layout, spare_groups=tracked):
        with contextlib.suppress(FileNotFoundError, ProcessLookupError, StopIteration):
            total += sample(pid).rss_mib
    return total


def row(name: str, value: str) -> None:
    print(f"| {name:<44} | {value:>22} |")


def cold_build() -> float:
    """Both targets built with one empty Go build cache into a temporary folder (modules stay cached)."""
    with tempfile.TemporaryDirectory(prefix="localcluster-cold-") as tmp:
        env = {**build_env(), "GOCACHE": f"{tmp}/gocache"}
        start = time.monotonic()
        for target in (kubernetes_target(), prometheus_target()):
            subprocess.run(target.command(Path(tmp) / "bin"), cwd=target.module_dir, env=env, check=True)
        return time.monotonic() - start


def footprint(window_s: float) -> None:
    layout = default_layout()
    pids = {name: pid for name, pid in cluster.status(layout).items() if pid}
    before = {name: sample(pid) for name, pid in pids.items()}
    time.sleep(window_s)  # a measurement window, not a wait for a condition
    for name, pid in pids.items():
        after = sample(pid)
        cpu_pct = 100 * (after.cpu_s - before[name].cpu_s) / window_s
        row(f"{name}: RSS / idle CPU", f"{after.rss_mib:6.0f} MiB / {cpu_pct:4.1f} %")


def sim_pod(name: str) -> dict[str, object]:
    # SGLang's /health runs a generation (~1 s in the simulator too): a generous timeout, as the operator uses.
    health = {"path": "/health", "port": SIM_PORT}
    probe = {"httpGet": health, "periodSeconds": 2, "timeoutSeconds": 30, "failureThreshold": 300}
    container = {
        "name": "sglang",
        "image": SIM_IMAGE,
        "command": ["python3", "-m", "sglang.launch_server"],
        "args": ["--model-path", "bench/tiny", "--host", "0.0.0.0", "--port", str(SIM_PORT), "--enable-metrics"],
        "resources": {"limits": {"nvidia.com/gpu": "1"}},
        "readinessProbe": probe,
    }
    meta = {"name": name, "labels": {"bench": "capacity"}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"containers": [container]}}


def capacity(max_pods: int, budget_s: float) -> None:
    """Add simulator pods in doubling steps (each step starts at once, like a scale-up); report each step's
    start-up time and memory until one degrades. Bounded by `max_pods` (the GPUs: one per pod) and `budget_s`."""
    from kubernetes import client, config

    layout = default_layout()
    api = client.CoreV1Api(config.new_client_from_config(str(layout.kubeconfig)))
    ns = f"bench-capacity-{int(time.time())}"
    api.create_namespace({"metadata": {"name": ns}})
    procs.wait_for(lambda: api.list_namespaced_service_account(ns).items, 60, "default service account")
    deadline = time.monotonic() + budget_s
    total, step, first_took = 0, 2, None
    try:
        while total < max_pods and time.monotonic() < deadline:
            step = min(step, max_pods - total)
            start = time.monotonic()
            for i in range(total, total + step):
                api.create_namespaced_pod(ns, sim_pod(f"sim-{i}"))
            total += step

            def all_ready(want: int = total) -> bool:
                pods = api.list_namespaced_pod(ns).items
                conditions = [p.status.conditions or [] for p in pods]
                return sum(any(c.type == "Ready" and c.status == "True" for c in cs) for cs in conditions) == want

            try:
                procs.wait_for(all_ready, max(1.0, deadline - time.monotonic()), f"{total} ready pods", interval=1)
            except TimeoutError:
                row(f"{total} sim pods", "not all ready in budget")
                total -= step
                break
            took = time.monotonic() - start
            per_pod_mib = pods_rss_mib() / total
            row(f"{total} sim pods: +{step} ready in / RSS per pod", f"{took:6.1f} s / {per_pod_mib:4.0f} MiB")
            first_took = first_took or took
            if took > 3 * first_took or available_mib() < 2048:  # a step as slow as 3x the first: degraded
                row("stopped: start-up or memory degraded", f"at {total} pods")
                break
            step *= 2
        row("simulator pods sustained", str(total))
    finally:
        api.delete_namespace(ns)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cold", action="store_true", help="time a build with an empty Go build cache")
    parser.add_argument("--pods", type=int, default=32, help="most simulator pods to try (0 = skip)")
    parser.add_argument("--budget", type=float, default=600.0, help="seconds for the capacity steps")
    parser.add_argument("--window", type=float, default=10.0, help="seconds of idle-CPU measurement")
    args = parser.parse_args()

    print(f"| {'local cluster (Kubernetes ' + kube_version() + ')':<44} | {'value':>22} |")
    print(f"|{'-' * 46}|{'-' * 24}|")
    for target in ("kubernetes", "prometheus"):
        history = [float(s) for s in read_stamp(bin_dir(), target).get("history") or []]
        row(
            f"{target} build: last / slowest recorded",
            f"{history[-1]:.0f} s / {max(history):.0f} s" if history else "-",
        )
    if args.cold:
        row("cold build, both targets (empty GOCACHE)", f"{cold_build():.0f} s")
    names = [*kubernetes_target().packages, *prometheus_target().packages]
    row("binaries on disk", f"{sum((bin_dir() / n).stat().st_size for n in names) / 2**20:.0f} MiB")

    started_here = cluster.current() is None
    layout = default_layout()
    if started_here:
        result = cluster.up(agent=cluster.nodeagent_available(), log=False)
        timings = result.timings
    else:
        timings = json.loads(layout.timings_file.read_text()) if layout.timings_file.exists() else {}
    try:
        for key in ("controlplane_start_s", "agent_start_s", "prometheus_start_s"):
            if key in timings:
                row(f"warm start: {key.removesuffix('_s').replace('_', ' ')}", f"{timings[key]:.1f} s")
        footprint(args.window)
        if args.pods and cluster.nodeagent_available() and controlplane.is_up(layout):
            capacity(args.pods, args.budget)
        elif args.pods:
            row("simulator capacity", "skipped: no node agent")
    finally:
        if started_here:
            cluster.down()
    return 0


if __name__ == "__main__":
    shutil.which("go") or print("note: no Go toolchain; only a built cluster can be measured", file=sys.stderr)
    sys.exit(main())
