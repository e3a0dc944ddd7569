"""`python -m localcluster.nodeagent --kubeconfig PATH --state-dir DIR`: run the GPU nodes until SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from pathlib import Path

from localcluster.nodeagent.agent import Agent, Settings, configure_logging


def parse(argv: list[str] | None) -> tuple[Settings, str]:
    parser = argparse.ArgumentParser(prog="python -m localcluster.nodeagent", description=__doc__)
    parser.add_argument("--kubeconfig", required=True, help="admin kubeconfig of the cluster")
    parser.add_argument("--state-dir", required=True, type=Path, help="pod IPs, volumes, pidfiles and logs")
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--node-prefix", default="gpu-node")
    parser.add_argument(
        "--restart-backoff-seconds",
        type=float,
        default=10.0,
        help="first crash-loop back-off; doubles per crash up to 30x this (kubelet: 10 s to 5 min)",
    )
    parser.add_argument("--log-level", default="info")
    args = parser.parse_args(argv)
    settings = Settings(
        kubeconfig=args.kubeconfig,
        state_dir=args.state_dir,
        nodes=args.nodes,
        gpus_per_node=args.gpus_per_node,
        node_prefix=args.node_prefix,
        restart_backoff_s=args.restart_backoff_seconds,
    )
    return settings, args.log_level


async def serve(settings: Settings) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await Agent(settings).run(stop)


def main(argv: list[str] | None = None) -> int:
    settings, level = parse(argv)
    configure_logging(level)
    asyncio.run(serve(settings))
    return 0


if __name__ == "__main__":
    sys.exit(main())
