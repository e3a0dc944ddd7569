"""Prometheus scraping pods through Kubernetes service discovery against the local cluster.

Prometheus is built from Go modules (e2e/cluster/prometheus; see `build.py`): Debian's package has Kubernetes
service discovery patched out ("field kubernetes_sd_configs not found"), and that is what this cluster needs.

The configuration is rendered by a pure function: one job, `kubernetes_sd_configs` with the pod role against
our API server (admin client certificate), scraping every 5 s the pods annotated `prometheus.io/scrape:
"true"` at `<pod IP>:<prometheus.io/port><prometheus.io/path>`, with the labels the operator's queries group
by. It can be stopped and started on its own (e2e tests do this to check the autoscaler holds without
metrics); a restart keeps its port, so a `prometheusURL` handed out earlier stays valid, and keeps its data.
"""

from __future__ import annotations

import shutil
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from localcluster import procs
from localcluster.build import ensure_built, prometheus_target
from localcluster.controlplane import read_ports
from localcluster.paths import StateLayout, as_layout, bin_dir
from localcluster.pki import Pki

NAME = "prometheus"
SCRAPE_INTERVAL = "5s"
# Pod label -> Prometheus label. Kubernetes SD exposes pod labels with non-alphanumeric characters as `_`.
POD_LABELS = {
    "sglang.ai/deployment": "sglang_deployment",
    "sglang.ai/replica": "sglang_replica",
    "sglang.ai/node-rank": "sglang_node_rank",
    "sglang.ai/revision": "sglang_revision",
    "sglang.ai/component": "sglang_component",
}


def _meta_label(pod_label: str) -> str:
    return "__meta_kubernetes_pod_label_" + "".join(c if c.isalnum() else "_" for c in pod_label)


def render_config(api_server: str, ca_file: str, cert_file: str, key_file: str) -> dict[str, Any]:
    """The whole prometheus.yml as a dict (pure)."""
    ann = "__meta_kubernetes_pod_annotation_prometheus_io_"
    relabel: list[dict[str, Any]] = [
        {"source_labels": [f"{ann}scrape"], "action": "keep", "regex": "true"},
        {"source_labels": ["__meta_kubernetes_pod_phase"], "action": "drop", "regex": "Succeeded|Failed"},
        {"source_labels": [f"{ann}path"], "regex": "(.+)", "target_label": "__metrics_path__"},
        {
            "source_labels": ["__meta_kubernetes_pod_ip", f"{ann}port"],
            "regex": r"(.+);(\d+)",
            "replacement": "$1:$2",
            "target_label": "__address__",
        },
        {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
        {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
        {"source_labels": ["__meta_kubernetes_pod_node_name"], "target_label": "node"},
    ]
    relabel += [{"source_labels": [_meta_label(k)], "target_label": v} for k, v in POD_LABELS.items()]
    tls = {"ca_file": ca_file, "cert_file": cert_file, "key_file": key_file}
    return {
        "global": {"scrape_interval": SCRAPE_INTERVAL, "scrape_timeout": "4s", "evaluation_interval": "5s"},
        "scrape_configs": [
            {
                "job_name": "kubernetes-pods",
                "metrics_path": "/metrics",
                "kubernetes_sd_configs": [{"role": "pod", "api_server": api_server, "tls_config": tls}],
                "relabel_configs": relabel,
            }
        ],
    }


def url(state: StateLayout | Path | None = None) -> str | None:
    """The URL recorded for this cluster's Prometheus (kept while it is stopped, so restarts reuse it)."""
    try:
        return as_layout(state).prometheus_url_file.read_text().strip() or None
    except FileNotFoundError:
        return None


def ready(state: StateLayout | Path | None = None) -> bool:
    base = url(state)
    if base is None or procs.running_pid(as_layout(state), NAME) is None:
        return False
    try:
        with urllib.request.urlopen(f"{base}/-/ready", timeout=3) as resp:
            return int(resp.status) == 200
    except (OSError, urllib.error.URLError):
        return False


def start_prometheus(state: StateLayout | Path | None = None, timeout: float = 60.0) -> str:
    """Start (or keep) Prometheus for the running cluster; returns its URL."""
    layout = as_layout(state)
    if ready(layout):
        return str(url(layout))
    stop_prometheus(layout)
    ports = read_ports(layout)
    if ports is None:
        raise RuntimeError("the control plane is not running: no ports.json in " + str(layout.root))
    binary = str(ensure_built(bin_dir(), prometheus_target()).bin_dir / NAME)
    pki = Pki(layout.pki)
    layout.prometheus_dir.mkdir(parents=True, exist_ok=True)
    config = render_config(ports.server, str(pki.ca_crt), str(pki.crt("admin")), str(pki.key("admin")))
    config_file = layout.prometheus_dir / "prometheus.yml"
    config_file.write_text(yaml.safe_dump(config, sort_keys=False))
    previous = url(layout)
    port = procs.pick_port(int(previous.rsplit(":", 1)[1]) if previous else 9090)
    base = f"http://127.0.0.1:{port}"
    argv = [
        binary,
        f"--config.file={config_file}",
        f"--storage.tsdb.path={layout.prometheus_dir / 'data'}",
        "--storage.tsdb.retention.time=1d",
        f"--web.listen-address=127.0.0.1:{port}",
        "--web.enable-lifecycle",
        "--log.level=warn",
    ]
    procs.spawn(layout, NAME, argv)
    layout.prometheus_url_file.write_text(base + "\n")

    def is_ready() -> bool:
        if procs.running_pid(layout, NAME) is None:
            raise RuntimeError("prometheus exited during start-up" + procs.log_tail(layout.logfile(NAME)))
        return ready(layout)

    try:
        procs.wait_for(
            is_ready, timeout, f"prometheus at {base}", on_timeout=lambda: procs.log_tail(layout.logfile(NAME))
        )
    except BaseException:
        stop_prometheus(layout)
        raise
    return base


def stop_prometheus(state: StateLayout | Path | None = None) -> bool:
    """Stop Prometheus (its URL and data stay, for a restart); True if it was running."""
    return procs.stop(as_layout(state), NAME)


def forget(state: StateLayout | Path | None = None) -> None:
    """Drop the URL and data: the next start is a fresh Prometheus (used when the whole cluster goes down)."""
    layout = as_layout(state)
    layout.prometheus_url_file.unlink(missing_ok=True)
    shutil.rmtree(layout.prometheus_dir / "data", ignore_errors=True)
