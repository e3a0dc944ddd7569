"""One Kubernetes API client per process, from the in-cluster service account or the kubeconfig."""

import functools

from kubernetes import client, config


@functools.cache
def api_client() -> client.ApiClient:
    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    return client.ApiClient()
