"""Which Prometheus a CR is read from, with which credentials, under the operator's settings: the one gate the
autoscaler and the fleet doctor both pass, so both obey the same allow-list, header rule and credentials.
"""

from urllib.parse import urlsplit

from kubernetes import client

from ..api.spec import AutoscalingSpec, PrometheusAuth
from ..settings import OperatorSettings
from .client import Credentials
from .credentials import operator_credentials, resolve_credentials


def prometheus_access(
    core: client.CoreV1Api, namespace: str, autoscaling: AutoscalingSpec, settings: OperatorSettings
) -> tuple[str | None, Credentials | None, str | None]:
    """(url, credentials, None) of the Prometheus a CR is read from, or (None, None, why not); the autoscaler and
    the fleet doctor both read through it, so both obey the same allow-list and credentials."""
    url = autoscaling.prometheus_url or settings.default_prometheus.url
    if not url:
        return None, None, "no Prometheus URL: set spec.autoscaling.prometheusURL or --prometheus-url"
    if why := default_prometheus_headers_refused(autoscaling, settings):
        return None, None, why  # before any Secret is read or any request sent
    if autoscaling.prometheus_url and not prometheus_url_allowed(autoscaling.prometheus_url, settings):
        # Checked before anything is read or sent: no request to that URL, no Secret of prometheusAuth read.
        why = (
            f"prometheusURL {autoscaling.prometheus_url[:200]!r} is not allowed by the operator's settings "
            "(--allow-prometheus-url)"
        )
        return None, None, why
    if autoscaling.prometheus_url or autoscaling.prometheus_auth != PrometheusAuth():
        credentials, error = resolve_credentials(core, namespace, autoscaling.prometheus_auth)
    else:
        own = settings.default_prometheus
        credentials, error = operator_credentials(own.token_file, own.ca_file)
    return (url, credentials, None) if credentials is not None else (None, None, error)


def default_prometheus_headers_refused(autoscaling: AutoscalingSpec, settings: OperatorSettings) -> str | None:
    """Why a CR's tenant headers may not go to the operator's own default Prometheus, or None. That Prometheus is
    the admin's, often a multi-tenant Mimir, Cortex or Thanos shared by every team: an `X-Scope-OrgID` of the
    tenant's choice there would read another team's series into this CR's status. A CR's own prometheusURL gets
    its headers (the URL is under a prefix the admin allowed); the default one only with
    `--allow-prometheus-headers-to-default`. Pure."""
    if autoscaling.prometheus_url or not autoscaling.prometheus_auth.headers:
        return None
    if settings.allow_prometheus_headers_to_default:
        return None
    return (
        "spec.autoscaling.prometheusAuth.headers: not sent to the operator's default Prometheus, whose settings do "
        "not allow tenant headers (--allow-prometheus-headers-to-default); remove the headers, or set "
        "spec.autoscaling.prometheusURL to a Prometheus the operator allows"
    )


def prometheus_url_allowed(url: str, settings: OperatorSettings) -> bool:
    """A CR's own Prometheus URL: http or https only, under a prefix the operator's admin allowed. Pure."""
    return urlsplit(url).scheme in ("http", "https") and settings.prometheus_url_allowed(url)
