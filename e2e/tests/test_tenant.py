"""A hostile tenant, with only SGLangDeployment rights in its namespace, against the real API server and operator.

The tenant is impersonated (`Impersonate-User`), so the API server authorizes every request as that user. Each
escalation of issue 16 must be refused at admission or, where the schema allows it, refused by the operator and
reported in status: no privileged or host pod, no Secret sent to a URL the operator's settings do not allow.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from localcluster.cluster import ClusterInfo
from localcluster.fleet import Fleet, install_crd, simulated_example
from localcluster.procs import wait_for
from sglang_operator.api.constants import GROUP, PLURAL, VERSION

TENANT = "tenant-a"
STATUS_TIMEOUT_S = 60.0


class _Canary(BaseHTTPRequestHandler):
    """Counts every request: the URL a tenant points the autoscaler at, which must never be called."""

    hits: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        self.hits.append(f"{self.path} {self.headers.get('Authorization')}")
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b'{"status":"success","data":{"resultType":"vector","result":[]}}')

    do_POST = do_GET

    def log_message(self, *_: Any) -> None:
        return


@pytest.fixture
def canary() -> Iterator[str]:
    _Canary.hits = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Canary)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture
def tenant(cluster: ClusterInfo, api_client: client.ApiClient, namespace: str) -> client.ApiClient:
    """A client acting as a user who may only manage SGLangDeployments in `namespace`."""
    install_crd(api_client)
    rbac = client.RbacAuthorizationV1Api(api_client)
    rule = {"apiGroups": [GROUP], "resources": [PLURAL, f"{PLURAL}/scale"],
            "verbs": ["create", "get", "list", "watch", "update", "patch", "delete"]}  # fmt: skip
    rbac.create_namespaced_role(namespace, {"metadata": {"name": "sgld-editor"}, "rules": [rule]})
    rbac.create_namespaced_role_binding(namespace, {
        "metadata": {"name": "sgld-editor"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "sgld-editor"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": TENANT}],
    })  # fmt: skip
    api = config.new_client_from_config(str(cluster.kubeconfig))
    api.set_default_header("Impersonate-User", TENANT)
    return api


def _cr(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "SGLangDeployment", "metadata": {"name": name}, "spec": spec}


def _create(api: client.ApiClient, namespace: str, body: dict[str, Any], strict: bool = True) -> str | None:
    """None when created, else the API server's refusal."""
    try:
        client.CustomObjectsApi(api).create_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, body, field_validation="Strict" if strict else None
        )
    except ApiException as exc:
        return f"{exc.status} {exc.body}"
    return None


MODEL = {"path": "Qwen/Qwen2.5-0.5B-Instruct"}
REFUSED_AT_ADMISSION: list[tuple[str, dict[str, Any], str]] = [
    ("privileged", {"template": {"spec": {"containers": [{"name": "x", "image": "i",
                                                          "securityContext": {"privileged": True}}]}}},
     "securityContext"),
    ("host-network", {"template": {"spec": {"hostNetwork": True, "hostPID": True}}}, "hostNetwork"),
    ("host-path-volume", {"template": {"spec": {"volumes": [{"name": "root", "hostPath": {"path": "/"}}]}}},
     "hostPath"),
    ("service-account", {"template": {"spec": {"serviceAccountName": "admin"}}}, "serviceAccountName"),
    ("main-command", {"template": {"spec": {"containers": [{"name": "sglang", "command": ["sh"]}]}}},
     "may only add"),
    ("huge-replicas", {"replicas": 1_000_000}, "at most 512"),
    ("owned-flag", {"engine": {"args": ["--port", "1"]}}, "flags the operator sets"),
    ("owned-env", {"engine": {"env": [{"name": "HF_TOKEN", "value": "hf_x"}]}}, "env the operator sets"),
    ("file-url", {"autoscaling": {"prometheusURL": "file:///etc/passwd"}}, "spec.autoscaling.prometheusURL"),
    ("operator-annotation", {"template": {"metadata": {"annotations": {"sglang.ai/draining-since": "x"}}}},
     "sglang.ai/"),
]  # fmt: skip


