"""`make demo`: the operator on the local cluster, end to end, in about two minutes.

Brings the cluster up (building it on first use), runs the operator, applies the quickstart example with two
replicas, waits for Ready, sends requests through the router, shows `kubectl get sgld` and the router's worker list,
scales up and down (showing the drain), then tears everything down unless `--keep` is given.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time

from kubernetes import client, config

from localcluster import cluster as localcluster
from localcluster.fleet import Fleet, OperatorProcess, chat, generate, install_crd, load_example
from localcluster.procs import wait_for

NAMESPACE = "demo"


def banner(text: str) -> None:
    print(f"\n=== {text} ===", flush=True)


def kubectl(kubeconfig: str, *args: str) -> None:
    subprocess.run(["kubectl", "--kubeconfig", kubeconfig, *args], check=False)


def show(fleet: Fleet, kubeconfig: str) -> None:
    kubectl(kubeconfig, "get", "sgld", "-n", NAMESPACE)
    kubectl(kubeconfig, "get", "pods", "-n", NAMESPACE, "-o", "wide")
    for router, urls in fleet.router_lists().items():
        print(f"router {router} workers: {urls}")


def run(keep: bool) -> int:
    banner("local cluster")
    info = localcluster.ensure_up()
    kubeconfig = str(info.kubeconfig)
    print(f"kubeconfig: {kubeconfig}  prometheus: {info.prometheus_url}")
    api = config.new_client_from_config(kubeconfig)
    core = client.CoreV1Api(api)
    if not any(ns.metadata.name == NAMESPACE for ns in core.list_namespace().items):
        core.create_namespace({"metadata": {"name": NAMESPACE}})
    install_crd(api)
    operator = OperatorProcess(info.kubeconfig, [NAMESPACE], info.state_dir / "logs" / "operator-demo.log").start()
    try:
        banner("apply examples/quickstart.yaml with 2 replicas")
        fleet = Fleet(api, NAMESPACE, "quickstart")
        doc = load_example("quickstart.yaml", replicas=2)
        fleet.apply(doc)
        started = time.monotonic()
        fleet.wait_ready(2, timeout=180)
        print(f"Ready in {time.monotonic() - started:.1f}s")
        show(fleet, kubeconfig)

        banner("requests through the router")
        router = fleet.router_urls()[0]
        model = doc["spec"]["model"]["path"]
        for i in range(3):
            answer = chat(router, model, f"Say hello #{i}").json()
            print(f"chat #{i}: {answer['choices'][0]['message']['content']!r}")
        print("generate:", json.dumps(generate(router, "The capital of France is").json())[:200])

        banner("scale to 4 (kubectl scale)")
        kubectl(kubeconfig, "scale", "sgld", "quickstart", "-n", NAMESPACE, "--replicas", "4")
        fleet.wait_ready(4, timeout=180)
        show(fleet, kubeconfig)

        banner("scale to 1: replicas are deregistered, drained, then deleted")
        fleet.scale(1)
        wait_for(lambda: len(fleet.pods()) == 1 and fleet.router_in_sync(), 180, "scale-in to 1", interval=0.5)
        kubectl(
            kubeconfig, "get", "events", "-n", NAMESPACE, "--field-selector", "involvedObject.kind=SGLangDeployment"
        )
        show(fleet, kubeconfig)
    finally:
        operator.stop()
        if not keep:
            banner("tear down")
            localcluster.shutdown()
        else:
            print(f"\ncluster kept running; KUBECONFIG={kubeconfig}; stop it with `make cluster-down`")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--keep", action="store_true", help="leave the cluster running afterwards")
    return run(parser.parse_args(argv).keep)


if __name__ == "__main__":
    raise SystemExit(main())
