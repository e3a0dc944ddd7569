"""Run etcd, kube-apiserver, kube-controller-manager and kube-scheduler on 127.0.0.1.

`start` brings up a fresh cluster (etcd's data folder is wiped: every `up` begins empty, so no state leaks
from one test session into the next), with RBAC on, service-account tokens signed by our own key (TokenRequest
works) and one client certificate per component. Argument lists are built by pure functions so they can be
read and tested without starting anything. `stop` stops the processes in reverse order and leaves none behind.
"""

from __future__ import annotations

import json
import shutil
import ssl
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path

from localcluster import procs
from localcluster.paths import StateLayout
from localcluster.pki import FRONT_PROXY_CLIENT, Pki, ensure_pki, write_kubeconfig

COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
SERVICE_CIDR = "10.96.0.0/12"  # bookkeeping only: there is no kube-proxy
SA_ISSUER = "https://kubernetes.default.svc.cluster.local"
READY_TIMEOUT_S = 180.0  # apiserver start-up on a busy 2-core machine; typically 10-30 s


@dataclass(frozen=True)
class Ports:
    etcd_client: int
    etcd_peer: int
    apiserver: int
    controller_manager: int
    scheduler: int

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.apiserver}"


def choose_ports() -> Ports:
    """The conventional ports where free, otherwise free ephemeral ones."""
    taken: set[int] = set()
    chosen = []
    for preferred in (2379, 2380, 6443, 10257, 10259):
        port = procs.pick_port(preferred, taken)
        taken.add(port)
        chosen.append(port)
    return Ports(*chosen)


def read_ports(layout: StateLayout) -> Ports | None:
    try:
        return Ports(**json.loads(layout.ports_file.read_text()))
    except (FileNotFoundError, ValueError, TypeError):
        return None


def etcd_args(bin_dir: Path, layout: StateLayout, ports: Ports) -> list[str]:
    peer = f"http://127.0.0.1:{ports.etcd_peer}"
    client = f"http://127.0.0.1:{ports.etcd_client}"
    return [
        str(bin_dir / "etcd"),
        "--name=localcluster",
        f"--data-dir={layout.etcd_data}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=localcluster={peer}",
        "--log-level=warn",
        # A throw-away test cluster: skipping fsync keeps API latency low on a shared, slow disk.
        "--unsafe-no-fsync",
    ]


def apiserver_args(bin_dir: Path, pki: Pki, ports: Ports) -> list[str]:
    return [
        str(bin_dir / "kube-apiserver"),
        f"--etcd-servers=http://127.0.0.1:{ports.etcd_client}",
        "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1",
        f"--secure-port={ports.apiserver}",
        f"--tls-cert-file={pki.crt('apiserver')}",
        f"--tls-private-key-file={pki.key('apiserver')}",
        f"--client-ca-file={pki.ca_crt}",
        "--authorization-mode=Node,RBAC",
        f"--service-account-issuer={SA_ISSUER}",
        f"--service-account-key-file={pki.sa_pub}",
        f"--service-account-signing-key-file={pki.sa_key}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        # No kubelet-run kube-proxy or real Service VIP: do not reconcile the `kubernetes` Endpoints.
        "--endpoint-reconciler-type=none",
        "--allow-privileged=true",
        "--profiling=false",
        # The aggregation layer (extension API servers such as prometheus-adapter's metrics APIs): the aggregator
        # proxies with the front proxy's client certificate and names the user in these headers.
        f"--requestheader-client-ca-file={pki.front_proxy_ca_crt}",
        f"--requestheader-allowed-names={FRONT_PROXY_CLIENT}",
        "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        f"--proxy-client-cert-file={pki.crt(FRONT_PROXY_CLIENT)}",
        f"--proxy-client-key-file={pki.key(FRONT_PROXY_CLIENT)}",
    ]


def _component_common(kubeconfig: Path, port: int) -> list[str]:
    return [
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        "--leader-elect=false",
        "--profiling=false",
    ]


def controller_manager_args(bin_dir: Path, layout: StateLayout, pki: Pki, ports: Ports) -> list[str]:
    return [
        str(bin_dir / "kube-controller-manager"),
        *_component_common(layout.root / "controller-manager.kubeconfig", ports.controller_manager),
        f"--service-account-private-key-file={pki.sa_key}",
        f"--root-ca-file={pki.ca_crt}",
        "--use-service-account-credentials=true",
        f"--cluster-signing-cert-file={pki.ca_crt}",
        f"--cluster-signing-key-file={pki.ca_key}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
    ]


