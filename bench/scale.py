"""Many fleets, one operator pair: readiness, registration, quiet API load, CPU/RSS and leader handover at N CRs.

    .venv/bin/python bench/scale.py [--n 10 50 200] [--real 10] [--quiet-seconds 120] [--json]

For each N this starts its *own* local cluster (a separate state dir, `--state-dir`, never the shared
`e2e/.state`; sized to N: `--gpus-per-node` GPUs per node, as many nodes as N + 1 one-GPU replicas need), creates
N SGLangDeployments of one single-GPU replica and one router each, and stops the cluster at the end (`--keep`
leaves it). `min(--real, N)` fleets run the real simulator and the real `smg`; the others use the node agent's light
pods (`lmsysorg/sglang-light` / `lightseekorg/smg-light` images: no process per pod, see
testing/localcluster/nodeagent/light.py), so 200 fleets fit on 2 cores.

The operator runs as `sglang-operator run` processes under their own service accounts (cluster-admin), each matched
by its own FlowSchema, so the API server's `apiserver_flowcontrol_dispatched_requests_total{flow_schema=...}`
counts exactly the operator's requests (the admin identity the bench, node agent and tests use is another flow).
With `--leader-elect` available, operator A starts first and takes the Lease, then a standby B starts.

Measured per N (epoch times from a pod watch and a CR watch in this process):
- all_ready_s: max over CRs of (CR Ready=True) - (the last of its pods Ready); p50 beside it;
- register p50/p99: from a worker pod's Ready to its URL listed on every router of its fleet (real routers polled
  every 0.25 s; light routers stamp each POST /workers, read once at the end);
- api_requests_per_min: after every CR is Ready and --settle-seconds, the operators' dispatched requests over
  --quiet-seconds with nothing changing (A + B; the split and every client's total are kept in the JSON). The
  operators reopen their watches every 30 min, all together: a window of 120 s shows the renewals and rarely a
  restart; `--n 10 --quiet-seconds 1860` holds one restart of every watch, the long-run rate;
- cpu_s / rss_mib: the leader's CPU seconds (utime + stime from /proc) up to the end of the quiet window, its CPU
  share in that window, its peak RSS (VmHWM);
- handover_s: SIGKILL of the leader, a `kubectl scale` of one fleet to 2 right after, until the standby has created
  the new worker pod (handover_lease_s: until the Lease names the standby).

Every wait is bounded (--ready-timeout, --handover-timeout, fixed bounds elsewhere); a bound reached is reported in
the run's notes with what was measured so far, not hidden.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests
import yaml
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException
from scale_model import (  # bench/ is this script's folder, like registration.py's model
    FleetTimes,
    RunResult,
    metric_by_label,
    metric_by_labels,
    metric_sum,
    per_minute,
    percentile,
    ready_lags,
    registration_latencies,
    render_table,
    top_rates,
)

from localcluster import cluster, controlplane, procs
from localcluster.fleet import FAST_SIM_ENV, OperatorProcess, create_namespace, install_crd
from localcluster.paths import REPO_ROOT, StateLayout, default_layout
from localcluster.pki import Pki
from sglang_operator.api.constants import GROUP, PLURAL, VERSION

NAMESPACE = "scale"
SYSTEM_NAMESPACE = "scale-system"
LEASE = "sglang-operator-leader"
MODEL = "Qwen/Qwen2.5-0.5B-Instruct"
LIGHT_ENGINE_IMAGE = "lmsysorg/sglang-light:v0.5.23"
LIGHT_ROUTER_IMAGE = "lightseekorg/smg-light:1.13.0"
WORKER_PORT = 30000
ROUTER_PORT = 30000
PODS_PER_NODE = 100  # the agent's nodes allow 110; keep room for the scale-up of the handover step
TOKEN_SECONDS = 4 * 3600
REAL_POLL_S = 0.25
WATCH_CHUNK_S = 5
LEASE_WAIT_S = 60.0
STANDBY_SETTLE_S = 15.0
REGISTRATION_WAIT_S = 60.0
SCALE_UP_FLEETS = 20  # fleets scaled 1 -> 2 at once once every fleet is Ready (half real at most)
HTTP_TIMEOUT_S = 5.0
CREATE_THREADS = 8


def log(message: str) -> None:
    print(f"[scale {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# ----- the operator's identity: service accounts, kubeconfigs, FlowSchemas ---------------------------------------


@dataclass
class Identity:
    name: str  # service account in SYSTEM_NAMESPACE, and the FlowSchema's name
    kubeconfig: Path


WRITE_VERBS = ["create", "update", "patch", "delete", "deletecollection"]


def flow_rules() -> list[tuple[str, int, dict[str, Any]]]:
    """(name suffix, precedence, rules) of the FlowSchemas that split one identity's requests: Lease calls, watches,
    lists, writes, then everything else: gets and discovery (the lowest precedence number that matches wins)."""
    every = {"apiGroups": ["*"], "resources": ["*"], "namespaces": ["*"], "clusterScope": True}
    lease = {"verbs": ["*"], "apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "namespaces": ["*"]}
    return [
        ("-lease", 90, {"resourceRules": [lease]}),
        ("-watch", 91, {"resourceRules": [{**every, "verbs": ["watch"]}]}),
        ("-list", 92, {"resourceRules": [{**every, "verbs": ["list"]}]}),
        ("-write", 93, {"resourceRules": [{**every, "verbs": WRITE_VERBS}]}),
        (
            "",
            100,
            {
                "resourceRules": [{**every, "verbs": ["*"]}],
                "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
            },
        ),
    ]


def make_identity(api: client.ApiClient, layout: StateLayout, server: str, name: str) -> Identity:
    """A service account bound to cluster-admin, a token kubeconfig for it, and a FlowSchema matching only it."""
    core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    core.create_namespaced_service_account(SYSTEM_NAMESPACE, {"metadata": {"name": name}})
    rbac.create_cluster_role_binding(
        {
            "metadata": {"name": f"scale-{name}"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": SYSTEM_NAMESPACE}],
        }
    )
    token = core.create_namespaced_service_account_token(
        name, SYSTEM_NAMESPACE, {"spec": {"expirationSeconds": TOKEN_SECONDS}}
    ).status.token
    kubeconfig = layout.root / f"{name}.kubeconfig"
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "local", "cluster": {"server": server, "certificate-authority": str(Pki(layout.pki).ca_crt)}}
        ],
        "users": [{"name": name, "user": {"token": token}}],
        "contexts": [{"name": name, "context": {"cluster": "local", "user": name}}],
        "current-context": name,
    }
    kubeconfig.write_text(yaml.safe_dump(doc))
    kubeconfig.chmod(0o600)
    custom = client.CustomObjectsApi(api)
    for suffix, precedence, rule in flow_rules():
        subject = {"kind": "ServiceAccount", "serviceAccount": {"name": name, "namespace": SYSTEM_NAMESPACE}}
        spec = {
            "matchingPrecedence": precedence,  # before every suggested schema except exempt (1)
            "priorityLevelConfiguration": {"name": "exempt"},  # counted, never queued: no effect on latency
            "rules": [{"subjects": [subject], **rule}],
        }
        body = {"metadata": {"name": f"{name}{suffix}"}, "spec": spec}
        custom.create_cluster_custom_object("flowcontrol.apiserver.k8s.io", "v1", "flowschemas", body)
    return Identity(name, kubeconfig)


# ----- processes ------------------------------------------------------------------------------------------------


def leader_elect_supported() -> bool:
    script = Path(sys.executable).parent / "sglang-operator"
    out = subprocess.run([str(script), "run", "--help"], capture_output=True, text=True, timeout=60, check=False)
    return "--leader-elect" in out.stdout


def metrics_port_supported() -> bool:
    script = Path(sys.executable).parent / "sglang-operator"
    out = subprocess.run([str(script), "run", "--help"], capture_output=True, text=True, timeout=60, check=False)
    return "--metrics-port" in out.stdout


def clock_ticks() -> int:
    return int(os.sysconf("SC_CLK_TCK"))


def cpu_seconds(pid: int) -> float | None:
    """utime + stime of a live process (all its threads), from /proc."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / clock_ticks()


