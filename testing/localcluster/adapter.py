"""prometheus-adapter on the local cluster: the external metrics API (`external.metrics.k8s.io`) served from PromQL,
for the real HPA controller (in kube-controller-manager) to scale an SGLangDeployment through `/scale`.

- Built from Go modules (e2e/tools/prometheus-adapter, a `tool` directive on sigs.k8s.io/prometheus-adapter) into
  e2e/.bin like the cluster's binaries (`build.ensure_built`: a stamp, rebuilt only when the module changes).
- Run as a local process on 127.0.0.1 with a serving certificate from the cluster's CA, delegating authentication
  and authorisation to the API server (admin kubeconfig): it trusts the aggregator's front-proxy client
  certificate (`pki.py`, `--requestheader-*` on the API server) through `kube-system/extension-apiserver-
  authentication`, exactly as in a real cluster.
- Registered with an `APIService` whose Service is of type ExternalName `localhost`: the aggregator dials
  `https://localhost:<port>` (there is no kube-proxy to route a ClusterIP), verifying the adapter's certificate
  for `<service>.<namespace>.svc` against the caBundle.

The configuration and argument lists are pure functions; `start` and `register` do the I/O.
"""

from __future__ import annotations

import base64
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from localcluster import procs
from localcluster.build import Target, ensure_built
from localcluster.paths import E2E_DIR, StateLayout, bin_dir
from localcluster.pki import Pki, sign_leaf

NAME = "prometheus-adapter"
MODULE_DIR = E2E_DIR / "tools" / "prometheus-adapter"
EXTERNAL_GROUP = "external.metrics.k8s.io"
EXTERNAL_VERSION = "v1beta1"
READY_TIMEOUT_S = 120.0


def adapter_target() -> Target:
    return Target(
        name=NAME,
        module_dir=MODULE_DIR,
        packages={NAME: "sigs.k8s.io/prometheus-adapter/cmd/adapter"},
        go_names={NAME: "adapter"},
    )


def ensure_adapter(log: bool = True) -> Path:
    return ensure_built(bin_dir(), adapter_target(), log).bin_dir / NAME


def requests_rate_rule(metric: str, window: str) -> dict[str, Any]:
    """An external metric `metric`: requests per second finished by the workers selected by the HPA's selector
    (`sglang_deployment: NAME`) in the HPA's namespace, over `window`, from the simulator's (and SGLang's)
    `sglang:num_requests_total` counter. Pure."""
    return {
        "seriesQuery": '{__name__="sglang:num_requests_total",namespace!="",sglang_deployment!=""}',
        "resources": {"overrides": {"namespace": {"resource": "namespace"}}},
        "name": {"matches": "^sglang:num_requests_total$", "as": metric},
        "metricsQuery": f"sum(rate(<<.Series>>{{<<.LabelMatchers>>}}[{window}]))",
    }


def render_config(external_rules: list[dict[str, Any]]) -> dict[str, Any]:
    """The adapter's --config (no custom or resource metrics: the external API alone). Pure."""
    return {"rules": [], "externalRules": external_rules}


def adapter_args(
    binary: Path, kubeconfig: Path, pki_dir: Path, port: int, prometheus_url: str, config: Path
) -> list[str]:
    cert = pki_dir / f"{NAME}.crt"
    key = pki_dir / f"{NAME}.key"
    return [
        str(binary),
        f"--secure-port={port}",
        "--bind-address=127.0.0.1",
        f"--tls-cert-file={cert}",
        f"--tls-private-key-file={key}",
        f"--lister-kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        f"--prometheus-url={prometheus_url}",
        f"--config={config}",
        "--metrics-relist-interval=5s",  # new series (a fleet's first requests) are served within seconds
        "--v=2",
    ]


def service_host(namespace: str) -> str:
    """The name the aggregator verifies the adapter's certificate for (`<service>.<namespace>.svc`)."""
    return f"{NAME}.{namespace}.svc"


def start(layout: StateLayout, prometheus_url: str, namespace: str, rules: list[dict[str, Any]]) -> int:
    """Build (if needed) and start the adapter for the cluster at `layout`; returns its port once /healthz answers.
    `namespace`: where its ExternalName Service will live (named in its certificate)."""
    binary = ensure_adapter()
    pki = Pki(layout.pki)
    sans = (f"DNS:{service_host(namespace)}", "DNS:localhost", "IP:127.0.0.1")
    sign_leaf(pki.dir, NAME, f"/CN={service_host(namespace)}", "serverAuth", sans)
    config = layout.root / f"{NAME}.yaml"
    config.write_text(yaml.safe_dump(render_config(rules), sort_keys=False))
    port = procs.pick_port(6443 + 100, set())
    argv = adapter_args(binary, layout.kubeconfig, pki.dir, port, prometheus_url, config)
    procs.spawn(layout, NAME, argv)
    context = ssl.create_default_context(cafile=str(pki.ca_crt))

    def healthy() -> bool:
        if procs.running_pid(layout, NAME) is None:
            raise RuntimeError(f"{NAME} exited during start-up" + procs.log_tail(layout.logfile(NAME)))
        try:
            with urllib.request.urlopen(f"https://localhost:{port}/healthz", context=context, timeout=3) as resp:
                return int(resp.status) == 200
        except (OSError, urllib.error.URLError):
            return False

    procs.wait_for(
        healthy, READY_TIMEOUT_S, f"{NAME} /healthz", on_timeout=lambda: procs.log_tail(layout.logfile(NAME))
    )
    return port


def stop(layout: StateLayout) -> bool:
    return procs.stop(layout, NAME)


def registration(namespace: str, port: int, ca_pem: bytes) -> list[dict[str, Any]]:
    """The ExternalName Service and the APIService that put the adapter behind the aggregator. Pure."""
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": NAME, "namespace": namespace},
        "spec": {"type": "ExternalName", "externalName": "localhost"},
    }
    api_service = {
        "apiVersion": "apiregistration.k8s.io/v1",
        "kind": "APIService",
        "metadata": {"name": f"{EXTERNAL_VERSION}.{EXTERNAL_GROUP}"},
        "spec": {
            "group": EXTERNAL_GROUP,
            "version": EXTERNAL_VERSION,
            "service": {"namespace": namespace, "name": NAME, "port": port},
            "caBundle": base64.b64encode(ca_pem).decode(),
            "groupPriorityMinimum": 100,
            "versionPriority": 100,
        },
    }
    return [service, api_service]
