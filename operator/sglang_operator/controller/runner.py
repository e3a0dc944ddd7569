"""`sglang-operator run`: start kopf with this package's handlers."""

import asyncio
import logging
import os

import kopf


def operator_environment(
    prometheus_url: str | None = None,
    prometheus_token_file: str | None = None,
    prometheus_ca_file: str | None = None,
    allowed_prometheus_urls: list[str] | None = None,
    allowed_host_paths: list[str] | None = None,
    operator_namespace: str | None = None,
    operator_pod_labels: str | None = None,
    prometheus_namespace_labels: str | None = None,
    prometheus_pod_labels: str | None = None,
) -> dict[str, str]:
    """The environment variables `run` sets from its flags, read by `settings.load_settings` and the autoscaler.
    Pure; only the flags given appear (the chart may set the variables itself)."""
    from ..autoscaling.credentials import CA_FILE_ENV, TOKEN_FILE_ENV
    from ..autoscaling.loop import PROMETHEUS_URL_ENV
    from ..settings import (
        ENV_ALLOWED_HOST_PATHS,
        ENV_ALLOWED_PROMETHEUS_URLS,
        ENV_OPERATOR_NAMESPACE,
        ENV_OPERATOR_POD_LABELS,
        ENV_PROMETHEUS_NAMESPACE_LABELS,
        ENV_PROMETHEUS_POD_LABELS,
    )

    values = {
        PROMETHEUS_URL_ENV: prometheus_url,
        TOKEN_FILE_ENV: prometheus_token_file,
        CA_FILE_ENV: prometheus_ca_file,
        ENV_ALLOWED_PROMETHEUS_URLS: ",".join(allowed_prometheus_urls or []),
        ENV_ALLOWED_HOST_PATHS: ",".join(allowed_host_paths or []),
        ENV_OPERATOR_NAMESPACE: operator_namespace,
        ENV_OPERATOR_POD_LABELS: operator_pod_labels,
        ENV_PROMETHEUS_NAMESPACE_LABELS: prometheus_namespace_labels,
        ENV_PROMETHEUS_POD_LABELS: prometheus_pod_labels,
    }
    return {env: value for env, value in values.items() if value}


def run_operator(
    namespaces: list[str],
    prometheus_url: str | None,
    verbose: bool,
    liveness: str | None = None,
    prometheus_token_file: str | None = None,
    prometheus_ca_file: str | None = None,
    allowed_prometheus_urls: list[str] | None = None,
    allowed_host_paths: list[str] | None = None,
    operator_namespace: str | None = None,
    operator_pod_labels: str | None = None,
    prometheus_namespace_labels: str | None = None,
    prometheus_pod_labels: str | None = None,
) -> int:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, format="%(asctime)s %(name)s %(message)s")
    os.environ.update(
        operator_environment(
            prometheus_url, prometheus_token_file, prometheus_ca_file, allowed_prometheus_urls, allowed_host_paths,
            operator_namespace, operator_pod_labels, prometheus_namespace_labels, prometheus_pod_labels,
        )
    )  # fmt: skip
    from ..autoscaling import daemon  # noqa: F401  (registers the autoscaler)
    from . import handlers  # noqa: F401  (registers the handlers)

    asyncio.run(
        kopf.operator(
            clusterwide=not namespaces,
            namespaces=namespaces,
            standalone=True,
            liveness_endpoint=liveness,
        )
    )
    return 0