def peak_rss_mib(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        return None
    return None


@dataclass
class Operator:
    identity: Identity
    process: OperatorProcess
    metrics_url: str | None

    @property
    def pid(self) -> int | None:
        proc = self.process.proc
        return proc.pid if proc is not None and proc.poll() is None else None


def start_operator(identity: Identity, layout: StateLayout, leader: bool, metrics: bool) -> Operator:
    run_args: list[str] = []
    if leader:
        run_args += ["--leader-elect", "--leader-election-namespace", SYSTEM_NAMESPACE]
        run_args += ["--leader-election-name", LEASE, "--leader-election-identity", identity.name]
    metrics_url = None
    if metrics:
        port = _free_port()
        run_args += ["--metrics-port", str(port), "--metrics-address", "127.0.0.1"]
        metrics_url = f"http://127.0.0.1:{port}/metrics"
    log_path = layout.logs / f"{identity.name}.log"
    process = OperatorProcess(identity.kubeconfig, [NAMESPACE], log_path, run_args).start()
    return Operator(identity, process, metrics_url)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def lease_holder(coordination: client.CoordinationV1Api) -> str | None:
    try:
        lease = coordination.read_namespaced_lease(LEASE, SYSTEM_NAMESPACE)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    holder = lease.spec.holder_identity if lease.spec else None
    return str(holder) if holder else None


def wait_until(check: Callable[[], bool], timeout: float, interval: float = 0.5) -> bool:
    """Poll `check` until true or `timeout` seconds; False on timeout (the caller reports it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(interval)
    return check()


# ----- recording ------------------------------------------------------------------------------------------------


@dataclass
class PodSeen:
    fleet: str
    component: str
    rank0: bool
    ip: str | None = None
    port: int = WORKER_PORT
    ready_at: float | None = None
    deleted: bool = False


@dataclass
class Recorder:
    """A pod watch, a CR watch and a poller of the real routers, each in a thread, until `close()`."""

    api: client.ApiClient
    real: frozenset[str]
    pods: dict[str, PodSeen] = field(default_factory=dict)
    crs: dict[str, float] = field(default_factory=dict)  # name -> first seen Ready
    registered: dict[tuple[str, str], float] = field(default_factory=dict)  # (router ip, worker url) -> first listed
    errors: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.threads = [
            threading.Thread(target=self._guard, args=(loop,), daemon=True)
            for loop in (self._watch_pods, self._watch_crs, self._poll_real_routers)
        ]

    def start(self) -> Recorder:
        for thread in self.threads:
            thread.start()
        return self

    def close(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=2 * WATCH_CHUNK_S + 5)

    def _guard(self, loop: Callable[[], None]) -> None:
        try:
            loop()
        except Exception as exc:  # reported with the result: a dead recorder must not look like a slow operator
            self.errors.append(f"{loop.__name__}: {exc!r}")

    def _watch(self, lister: Callable[..., Any], on_event: Callable[[str, Any], None]) -> None:
        version: str | None = None
        while not self.stop.is_set():
            if version is None:
                listing = lister(NAMESPACE)
                items = listing["items"] if isinstance(listing, dict) else listing.items
                for item in items:
                    on_event("ADDED", item)
                meta = listing["metadata"] if isinstance(listing, dict) else listing.metadata
                version = meta["resourceVersion"] if isinstance(meta, dict) else meta.resource_version
            stream = watch.Watch()
            try:
                for event in stream.stream(lister, NAMESPACE, resource_version=version, timeout_seconds=WATCH_CHUNK_S):
                    obj = event["object"]
                    meta = obj["metadata"] if isinstance(obj, dict) else obj.metadata
                    version = meta["resourceVersion"] if isinstance(meta, dict) else meta.resource_version
                    on_event(event["type"], obj)
                    if self.stop.is_set():
                        stream.stop()
            except ApiException as exc:
                if exc.status != 410:
                    raise
                version = None

    def _watch_pods(self) -> None:
        self._watch(self.core.list_namespaced_pod, self._on_pod)

    def _on_pod(self, kind: str, pod: Any) -> None:
        now = time.time()
        labels = pod.metadata.labels or {}
        fleet = labels.get("sglang.ai/deployment")
        if not fleet:
            return
        ready = any(c.type == "Ready" and c.status == "True" for c in (pod.status.conditions or []))
        with self.lock:
            seen = self.pods.get(pod.metadata.uid)
            if seen is None:
                seen = PodSeen(fleet, labels.get("sglang.ai/component", ""), labels.get("sglang.ai/node-rank") == "0")
                self.pods[pod.metadata.uid] = seen
            if pod.status.pod_ip:
                seen.ip = pod.status.pod_ip
            ports = [p.container_port for c in pod.spec.containers[:1] for p in (c.ports or [])]
            seen.port = ports[0] if ports else WORKER_PORT
            if ready and seen.ready_at is None:
                seen.ready_at = now
            seen.deleted = kind == "DELETED" or pod.metadata.deletion_timestamp is not None

    def _watch_crs(self) -> None:
        def lister(namespace: str, **kwargs: Any) -> Any:
            return self.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, **kwargs)

        self._watch(lister, self._on_cr)

    def _on_cr(self, kind: str, cr: dict[str, Any]) -> None:
        now = time.time()
        status = cr.get("status") or {}
        want = (cr.get("spec") or {}).get("replicas", 1)
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
        if ready and status.get("readyReplicas") == want and kind != "DELETED":
            with self.lock:
                self.crs.setdefault(cr["metadata"]["name"], now)

    def _poll_real_routers(self) -> None:
        session = requests.Session()
        while not self.stop.wait(REAL_POLL_S):
            for router_ip, _fleet in self.routers(self.real):
                try:
                    body = session.get(f"http://{router_ip}:{ROUTER_PORT}/workers", timeout=2).json()
                except (requests.RequestException, ValueError):
                    continue
                now = time.time()
                with self.lock:
                    for worker in body.get("workers", []) if isinstance(body, dict) else []:
                        if isinstance(worker, dict) and worker.get("status") != "draining" and worker.get("url"):
                            self.registered.setdefault((router_ip, str(worker["url"])), now)

    def routers(self, fleets: frozenset[str]) -> list[tuple[str, str]]:
        """(pod IP, fleet) of the Ready router pods of `fleets`."""
        return [(ip, fleet) for ip, fleet, _ in self.router_pods(fleets)]

    def router_pods(self, fleets: frozenset[str]) -> list[tuple[str, str, float]]:
        """(pod IP, fleet, first seen Ready) of the Ready router pods of `fleets`."""
        with self.lock:
            return [
                (p.ip, p.fleet, p.ready_at)
                for p in self.pods.values()
                if p.fleet in fleets and p.component == "router" and p.ip and p.ready_at and not p.deleted
            ]

    def worker_ready(self) -> dict[str, tuple[str, float, str]]:
        """url -> (fleet, first seen Ready, pod UID) of the Ready rank-0 workers."""
        with self.lock:
            return {
                f"http://{p.ip}:{p.port}": (p.fleet, p.ready_at, uid)
                for uid, p in self.pods.items()
                if p.component == "worker" and p.rank0 and p.ip and p.ready_at and not p.deleted
            }

    def fleet_times(self, names: Sequence[str]) -> list[FleetTimes]:
        with self.lock:
            out = []
            for name in names:
                pods = [p for p in self.pods.values() if p.fleet == name and not p.deleted]
                ready = [p.ready_at for p in pods if p.ready_at is not None]
                complete = pods and len(ready) == len(pods) and {p.component for p in pods} >= {"worker", "router"}
                out.append(FleetTimes(name, max(ready) if complete else None, self.crs.get(name)))
            return out


# ----- one run --------------------------------------------------------------------------------------------------


def fleet_doc(name: str, light: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {"model": {"path": MODEL}, "replicas": 1}
    if light:
        spec["engine"] = {"image": LIGHT_ENGINE_IMAGE}
        spec["router"] = {"image": LIGHT_ROUTER_IMAGE}
    else:
        spec["engine"] = {"env": FAST_SIM_ENV}
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "SGLangDeployment", "metadata": {"name": name}, "spec": spec}


def scrape(url: str, context: Any = None) -> str:
    with urllib.request.urlopen(url, context=context, timeout=30) as response:
        return str(response.read().decode())


def light_registrations(recorder: Recorder, light: frozenset[str]) -> dict[tuple[str, str], float]:
    """(router ip, worker url) -> registered_at, read once from every light router."""
    out: dict[tuple[str, str], float] = {}
    session = requests.Session()
    for router_ip, _ in recorder.routers(light):
        try:
            body = session.get(f"http://{router_ip}:{ROUTER_PORT}/workers", timeout=HTTP_TIMEOUT_S).json()
        except (requests.RequestException, ValueError):
            continue
        for worker in body.get("workers", []):
            if isinstance(worker.get("registered_at"), int | float):
                out[(router_ip, worker["url"])] = float(worker["registered_at"])
    return out


def registration(
    recorder: Recorder,
    light: frozenset[str],
    only: frozenset[str] | None = None,
    after_routers: bool = False,
    pods: frozenset[str] | None = None,
) -> tuple[list[float], list[str]]:
    """Registration latencies (and unlisted URLs) of the Ready workers of every fleet, or of the fleets `only`, or
    of the worker pods (UIDs) `pods`: from each worker's Ready, or (`after_routers`) from the later of its Ready and
    its fleet's router pods' Ready, which is when the operator can first register it everywhere."""
    listed = {**recorder.registered, **light_registrations(recorder, light)}
    routers_of: dict[str, list[tuple[str, float]]] = {}
    for ip, fleet, router_ready in recorder.router_pods(recorder.real | light):
        routers_of.setdefault(fleet, []).append((ip, router_ready))
    ready = {
        url: (fleet, at)
        for url, (fleet, at, uid) in recorder.worker_ready().items()
        if (only is None or fleet in only) and (pods is None or uid in pods)
    }
    times = {url: [listed.get((ip, url)) for ip, _ in routers_of.get(fleet, [])] for url, (fleet, _) in ready.items()}
    start = {
        url: max([t, *(r for _, r in routers_of.get(fleet, []))]) if after_routers else t
        for url, (fleet, t) in ready.items()
    }
    return registration_latencies(start, times)


def run_one(n: int, args: argparse.Namespace) -> RunResult:
    real_n = min(args.real, n)
    result = RunResult(n=n, real=real_n, light=n - real_n)
    layout = StateLayout(args.state_dir.resolve())
    if layout.root == default_layout().root:
        raise SystemExit("refusing to run on the shared cluster's state dir: pass another --state-dir")
    more = min(SCALE_UP_FLEETS, n) + 1  # the running-registration step's and the handover's new workers
    nodes = max(math.ceil((n + more) / args.gpus_per_node), math.ceil((2 * n + more) / PODS_PER_NODE), 1)
    if cluster.current(layout) is not None:
        log(f"stopping the benchmark cluster left at {layout.root}")
        cluster.down(layout)
    log(f"N={n}: starting a cluster at {layout.root}: {nodes} nodes x {args.gpus_per_node} GPUs")
    info = cluster.up(layout, nodes=nodes, gpus_per_node=args.gpus_per_node, with_prometheus=False, log=False).info
    operators: list[Operator] = []
    recorder: Recorder | None = None
    try:
        api = config.new_client_from_config(str(info.kubeconfig))
        core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        coordination = client.CoordinationV1Api(api)
        install_crd(api)
        create_namespace(core, SYSTEM_NAMESPACE, {"scale-bench": "true"})
        create_namespace(core, NAMESPACE, {"scale-bench": "true"})
        leader = leader_elect_supported()
        metrics = metrics_port_supported()
        ids = [
            make_identity(api, layout, info.server, name)
            for name in (["operator-a", "operator-b"][: 2 if leader else 1])
        ]
        admin_ctx = controlplane.admin_context(Pki(layout.pki))
        apiserver_metrics = f"{info.server}/metrics"

        operators.append(start_operator(ids[0], layout, leader, metrics))
        if leader:
            if not wait_until(lambda: (lease_holder(coordination) or "").startswith(ids[0].name), LEASE_WAIT_S):
                result.notes.append(f"operator A held no Lease within {LEASE_WAIT_S:g} s")
            operators.append(start_operator(ids[1], layout, leader, metrics))
        else:
            result.notes.append("`sglang-operator run` has no --leader-elect: one operator, no handover measured")

        names = [f"real-{i:03d}" for i in range(real_n)] + [f"light-{i:03d}" for i in range(n - real_n)]
        real, light = frozenset(names[:real_n]), frozenset(names[real_n:])
        recorder = Recorder(api, real).start()
        created = time.time()
        # All at once, as a platform team applying a folder of CRs would: a few concurrent writers.
        with ThreadPoolExecutor(max_workers=CREATE_THREADS) as pool:
            docs = [fleet_doc(name, name in light) for name in names]
            list(
                pool.map(
                    lambda doc: custom.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, doc), docs
                )
            )
        log(f"N={n}: {n} CRs created in {time.time() - created:.1f} s ({real_n} real, {n - real_n} light)")

        rec = recorder
        deadline = time.monotonic() + args.ready_timeout
        next_log = time.monotonic() + 15
        while time.monotonic() < deadline and len(rec.crs) < n and not rec.errors:
            time.sleep(1.0)
            if time.monotonic() >= next_log:
                pods_ready = sum(1 for p in list(rec.pods.values()) if p.ready_at)
                log(f"N={n}: {len(rec.crs)}/{n} CRs Ready, {pods_ready} pods Ready")
                next_log += 15
        times = rec.fleet_times(names)
        lags = ready_lags(times)
        result.ready_count = len(rec.crs)
        if result.ready_count < n:
            result.notes.append(f"only {result.ready_count}/{n} CRs Ready after {args.ready_timeout:g} s")
        else:
            result.all_ready_s = max(lags) if len(lags) == n else None
            result.total_ready_s = max(rec.crs.values()) - created
        result.ready_p50_s = percentile(lags, 50)

        # Real routers are polled until every Ready worker of a real fleet is listed on its routers (bounded).
        def real_registered() -> bool:
            _latencies, missing = registration(rec, frozenset())
            ready = rec.worker_ready()
            return not [url for url in missing if ready[url][0] in real]

        if real_n and not wait_until(real_registered, REGISTRATION_WAIT_S):
            result.notes.append(f"some real workers not listed on their routers within {REGISTRATION_WAIT_S:g} s")
        latencies, missing = registration(rec, light)
        result.registered = len(latencies)
        result.register_p50_s, result.register_p99_s = percentile(latencies, 50), percentile(latencies, 99)
        if missing:
            result.notes.append(f"{len(missing)} Ready workers not listed on every router of their fleet")
        after_routers = registration(rec, light, after_routers=True)[0]
        result.register_after_routers_p50_s = percentile(after_routers, 50)
        result.register_after_routers_p99_s = percentile(after_routers, 99)
        p50, p99 = result.register_after_routers_p50_s or 0.0, result.register_after_routers_p99_s or 0.0
        result.notes.append(f"registration from the later of the worker's and its routers' Ready: p50 {p50:.2f} s, "
                            f"p99 {p99:.2f} s")  # fmt: skip
        for kind, fleets in (("real", real), ("light", light)):
            some = registration(rec, light, only=fleets)[0] if fleets else []
            if some:
                p50, p99 = percentile(some, 50) or 0.0, percentile(some, 99) or 0.0
                result.notes.append(f"registration of {kind} fleets' workers: p50 {p50:.2f} s, p99 {p99:.2f} s")
        rec.close()
        if rec.errors:
            result.notes.append(f"recorder errors: {rec.errors}")
        at_ready = _scrape_optional(operators[0].metrics_url)
        if at_ready is not None:
            result.notes.append("leader's passes until all Ready: " + pass_summary(None, at_ready))
        log(f"N={n}: {result.ready_count} CRs Ready; settling {args.settle_seconds:g} s, then a quiet window")

        # The quiet window: nothing changes; count what the operators send.
        time.sleep(args.settle_seconds)
        leader_op = operators[0]
        pid = leader_op.pid
        before = scrape(apiserver_metrics, admin_ctx)
        op_before = _scrape_optional(leader_op.metrics_url)
        agent = procs.running_pid(layout, cluster.AGENT)  # context: what the light pods cost the node agent
        agent_before = cpu_seconds(agent) if agent else None
        cpu_before, window_began = (cpu_seconds(pid) if pid else None), time.monotonic()
        time.sleep(args.quiet_seconds)  # the measurement window itself
        after = scrape(apiserver_metrics, admin_ctx)
        window = time.monotonic() - window_began
        cpu_after = cpu_seconds(pid) if pid else None
        agent_after = cpu_seconds(agent) if agent else None
        if agent and agent_before is not None and agent_after is not None:
            agent_pct = 100.0 * (agent_after - agent_before) / window
            result.notes.append(
                f"node agent ({2 * n} pods): {agent_pct:.1f}% of a core in the quiet window, "
                f"peak RSS {peak_rss_mib(agent) or 0:.0f} MiB"
            )
        op_after = _scrape_optional(leader_op.metrics_url)
        dispatched = "apiserver_flowcontrol_dispatched_requests_total"
        split = {
            f"{ident.name}{suffix or '-other'}": per_minute(
                metric_sum(before, dispatched, {"flow_schema": ident.name + suffix}),
                metric_sum(after, dispatched, {"flow_schema": ident.name + suffix}),
                window,
            )
            for ident in ids
            for suffix, _, _ in flow_rules()
        }
        result.quiet_s = window
        result.api_requests_per_min = sum(split.values())
        result.api_requests_per_cr_per_min = result.api_requests_per_min / n
        leases = sum(rate for key, rate in split.items() if key.endswith("-lease"))
        result.api_per_cr_without_lease = (result.api_requests_per_min - leases) / n
        result.api_operator_split_per_min = split
        result.api_all_clients_per_min = per_minute(
            metric_sum(before, "apiserver_request_total"), metric_sum(after, "apiserver_request_total"), window
        )
        if len(split) > 1:
            result.notes.append(
                "operator requests/min in the quiet window: " + ", ".join(f"{k} {v:.1f}" for k, v in split.items())
            )
        schemas = metric_by_label(after, dispatched, "flow_schema")
        earlier = metric_by_label(before, dispatched, "flow_schema")
        result.api_by_flow_schema_per_min = {
            schema: (count - earlier.get(schema, 0.0)) * 60 / window for schema, count in sorted(schemas.items())
        }
        keys = ("resource", "subresource", "verb", "code")
        busiest = top_rates(
            metric_by_labels(before, "apiserver_request_total", keys),
            metric_by_labels(after, "apiserver_request_total", keys),
            window,
            5,
        )
        result.notes.append(
            "busiest requests of all clients in the quiet window (per min): "
            + ", ".join(f"{v} {r}{'/' + s if s else ''} ({c}) {rate:.0f}" for (r, s, v, c), rate in busiest)
        )
        if op_before is not None and op_after is not None:
            result.notes.append("leader's passes in the quiet window: " + pass_summary(op_before, op_after))
            name = "sglang_operator_kubernetes_requests_total"
            b, a = metric_by_label(op_before, name, "verb"), metric_by_label(op_after, name, "verb")
            result.api_by_verb_per_min = {verb: (a[verb] - b.get(verb, 0.0)) * 60 / window for verb in sorted(a)}
        if pid and cpu_after is not None and cpu_before is not None:
            result.cpu_s = cpu_after
            result.cpu_quiet_pct = 100.0 * (cpu_after - cpu_before) / window
            result.rss_mib = peak_rss_mib(pid)
        else:
            result.notes.append("the leader operator exited before the quiet window ended: no CPU/RSS")
        log(f"N={n}: quiet window {window:.0f} s: {result.api_requests_per_min:.1f} operator requests/min")
        if len(operators) > 1 and operators[1].pid:
            standby_rss = peak_rss_mib(operators[1].pid or 0)
            if standby_rss is not None:
                result.notes.append(f"standby peak RSS {standby_rss:.0f} MiB")

        running_registration(result, api, custom, names, real, light)
        if leader and len(operators) > 1:
            standby = ids[1]

            def standby_requests() -> dict[str, float]:
                """What the standby has sent since it started, by kind (it must have written nothing)."""
                now = scrape(apiserver_metrics, admin_ctx)
                flows = {(suffix or "-other").lstrip("-"): standby.name + suffix for suffix, _, _ in flow_rules()}
                return {kind: metric_sum(now, dispatched, {"flow_schema": flow}) for kind, flow in flows.items()}

            handover(result, operators, coordination, core, custom, names, light, args, standby_requests)
    finally:
        if recorder is not None:
            recorder.close()
        for op in reversed(operators):
            op.process.stop()
        if not args.keep:
            cluster.down(layout)
    return result


def pass_summary(before: str | None, after: str) -> str:
    """Passes, mean pass duration and mean wait for a pool thread, from the operator's own histograms."""

    def delta(name: str) -> float:
        return metric_sum(after, name) - (metric_sum(before, name) if before is not None else 0.0)

    passes = delta("sglang_operator_reconcile_duration_seconds_count")
    waits = delta("sglang_operator_workqueue_wait_seconds_count")
    took = delta("sglang_operator_reconcile_duration_seconds_sum") / passes if passes else 0.0
    waited = delta("sglang_operator_workqueue_wait_seconds_sum") / waits if waits else 0.0
    return f"{passes:.0f} passes, mean {took * 1000:.0f} ms each, mean wait for a pool thread {waited * 1000:.0f} ms"


def _scrape_optional(url: str | None) -> str | None:
    if url is None:
        return None
    try:
        return scrape(url)
    except OSError:
        return None


def handover_target(names: Sequence[str], light: frozenset[str]) -> str:
    """The fleet the handover step scales: the first light one."""
    return next((name for name in names if name in light), names[0])


def running_registration(
    result: RunResult,
    api: client.ApiClient,
    custom: client.CustomObjectsApi,
    names: Sequence[str],
    real: frozenset[str],
    light: frozenset[str],
) -> None:
    """Registration in a running cluster, not in its creation burst: with every fleet Ready (and the others
    resyncing), scale `SCALE_UP_FLEETS` fleets from 1 to 2 at once and time each new worker from its Ready to its
    URL listed on every router of its fleet."""
    others = [name for name in names if name != handover_target(names, light)]  # the handover scales that one
    chosen = [name for name in others if name in real][: SCALE_UP_FLEETS // 2]
    chosen += [name for name in others if name in light][: SCALE_UP_FLEETS - len(chosen)]
    if not chosen:
        return
    rec = Recorder(api, real).start()
    try:
        if not wait_until(lambda: len(rec.pods) >= 2 * len(names), 60):
            result.notes.append("running registration not measured: the pod watch did not list every pod")
            return
        known = frozenset(rec.pods)
        for name in chosen:
            custom.patch_namespaced_custom_object_scale(
                GROUP, VERSION, NAMESPACE, PLURAL, name, {"spec": {"replicas": 2}}
            )

        def new_workers() -> frozenset[str]:
            return frozenset(uid for _, _, uid in rec.worker_ready().values() if uid not in known)

        def all_listed() -> bool:
            fresh = new_workers()
            return len(fresh) >= len(chosen) and not registration(rec, light, pods=fresh)[1]

        if not wait_until(all_listed, REGISTRATION_WAIT_S):
            result.notes.append(f"running registration: not every new worker listed within {REGISTRATION_WAIT_S:g} s")
        latencies = registration(rec, light, pods=new_workers())[0]
        result.register_running_p50_s, result.register_running_p99_s = (
            percentile(latencies, 50),
            percentile(latencies, 99),
        )
        for kind, fleets in (("real", real), ("light", light)):
            some = registration(rec, light, only=fleets & frozenset(chosen), pods=new_workers())[0]
            if some:
                result.notes.append(
                    f"running registration ({len(chosen)} fleets scaled 1 -> 2 at once), {kind} fleets' new workers: "
                    f"p50 {percentile(some, 50) or 0.0:.2f} s, p99 {percentile(some, 99) or 0.0:.2f} s"
                )
        log(f"running registration: {len(latencies)} new workers, p99 {result.register_running_p99_s or 0.0:.2f} s")
    finally:
        rec.close()


def handover(
    result: RunResult,
    operators: list[Operator],
    coordination: client.CoordinationV1Api,
    core: client.CoreV1Api,
    custom: client.CustomObjectsApi,
    names: Sequence[str],
    light: frozenset[str],
    args: argparse.Namespace,
    standby_requests: Callable[[], dict[str, float]],
) -> None:
    """SIGKILL the leader, scale one fleet to 2 at once, and time the standby's Lease and its first pod. Before the
    kill, note what the standby has sent while standing by: it runs kopf's watches, and must not have written."""
    leader_op, standby = operators
    holder = lease_holder(coordination) or ""
    if not holder.startswith(leader_op.identity.name):
        result.notes.append(f"handover not measured: the Lease holder is {holder!r}, not operator A")
        return
    time.sleep(STANDBY_SETTLE_S)  # the standby has started and keeps trying the Lease
    result.standby_requests = standby_requests()
    result.notes.append(
        "the standby's requests while standing by: "
        + ", ".join(f"{kind} {count:.0f}" for kind, count in result.standby_requests.items())
    )
    target = handover_target(names, light)
    selector = f"sglang.ai/deployment={target},sglang.ai/component=worker"
    killed = time.time()
    leader_op.process.kill()
    custom.patch_namespaced_custom_object_scale(GROUP, VERSION, NAMESPACE, PLURAL, target, {"spec": {"replicas": 2}})
    lease_at: float | None = None
    pod_at: float | None = None
    deadline = time.monotonic() + args.handover_timeout
    while time.monotonic() < deadline and (lease_at is None or pod_at is None):
        now = time.time()
        if lease_at is None and (lease_holder(coordination) or "").startswith(standby.identity.name):
            lease_at = now
        if pod_at is None:
            pods = core.list_namespaced_pod(NAMESPACE, label_selector=selector).items
            if len([p for p in pods if not p.metadata.deletion_timestamp]) >= 2:
                pod_at = now
        time.sleep(0.2)
    result.handover_lease_s = None if lease_at is None else lease_at - killed
    result.handover_s = None if pod_at is None else pod_at - killed
    if pod_at is None:
        result.notes.append(f"the standby created no pod within {args.handover_timeout:g} s of the leader's SIGKILL")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, nargs="+", default=[10, 50, 200], help="numbers of SGLangDeployments, one run each")
    p.add_argument("--real", type=int, default=10, help="fleets with the real simulator and smg (the rest are light)")
    p.add_argument("--gpus-per-node", type=int, default=32)
    p.add_argument("--state-dir", type=Path, default=REPO_ROOT / "bench" / "out" / "scale-cluster",
                   help="the benchmark's own cluster state (never the shared e2e/.state)")  # fmt: skip
    p.add_argument("--ready-timeout", type=float, default=600.0, help="bound on waiting for every CR to be Ready")
    p.add_argument("--settle-seconds", type=float, default=10.0, help="pause after all Ready before the quiet window")
    p.add_argument(
        "--quiet-seconds",
        type=float,
        default=120.0,
        help="length of the quiet window (renewals every 7 s and watches reopened every 10 min: a minute's count "
        "varies by a request or two)",
    )
    p.add_argument("--handover-timeout", type=float, default=90.0)
    p.add_argument("--keep", action="store_true", help="leave the benchmark's cluster running after the last run")
    p.add_argument("--json", action="store_true", help='print {"runs": [...]} instead of the table')
    args = p.parse_args(argv)
    if any(n < 1 or n > 500 for n in args.n) or args.real < 0:
        p.error("--n takes 1..500 and --real >= 0")
    if not (0 < args.quiet_seconds <= 3600 and 0 < args.ready_timeout <= 7200 and 0 < args.handover_timeout <= 600):
        p.error("--quiet-seconds, --ready-timeout and --handover-timeout must be positive and bounded")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    runs = []
    for n in args.n:
        runs.append(run_one(n, args))
        log(f"N={n} done: {json.dumps(runs[-1].as_json())}")
    if args.json:
        print(json.dumps({"runs": [r.as_json() for r in runs]}, indent=1))
    else:
        print(render_table(runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
