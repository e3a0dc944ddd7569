"""`python -m localcluster {up,down,status,build}`: the Makefile's cluster-up / cluster-down."""

from __future__ import annotations

import argparse
import sys

from localcluster import cluster
from localcluster.build import ensure_all_built
from localcluster.paths import bin_dir, default_layout


def _up(args: argparse.Namespace) -> int:
    if not args.no_agent and not cluster.nodeagent_available():
        print(
            "error: the GPU node agent (localcluster.nodeagent) is not in this checkout; "
            "use `python -m localcluster up --no-agent` for a control plane without nodes",
            file=sys.stderr,
        )
        return 2
    result = cluster.up(
        agent=not args.no_agent,
        with_prometheus=not args.no_prometheus,
        nodes=args.nodes,
        gpus_per_node=args.gpus_per_node,
    )
    info = result.info
    print("local cluster is " + ("already up" if result.already_up else "up"))
    print(f"  kubernetes   {info.version} at {info.server}")
    print(f"  kubeconfig   {info.kubeconfig}    (export KUBECONFIG={info.kubeconfig})")
    print(f"  prometheus   {info.prometheus_url or '-'}")
    print(f"  node agent   {'running' if info.agent else 'not running'}")
    for key, seconds in result.timings.items():
        print(f"  {key:<26} {seconds:6.1f}s")
    return 0


def _down(_: argparse.Namespace) -> int:
    stopped = cluster.down()
    print("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))
    return 0


def _status(_: argparse.Namespace) -> int:
    layout = default_layout()
    states = cluster.status(layout)
    for name, pid in states.items():
        print(f"  {name:<24} {'running, pid ' + str(pid) if pid else 'stopped'}")
    info = cluster.current(layout)
    print(f"cluster: {'up, kubeconfig ' + str(info.kubeconfig) if info else 'down'}")
    if info and info.prometheus_url:
        print(f"prometheus: {info.prometheus_url}")
    return 0 if info else 3


def _build(_: argparse.Namespace) -> int:
    for result in ensure_all_built(bin_dir()):
        state = "built" if result.built else "up to date"
        print(f"{result.target}: binaries in {result.bin_dir} ({state}, {result.seconds:.0f}s build)")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m localcluster", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="build what is missing and start the cluster (idempotent)")
    up.add_argument("--no-agent", action="store_true", help="control plane only: no GPU nodes")
    up.add_argument("--no-prometheus", action="store_true")
    up.add_argument("--nodes", type=int, default=4)
    up.add_argument("--gpus-per-node", type=int, default=8)
    up.set_defaults(func=_up)
    sub.add_parser("down", help="stop everything; leaves no process").set_defaults(func=_down)
    sub.add_parser("status", help="what runs (exit 0 if the control plane is up)").set_defaults(func=_status)
    sub.add_parser("build", help="build the control-plane binaries only").set_defaults(func=_build)
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