def scheduler_args(bin_dir: Path, layout: StateLayout, ports: Ports) -> list[str]:
    return [
        str(bin_dir / "kube-scheduler"),
        *_component_common(layout.root / "scheduler.kubeconfig", ports.scheduler),
    ]


def _get(url: str, context: ssl.SSLContext) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, context=context, timeout=3) as resp:
            return int(resp.status), resp.read().decode(errors="replace")
    except urllib.error.HTTPError as err:
        return int(err.code), ""
    except (OSError, ssl.SSLError):
        return 0, ""


def admin_context(pki: Pki) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki.ca_crt))
    context.load_cert_chain(str(pki.crt("admin")), str(pki.key("admin")))
    return context


def _insecure_context() -> ssl.SSLContext:
    # Controller-manager and scheduler serve /healthz with a self-signed certificate on 127.0.0.1.
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def apiserver_ready(layout: StateLayout) -> bool:
    ports, pki = read_ports(layout), Pki(layout.pki)
    if ports is None or not pki.ca_crt.exists():
        return False
    return _get(f"{ports.server}/readyz", admin_context(pki))[0] == 200


def running(layout: StateLayout) -> dict[str, int | None]:
    return {name: procs.running_pid(layout, name) for name in COMPONENTS}


def is_up(layout: StateLayout, patience: float = 30.0) -> bool:
    """All four processes alive and /readyz answering. A busy API server gets `patience` seconds to answer:
    a cluster wrongly judged down would be restarted fresh under whoever is using it."""
    if not all(running(layout).values()):
        return False
    try:
        procs.wait_for(lambda: apiserver_ready(layout), patience, "kube-apiserver /readyz", interval=1.0)
    except TimeoutError:
        return False
    return True


def _spawn_and_wait(layout: StateLayout, name: str, argv: list[str], url: str, ctx: ssl.SSLContext | None) -> None:
    procs.spawn(layout, name, argv)

    def healthy() -> bool:
        if procs.running_pid(layout, name) is None:
            raise RuntimeError(f"{name} exited during start-up" + procs.log_tail(layout.logfile(name)))
        status, body = _get(url, ctx) if ctx else _get(url, ssl.create_default_context())
        return status == 200 and (name != "etcd" or '"health":"true"' in body)

    procs.wait_for(
        healthy, READY_TIMEOUT_S, f"{name} at {url}", on_timeout=lambda: procs.log_tail(layout.logfile(name))
    )


def start(layout: StateLayout, bin_dir: Path) -> float:
    """Start a fresh control plane and wait until every component is healthy; returns the seconds it took.
    If any component fails to come up, the ones already started are stopped again."""
    stop(layout)
    began = time.monotonic()
    try:
        _start_components(layout, bin_dir)
    except BaseException:
        stop(layout)
        raise
    return time.monotonic() - began


def _start_components(layout: StateLayout, bin_dir: Path) -> None:
    layout.root.mkdir(parents=True, exist_ok=True)
    pki = ensure_pki(layout.pki)
    shutil.rmtree(layout.etcd_data, ignore_errors=True)
    ports = choose_ports()
    layout.ports_file.write_text(json.dumps(asdict(ports)) + "\n")
    write_kubeconfig(layout.root / "controller-manager.kubeconfig", pki, ports.server, "controller-manager")
    write_kubeconfig(layout.root / "scheduler.kubeconfig", pki, ports.server, "scheduler")

    etcd_url = f"http://127.0.0.1:{ports.etcd_client}/health"
    _spawn_and_wait(layout, "etcd", etcd_args(bin_dir, layout, ports), etcd_url, None)
    admin = admin_context(pki)
    _spawn_and_wait(layout, "kube-apiserver", apiserver_args(bin_dir, pki, ports), f"{ports.server}/readyz", admin)
    insecure = _insecure_context()
    cm_url = f"https://127.0.0.1:{ports.controller_manager}/healthz"
    _spawn_and_wait(
        layout,
        "kube-controller-manager",
        controller_manager_args(bin_dir, layout, pki, ports),
        cm_url,
        insecure,
    )
    sched_url = f"https://127.0.0.1:{ports.scheduler}/healthz"
    _spawn_and_wait(layout, "kube-scheduler", scheduler_args(bin_dir, layout, ports), sched_url, insecure)
    write_kubeconfig(layout.kubeconfig, pki, ports.server, "admin")


def stop(layout: StateLayout) -> list[str]:
    """Stop the components in reverse start order; returns the names that were running."""
    stopped = [name for name in reversed(COMPONENTS) if procs.stop(layout, name)]
    layout.kubeconfig.unlink(missing_ok=True)
    return stopped