def test_escalations_are_refused_at_admission(tenant: client.ApiClient, namespace: str) -> None:
    accepted = []
    for name, patch, fragment in REFUSED_AT_ADMISSION:
        refused = _create(tenant, namespace, _cr(name, {"model": MODEL, **patch}))
        if refused is None or fragment not in refused:
            accepted.append(f"{name}: {refused}")
    assert not accepted, "\n".join(accepted)
    assert _create(tenant, namespace, _cr("my.model", {"model": MODEL})) is not None  # not a DNS-1035 label
    with pytest.raises(ApiException) as caught:  # the setup is what it claims: this tenant cannot read Secrets
        client.CoreV1Api(tenant).list_namespaced_secret(namespace)
    assert caught.value.status == 403


@pytest.mark.usefixtures("operator")
def test_what_admission_allows_the_operator_still_refuses(
    tenant: client.ApiClient, api_client: client.ApiClient, namespace: str, canary: str
) -> None:
    core = client.CoreV1Api(api_client)
    core.create_namespaced_secret(namespace, {"metadata": {"name": "admin-token"}, "stringData": {"token": "s3cret"}})
    # A node directory that no admin allowed: the operator writes nothing and says why.
    host = _cr("host-cache", {"model": {**MODEL, "cache": {"type": "hostPath", "hostPath": "/"}}})
    assert _create(tenant, namespace, host) is None
    # A Prometheus of the tenant's choosing, with a Secret the tenant cannot read: never called, never read.
    steal = simulated_example("quickstart.yaml", autoscaling={
        "enabled": True, "prometheusURL": canary, "intervalSeconds": 1,
        "prometheusAuth": {"bearerTokenSecretRef": {"name": "admin-token", "key": "token"}},
    })  # fmt: skip
    steal["metadata"]["name"] = "steal"
    assert _create(tenant, namespace, steal) is None
    # Unknown pod fields without strict validation are pruned by the API server; the pod is the operator's own.
    pruned = simulated_example("quickstart.yaml", template={"spec": {"hostNetwork": True, "serviceAccountName": "x"}})
    pruned["metadata"]["name"] = "pruned"
    assert _create(tenant, namespace, pruned, strict=False) is None

    host_fleet, steal_fleet, pruned_fleet = (Fleet(api_client, namespace, n) for n in ("host-cache", "steal", "pruned"))

    def reason(fleet: Fleet, type_: str) -> str:
        found = fleet.condition(type_) or {}
        return f"{found.get('status')}/{found.get('reason')}: {found.get('message')}"

    wait_for(lambda: "PolicyViolation" in reason(host_fleet, "Ready"), STATUS_TIMEOUT_S, "host-cache refused")
    assert "--allow-host-path" in reason(host_fleet, "Ready")
    assert host_fleet.pods() == []
    wait_for(lambda: "not allowed" in reason(steal_fleet, "MetricsAvailable"), STATUS_TIMEOUT_S, "steal refused")
    assert _Canary.hits == [], _Canary.hits
    assert "s3cret" not in str(steal_fleet.status())
    wait_for(lambda: len(pruned_fleet.pods()) == 1, STATUS_TIMEOUT_S, "the pruned fleet's pod")
    wait_for(lambda: len(pruned_fleet.pods("router")) == 1, STATUS_TIMEOUT_S, "the pruned fleet's router pod")
    for pod in [*pruned_fleet.pods(), *steal_fleet.pods(), *pruned_fleet.pods("router")]:
        spec = pod.spec
        assert not spec.host_network and not spec.host_pid and not spec.host_ipc
        assert spec.service_account_name in (None, "default")
        assert spec.automount_service_account_token is False
        assert not any(v.host_path for v in spec.volumes or [])
        for container in spec.containers:
            context = container.security_context
            assert context is not None and not context.privileged and context.allow_privilege_escalation is False
