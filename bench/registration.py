"""Router membership under churn: the operator's registration against smg's own Kubernetes service discovery.

    .venv/bin/python bench/registration.py [--replicas 4] [--churn 10] [--seed 0] [--json]

One SGLangDeployment (quickstart, simulator workers) runs in a fresh namespace under an operator process
started here. Beside the operator's router, a second smg router pod with the same flags plus
`--service-discovery` selects the same worker pods, so every churn event (a worker SIGKILLed through the node
agent, or its pod deleted) hits both routers at once. A pod watch records each worker's Ready transitions; a
poller reads every router's `GET /workers` every --interval seconds. From that timeline (pure functions below):

- registration latency: from a pod's Ready=True (watch observation; `lastTransitionTime` has 1 s resolution
  and is kept in --json) to its URL being listed healthy on every router of the group;
- stale entries: URLs a router lists healthy (or lists at all) whose pod is gone, terminating or not Ready,
  sampled and integrated over time; missing: Ready pods a router does not route to;
- failed requests under a bounded load (--rate req/s per router) during the churn.

Churn: events alternate kill / delete (--fault), each on a random Ready worker (--seed), each after the fleet
is back to --replicas Ready pods plus --gap seconds. Everything is bounded (--max-seconds for the churn phase,
a timeout on every wait); the namespace, the CR and the operator are removed at the end, also on error.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import random
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import requests
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException
from registration_model import (  # bench/ is this script's folder, like autoscale.py's fleetsim
    DISCOVERY,
    GROUPS,
    NAME,
    WORKER_PORT,
    WORKER_SELECTOR,
    ChurnEvent,
    GroupResult,
    PodObs,
    RouterSample,
    discovery_routers,
    percentile,
    ready_episodes,
    render_table,
    routable_urls,
    summarize,
)

from localcluster import cluster
from localcluster.fleet import (
    Fleet,
    LoadResult,
    OperatorProcess,
    chat,
    create_namespace,
    install_crd,
    simulated_example,
    steady_load,
)
from localcluster.nodeagent import faults
from localcluster.nodeagent.testing import wait_ready
from localcluster.procs import wait_for
from sglang_operator.api.constants import GROUP, PLURAL, VERSION
from sglang_operator.api.spec import SGLangDeploymentSpec


# -- recording (I/O) ---------------------------------------------------------------------------------------
def _ready_condition(pod: Any) -> Any:
    return next((c for c in (pod.status.conditions or []) if c.type == "Ready"), None)


class Recorder:
    """A pod watch and a router poller in two threads, appending to one timeline until stopped."""

    def __init__(self, core: client.CoreV1Api, namespace: str, routers: dict[str, list[str]], interval: float):
        self.core, self.namespace, self.routers, self.interval = core, namespace, routers, interval
        self.t0 = time.monotonic()
        self.pods: list[PodObs] = []
        self.samples: list[RouterSample] = []
        self.serving: dict[str, tuple[str, str]] = {}  # uid -> (name, url), the live view churn waits on
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.errors: list[str] = []
        self.listed = threading.Event()  # the poller starts after the first pod listing, so no sample predates it
        self.threads = [threading.Thread(target=self._run, args=(f,), daemon=True) for f in (self._watch, self._poll)]

    def now(self) -> float:
        return time.monotonic() - self.t0

    def start(self) -> Recorder:
        for thread in self.threads:
            thread.start()
        return self

    def close(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=15)

    def _run(self, loop: Any) -> None:
        try:
            loop()
        except Exception as exc:  # recorded and reported: a dead recorder must not pass for a quiet fleet
            self.errors.append(f"{loop.__name__}: {exc!r}")

    def _observe(self, pod: Any, deleted: bool = False, initial: bool = False) -> None:
        cond = _ready_condition(pod)
        ready = cond is not None and cond.status == "True"
        serving = ready and not deleted and pod.metadata.deletion_timestamp is None
        url = f"http://{pod.status.pod_ip}:{WORKER_PORT}" if pod.status.pod_ip else None
        ltt = cond.last_transition_time.isoformat() if cond is not None and cond.last_transition_time else None
        obs = PodObs(self.now(), pod.metadata.uid, pod.metadata.name, url, serving, ltt, initial)
        with self.lock:
            self.pods.append(obs)
            if serving and url:
                self.serving[obs.uid] = (obs.name, url)
            else:
                self.serving.pop(obs.uid, None)

    def _watch(self) -> None:
        version = None
        while not self.stop.is_set():
            if version is None:
                listing = self.core.list_namespaced_pod(self.namespace, label_selector=WORKER_SELECTOR)
                for pod in listing.items:
                    self._observe(pod, initial=True)
                version = listing.metadata.resource_version
                self.listed.set()
            stream = watch.Watch()
            try:
                for event in stream.stream(self.core.list_namespaced_pod, self.namespace,
                                           label_selector=WORKER_SELECTOR, resource_version=version,
                                           timeout_seconds=2):  # fmt: skip
                    pod = event["object"]
                    version = pod.metadata.resource_version
                    self._observe(pod, deleted=event["type"] == "DELETED")
                    if self.stop.is_set():
                        stream.stop()
            except ApiException as exc:
                if exc.status != 410:
                    raise
                version = None  # expired: list again (the gap is visible as one late observation)

    def _poll(self) -> None:
        sessions = {url: requests.Session() for urls in self.routers.values() for url in urls}
        if not self.listed.wait(30):
            raise TimeoutError("no initial pod listing within 30 s")
        while not self.stop.is_set():
            began = time.monotonic()
            for group, urls in self.routers.items():
                for url in urls:
                    try:
                        answer = sessions[url].get(f"{url}/workers", timeout=2)
                        ok, listed = routable_urls(answer.json().get("workers", []))
                    except (requests.RequestException, ValueError):
                        continue
                    with self.lock:
                        self.samples.append(RouterSample(self.now(), group, url, ok, listed))
            self.stop.wait(max(0.0, self.interval - (time.monotonic() - began)))

    def serving_now(self) -> dict[str, tuple[str, str]]:
        with self.lock:
            return dict(self.serving)

    def latest(self) -> dict[str, frozenset[str]]:
        with self.lock:
            return {s.router: s.routable for s in self.samples}


# -- the cluster side --------------------------------------------------------------------------------------
def create(api: client.ApiClient, objects: Sequence[dict[str, Any]]) -> None:
    core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    for obj in objects:
        ns = obj["metadata"]["namespace"]
        {
            "ServiceAccount": core.create_namespaced_service_account,
            "Role": rbac.create_namespaced_role,
            "RoleBinding": rbac.create_namespaced_role_binding,
            "Pod": core.create_namespaced_pod,
        }[obj["kind"]](ns, obj)


MAX_LOAD_REQUESTS = 5000


def _chat_once(url: str, index: int, model: str) -> requests.Response:
    response: requests.Response = chat(url, model, f"request {index} about the weather", timeout=10)
    return response


def log(message: str) -> None:
    print(f"[registration] {message}", file=sys.stderr, flush=True)


def cleanup(api: client.ApiClient, namespace: str, operator: OperatorProcess | None) -> None:
    """CR first while the operator runs (it holds a finalizer), then the operator, then the namespace."""
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)

    def gone() -> bool:
        try:
            custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, NAME)
        except ApiException as exc:
            return bool(exc.status == 404)
        return False

    with contextlib.suppress(ApiException):
        custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, NAME)
    try:
        wait_for(gone, 60, f"{namespace}/{NAME} deleted", interval=0.5)
    except TimeoutError:
        with contextlib.suppress(ApiException):
            custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, NAME,
                                                  {"metadata": {"finalizers": []}})  # fmt: skip
    if operator is not None:
        operator.stop()
    with contextlib.suppress(ApiException):
        core.delete_namespace(namespace, propagation_policy="Background")


def churn(
    args: argparse.Namespace, rec: Recorder, core: client.CoreV1Api, namespace: str, state_dir: Path
) -> list[ChurnEvent]:
    """Kill or delete a random Ready worker, --churn times, each after the fleet has recovered; bounded."""
    rng = random.Random(args.seed)
    kinds = {"kill": ["kill"], "delete": ["delete"], "mixed": ["kill", "delete"]}[args.fault]
    deadline = time.monotonic() + args.max_seconds
    events: list[ChurnEvent] = []

    def recovered() -> bool:
        return len(rec.serving_now()) >= int(args.replicas)

    for index in range(args.churn):
        left = deadline - time.monotonic()
        if left <= 0:
            log(f"churn budget spent after {index} events")
            break
        try:
            wait_for(recovered, min(args.recovery_timeout, left), f"{args.replicas} Ready workers", interval=0.2)
        except TimeoutError as exc:
            log(f"event {index}: {exc}; churning anyway")
        rec.stop.wait(args.gap)
        serving = sorted((name, url, uid) for uid, (name, url) in rec.serving_now().items())
        if not serving:
            continue
        victim, url, uid = rng.choice(serving)
        kind = kinds[index % len(kinds)]
        if kind == "kill":
            faults.kill_pod(state_dir / "nodeagent", namespace, victim)
        else:
            core.delete_namespaced_pod(victim, namespace)
        events.append(ChurnEvent(rec.now(), kind, victim, url))
        log(f"event {index + 1}/{args.churn}: {kind} {victim} ({url}) at t={rec.now():.1f}s")
        try:  # the next recovery wait must not see the victim still Ready
            wait_for(lambda gone=uid: gone not in rec.serving_now(), 30, f"{victim} out of Ready", interval=0.1)
        except TimeoutError as exc:
            log(str(exc))
    try:
        wait_for(recovered, args.recovery_timeout, f"{args.replicas} Ready workers", interval=0.2)
    except TimeoutError as exc:
        log(str(exc))
    return events


def settle(rec: Recorder, timeout: float) -> None:
    """Wait (bounded) until every router routes exactly the serving pods, so late registrations are counted."""

    def in_sync() -> bool:
        want = frozenset(url for _, url in rec.serving_now().values())
        latest = rec.latest()
        return len(latest) == sum(len(u) for u in rec.routers.values()) and all(v == want for v in latest.values())

    try:
        wait_for(in_sync, timeout, "every router in sync with the Ready workers", interval=0.2)
    except TimeoutError as exc:
        log(str(exc))


def run(args: argparse.Namespace, info: cluster.ClusterInfo) -> dict[str, Any]:
    api = config.new_client_from_config(str(info.kubeconfig))
    core = client.CoreV1Api(api)
    namespace = f"bench-registration-{uuid.uuid4().hex[:5]}"
    doc = simulated_example("quickstart.yaml", replicas=args.replicas)
    doc["spec"]["router"] = {"replicas": args.routers, "args": ["--log-level", "warn"]}  # 10 Hz polls: no info logs
    spec = SGLangDeploymentSpec.model_validate(doc["spec"])
    operator: OperatorProcess | None = None
    install_crd(api)
    create_namespace(core, namespace, {"bench": "registration"})
    try:
        create(api, discovery_routers(namespace, spec, args.routers))
        log(f"namespace {namespace}: discovery router created; starting the operator")
        operator = OperatorProcess(info.kubeconfig, [namespace], info.state_dir / "logs" / f"operator-{namespace}.log")
        operator.start()
        fleet = Fleet(api, namespace, NAME)
        fleet.apply(doc)
        fleet.wait_ready(args.replicas, timeout=180)
        wait_for(lambda: len(fleet.router_urls()) == args.routers, 60, f"{args.routers} operator routers Ready")
        ips = [wait_ready(core, namespace, f"{DISCOVERY}-{i}", 60).status.pod_ip for i in range(args.routers)]
        routers = {"operator": fleet.router_urls(), "discovery": [f"http://{ip}:{spec.router.port}" for ip in ips]}
        want = fleet.ready_worker_urls()

        def discovery_ready() -> bool:
            for url in routers["discovery"]:
                answer = requests.get(f"{url}/workers", timeout=5).json().get("workers", [])
                if routable_urls(answer)[0] != want:
                    return False
            return True

        wait_for(discovery_ready, 60, "the discovery router to route to every Ready worker", interval=0.5)
        log(f"fleet ready: {len(want)} workers on routers {routers}; churn begins")
        rec = Recorder(core, namespace, routers, args.interval).start()
        loads: dict[str, LoadResult] = {}
        try:
            with contextlib.ExitStack() as stack:
                for group, urls in routers.items():
                    model = spec.model.served_name or spec.model.path
                    # Discovery mode turns on smg's IGW routing, where /generate needs a model: send chat.
                    send = functools.partial(_chat_once, model=model)
                    loads[group] = stack.enter_context(
                        steady_load(urls[0], args.rate, MAX_LOAD_REQUESTS, args.max_seconds + 60, send)
                    )
                events = churn(args, rec, core, namespace, info.state_dir)
                settle(rec, args.settle)
        finally:
            rec.close()
        if rec.errors:
            raise RuntimeError(f"recorder failed: {rec.errors}")
        results = [summarize(g, rec.pods, rec.samples, events, loads[g].sent, loads[g].failed) for g in GROUPS]
        if args.timeline:
            timeline = {"pods": [asdict(o) for o in rec.pods], "samples": [_sample_json(x) for x in rec.samples]}
            args.timeline.write_text(json.dumps({"churn": [asdict(e) for e in events], **timeline}))
        return {
            "namespace": namespace,
            "replicas": args.replicas,
            "seed": args.seed,
            "fault": args.fault,
            "duration_s": round(rec.now(), 1),
            "routers": routers,
            "churn": [asdict(e) for e in events],
            "results": [_result_json(r) for r in results],
            "episodes": [asdict(e) for e in ready_episodes(rec.pods)],
            "load_errors": {g: loads[g].errors[:5] for g in GROUPS},
            "_results": results,
        }
    finally:
        cleanup(api, namespace, operator)


def _result_json(r: GroupResult) -> dict[str, Any]:
    out = asdict(r)
    out["latency_p50_s"], out["latency_p99_s"] = percentile(r.latencies, 50), percentile(r.latencies, 99)
    out["latency_max_s"] = max(r.latencies, default=None)
    out["listed_latency_p50_s"] = percentile(r.listed_latencies, 50)
    return out


def _sample_json(sample: RouterSample) -> dict[str, Any]:
    return {**asdict(sample), "routable": sorted(sample.routable), "listed": sorted(sample.listed)}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--replicas", type=int, default=4)
    p.add_argument("--churn", type=int, default=10, help="churn events (kills / deletions)")
    p.add_argument("--routers", type=int, default=1, help="router pods on each side")
    p.add_argument("--fault", choices=("mixed", "kill", "delete"), default="mixed")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--interval", type=float, default=0.1, help="router poll interval, seconds")
    p.add_argument("--gap", type=float, default=5.0, help="seconds of steady state before each event")
    p.add_argument("--rate", type=float, default=2.0, help="requests/s through each router during churn")
    p.add_argument("--recovery-timeout", type=float, default=45.0)
    p.add_argument("--settle", type=float, default=30.0, help="max seconds for routers to catch up at the end")
    p.add_argument("--max-seconds", type=float, default=240.0, help="bound on the churn phase")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    p.add_argument("--timeline", type=Path, default=None, help="write the raw pod/router timeline (JSON) here")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with cluster.session(with_prometheus=False) as info:
        if not info.agent:
            log("the local cluster runs without the node agent: no pods can run")
            return 2
        report = run(args, info)
    results: list[GroupResult] = report.pop("_results")
    if args.json:
        print(json.dumps(report, indent=1))
        return 0
    kinds = ", ".join(f"{k} x{sum(e['kind'] == k for e in report['churn'])}" for k in ("kill", "delete"))
    header = (f"registration under churn: {args.replicas} replicas, {len(report['churn'])} events ({kinds}), "
              f"seed {args.seed}, {report['duration_s']} s recorded, poll {args.interval} s")  # fmt: skip
    print(render_table(results, header))
    return 0


if __name__ == "__main__":
    sys.exit(main())
