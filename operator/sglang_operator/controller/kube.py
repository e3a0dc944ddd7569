"""One Kubernetes API client per process, from the in-cluster service account or the kubeconfig."""

import functools
from typing import Final

from kubernetes import client, config

API_TIMEOUT: Final = (5.0, 20.0)
"""`_request_timeout` of every Kubernetes call the operator makes: 5 s to connect, 20 s for each read. Every call
of a pass is one short request (get, list of one CR's pods, create, patch), so this is also its total: no API call
can hold a pass for more than about 25 s."""


@functools.cache
def api_client() -> client.ApiClient:
    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    return client.ApiClient()
