"""The autoscaler against a Prometheus that asks who it is, with its credentials in a Secret of the real API server.

The Prometheus here is the one the harness builds, started by this module with a web config that requires basic
auth (a Prometheus of its own, so the cluster's stays open for the other tests). It scrapes itself, so `up` has a
series to read once the client is let in. A bearer token cannot be checked by Prometheus itself (a proxy in front
of it does that); that the header is sent is checked in tests/integration/prometheus/test_client.py.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from typing import Any

import bcrypt
import pytest
import requests
import yaml
from kubernetes import client

from localcluster.build import ensure_built, prometheus_target
from localcluster.cluster import ClusterInfo
from localcluster.fleet import install_crd
from localcluster.paths import bin_dir
from localcluster.procs import pick_port, wait_for
from sglang_operator.api.constants import GROUP, PLURAL, VERSION
from sglang_operator.api.spec import AutoscalingWindows, BasicAuthSecretRef, PrometheusAuth
from sglang_operator.autoscaling.autoscale_pass import autoscale_once
from sglang_operator.prometheus.client import Target, connect, read_samples
from sglang_operator.prometheus.credentials import resolve_credentials
from sglang_operator.settings import OperatorSettings

USER, PASSWORD = "autoscaler", "correct horse battery staple"
START_TIMEOUT_S = 60.0
SCRAPE_TIMEOUT_S = 30.0  # the first self-scrape, at a 2 s interval


@pytest.fixture(scope="module")
def guarded_prometheus(cluster: ClusterInfo, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Prometheus that answers only with USER's password; yields its URL."""
    binary = ensure_built(bin_dir(), prometheus_target()).bin_dir / "prometheus"
    work = tmp_path_factory.mktemp("guarded-prometheus")
    port = pick_port(19090)
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=4)).decode()
    (work / "web.yml").write_text(yaml.safe_dump({"basic_auth_users": {USER: hashed}}))
    own = {"targets": [f"127.0.0.1:{port}"]}
    scrape = {"job_name": "self", "static_configs": [own], "basic_auth": {"username": USER, "password": PASSWORD}}
    config = {"global": {"scrape_interval": "2s"}, "scrape_configs": [scrape]}
    (work / "prometheus.yml").write_text(yaml.safe_dump(config))
    argv = [
        str(binary),
        f"--config.file={work / 'prometheus.yml'}",
        f"--web.config.file={work / 'web.yml'}",
        f"--storage.tsdb.path={work / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--log.level=warn",
    ]
    with (work / "prometheus.log").open("w") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _ready(base, proc), START_TIMEOUT_S, f"the guarded Prometheus at {base}")
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _ready(base: str, proc: subprocess.Popen[bytes]) -> bool:
    if proc.poll() is not None:
        raise RuntimeError(f"prometheus exited with {proc.returncode}")
    try:
        return requests.get(f"{base}/-/ready", auth=(USER, PASSWORD), timeout=3).status_code == 200
    except requests.RequestException:
        return False


def create_basic_auth_secret(core: client.CoreV1Api, namespace: str, name: str, password: str) -> None:
    body = {"metadata": {"name": name}, "stringData": {"username": USER, "password": password}}
    core.create_namespaced_secret(namespace, body)


def test_basic_auth_from_a_secret_lets_the_autoscaler_in(
    guarded_prometheus: str, core: client.CoreV1Api, namespace: str
) -> None:
    target, windows = Target(namespace, "chat"), AutoscalingWindows()
    samples, error = read_samples(connect(guarded_prometheus, 5), target, windows)
    assert samples is None and error is not None and "401" in error  # no credentials: turned away

    create_basic_auth_secret(core, namespace, "prom-reader", PASSWORD)
    auth = PrometheusAuth(basic_auth_secret_ref=BasicAuthSecretRef(name="prom-reader"))
    credentials, problem = resolve_credentials(core, namespace, auth)
    assert problem is None and credentials is not None and credentials.basic == (USER, PASSWORD)
    prom = connect(guarded_prometheus, 5, credentials)
    up = wait_for(lambda: prom.custom_query('up{job="self"}') or None, SCRAPE_TIMEOUT_S, "the self-scrape's series")
    assert up[0]["value"][1] == "1"
    samples, error = read_samples(prom, target, windows)
    assert error is None and samples is not None  # every query answered (no SGLang series here: no values)

    # A missing key, a missing Secret and a value that is not UTF-8 read the same (issue 29, gap 12).
    core.create_namespaced_secret(
        namespace, {"metadata": {"name": "prom-binary"}, "data": {"username": "dXNlcg==", "pw": "//79"}}
    )  # pw: bytes ff fe fd
    texts = {
        name: resolve_credentials(
            core, namespace, PrometheusAuth(basic_auth_secret_ref=BasicAuthSecretRef(name=name, passwordKey="pw"))
        )
        for name in ("prom-reader", "no-such-secret", "prom-binary")
    }
    assert {name: text.replace(name, "S") for name, (_, text) in texts.items() if text} == dict.fromkeys(
        texts,
        "spec.autoscaling.prometheusAuth.basicAuthSecretRef: the credential in Secret S, key username and pw, is "
        "unusable (it must exist in this namespace and hold UTF-8 text)",
    )

    create_basic_auth_secret(core, namespace, "prom-wrong", "not the password")
    wrong, _ = resolve_credentials(
        core, namespace, PrometheusAuth(basic_auth_secret_ref=BasicAuthSecretRef(name="prom-wrong"))
    )
    samples, error = read_samples(connect(guarded_prometheus, 5, wrong), target, windows)
    assert samples is None and error is not None and "401" in error


def deployment(prometheus_url: str, secret: str) -> dict[str, Any]:
    autoscaling = {
        "enabled": True,
        "prometheusURL": prometheus_url,
        "prometheusAuth": {"basicAuthSecretRef": {"name": secret}},
    }
    spec = {"model": {"path": "org/model"}, "replicas": 1, "autoscaling": autoscaling}
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "SGLangDeployment", "metadata": {"name": "chat"}, "spec": spec}


def metrics_condition(custom: client.CustomObjectsApi, namespace: str) -> dict[str, Any]:
    body = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "chat")
    return next(c for c in body["status"]["conditions"] if c["type"] == "MetricsAvailable")


def test_a_pass_with_a_missing_secret_holds_and_names_it(
    guarded_prometheus: str,
    api_client: client.ApiClient,
    core: client.CoreV1Api,
    namespace: str,
) -> None:
    settings = OperatorSettings(allowed_prometheus_urls=(guarded_prometheus,))  # `run --allow-prometheus-url`
    install_crd(api_client)
    custom = client.CustomObjectsApi(api_client)
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, deployment(guarded_prometheus, "prom"))

    result = autoscale_once(api_client, settings, namespace, "chat")
    assert result.decision is not None and result.decision.replicas == 1 and result.decision.mode == "hold"
    condition = metrics_condition(custom, namespace)
    assert condition["status"] == "False"
    assert condition["message"] == (  # the same words as a missing key or a value that is not text (gap 12)
        "spec.autoscaling.prometheusAuth.basicAuthSecretRef: the credential in Secret prom, key username and "
        "password, is unusable (it must exist in this namespace and hold UTF-8 text)"
    )

    create_basic_auth_secret(core, namespace, "prom", PASSWORD)  # the next pass uses it, with no restart
    autoscale_once(api_client, settings, namespace, "chat")
    message = metrics_condition(custom, namespace)["message"]
    assert "prometheusAuth" not in message and "401" not in message  # let in; no SGLang series here to read
