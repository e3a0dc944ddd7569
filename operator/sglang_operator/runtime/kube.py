"""One Kubernetes API client per process, from the in-cluster service account or the kubeconfig.

Every request it sends is counted in `sglang_operator_kubernetes_requests_total` by verb and code: the client's
`call_api` is the one point every generated method passes through, errors included (a refused connection or a
timeout counts as code `error`). kopf's own watches use kopf's client and are not counted here.
"""

import functools
import re
from typing import Any, Final

from kubernetes import client, config

from .. import metrics
from .keepalive import urllib3_socket_options

API_TIMEOUT: Final = (5.0, 20.0)
"""`_request_timeout` of every Kubernetes call the operator makes: 5 s to connect, 20 s for each read. Every call
of a pass is one short request (get, create, apply, delete), so this is also its total: no API call can hold a pass
for more than about 25 s."""
FIELD_MANAGER: Final = "sglang-operator"
"""The field manager of every object and field the operator writes (server-side apply and creates)."""


def request_verb(method: str, url: str) -> str:
    """The Kubernetes verb of a request, as the API server's own metrics name it: a GET with `watch=true` is
    `watch`, GET of a collection is `list`, PATCH with an apply body is `apply` (told apart by the caller), the rest
    is the method. Pure."""
    method = method.upper()
    if method == "GET" and re.search(r"[?&]watch=(true|1)(&|$)", url, re.IGNORECASE):
        return "watch"
    if method == "GET":
        path = url.split("?", 1)[0].rstrip("/")
        # /api/v1/namespaces/ns/pods (a collection) vs /api/v1/namespaces/ns/pods/name (an object)
        parts = [p for p in path.split("/") if p]
        try:
            start = parts.index("namespaces") + 2 if "namespaces" in parts else (3 if parts[0] == "api" else 4)
        except (ValueError, IndexError):
            return "get"
        rest = parts[start:]
        return "list" if len(rest) == 1 else "get"
    return {"POST": "create", "PUT": "update", "DELETE": "delete", "PATCH": "patch"}.get(method, method.lower())


class CountingApiClient(client.ApiClient):  # type: ignore[misc]
    """The kubernetes client's ApiClient, counting each request by verb and HTTP status."""

    def call_api(self, method: str, url: str, header_params: Any = None, *args: Any, **kwargs: Any) -> Any:
        verb = request_verb(method, url)
        if verb == "patch" and "apply-patch" in str((header_params or {}).get("Content-Type", "")):
            verb = "apply"
        try:
            response = super().call_api(method, url, header_params, *args, **kwargs)
        except Exception:
            metrics.count_api_request(verb, "error")
            raise
        metrics.count_api_request(verb, getattr(response, "status", "error"))
        return response


@functools.cache
def api_client() -> client.ApiClient:
    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    configuration = client.Configuration.get_default_copy()
    configuration.socket_options = urllib3_socket_options()  # as recent clients do, whatever the version
    return CountingApiClient(configuration)


def as_plain(api: client.ApiClient, obj: Any) -> dict[str, Any]:
    """An object the client read, as JSON (a stand-in API in tests may hand back the dict itself)."""
    return obj if isinstance(obj, dict) else dict(api.sanitize_for_serialization(obj))
