"""The operator's own settings: what an admin allows every tenant's CR, never what a CR allows itself.

A tenant who may create an SGLangDeployment gets GPU fleets and nothing more. Whatever would widen that (a node
directory mounted into a worker, a Prometheus of the CR's choosing, the peers a fleet's NetworkPolicy admits) is set
here, by whoever installs the operator (`sglang-operator run` flags, the chart's values), and read by pure functions
as an argument. `run` puts the flags into the environment (`ENV_*`), so every process that the operator starts and
every handler reads one source; `load_settings` parses it once.
"""

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

ENV_ALLOWED_HOST_PATHS = "SGLANG_OPERATOR_ALLOWED_HOST_PATHS"
ENV_ALLOWED_PROMETHEUS_URLS = "SGLANG_OPERATOR_ALLOWED_PROMETHEUS_URLS"
ENV_OPERATOR_NAMESPACE = "SGLANG_OPERATOR_NAMESPACE"
ENV_OPERATOR_POD_LABELS = "SGLANG_OPERATOR_POD_LABELS"
ENV_PROMETHEUS_NAMESPACE_LABELS = "SGLANG_OPERATOR_PROMETHEUS_NAMESPACE_LABELS"
ENV_PROMETHEUS_POD_LABELS = "SGLANG_OPERATOR_PROMETHEUS_POD_LABELS"
ENV_ALLOW_PROMETHEUS_HEADERS_TO_DEFAULT = "SGLANG_OPERATOR_ALLOW_PROMETHEUS_HEADERS_TO_DEFAULT"


@dataclass(frozen=True)
class PodPolicy:
    """What a worker pod may carry beyond the operator's own pod. Empty: no node directory at all."""

    allowed_host_paths: tuple[str, ...] = ()
    """Node directories (and everything below them) that `model.cache.hostPath` may name, read-only."""

    def host_path_allowed(self, path: str) -> bool:
        normalized = os.path.normpath(path)
        if not path.startswith("/") or normalized != path.rstrip("/") or ".." in path.split("/"):
            return False
        return any(
            normalized == allowed.rstrip("/") or normalized.startswith(allowed.rstrip("/") + "/")
            for allowed in self.allowed_host_paths
        )


@dataclass(frozen=True)
class NetworkPeers:
    """Who a fleet's NetworkPolicy lets reach its workers besides the fleet's own routers: the operator (drain
    checks, registration) and Prometheus (scrapes). Unset selectors leave that peer out."""

    operator_namespace: str | None = None
    operator_pod_labels: Mapping[str, str] = field(default_factory=dict)
    prometheus_namespace_labels: Mapping[str, str] = field(default_factory=dict)
    prometheus_pod_labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class OperatorSettings:
    pod_policy: PodPolicy = field(default_factory=PodPolicy)
    allowed_prometheus_urls: tuple[str, ...] = ()
    """URL prefixes a CR's own `autoscaling.prometheusURL` may start with. Empty: only the operator's default."""
    network: NetworkPeers = field(default_factory=NetworkPeers)
    allow_prometheus_headers_to_default: bool = False
    """Whether a CR's `prometheusAuth.headers` (a tenant header such as X-Scope-OrgID) may go to the operator's own
    default Prometheus. Off by default: toward a shared multi-tenant Mimir, Cortex or Thanos, the operator's requests
    would read whichever tenant's series the CR names. An admin whose default Prometheus is single-tenant, or who
    means CRs to pick their tenant, turns it on (`--allow-prometheus-headers-to-default`)."""

    def prometheus_url_allowed(self, url: str) -> bool:
        return any(_url_under(url, prefix) for prefix in self.allowed_prometheus_urls)


def _url_under(url: str, prefix: str) -> bool:
    """`url` starts with `prefix` at a boundary: `http://prom:9090` allows `http://prom:9090/x`, not
    `http://prom:90901` or `http://prom:9090.evil`."""
    prefix = prefix.rstrip("/")
    return url == prefix or url.startswith(prefix + "/") or url.startswith(prefix + "?")


def _labels(text: str) -> dict[str, str]:
    """`k=v,k2=v2` -> a dict; blanks ignored."""
    pairs = (item.partition("=") for item in text.split(",") if item.strip())
    return {key.strip(): value.strip() for key, _, value in pairs}


def _items(text: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in text.split(",") if item.strip())


def load_settings(environ: Mapping[str, str] | None = None) -> OperatorSettings:
    env = os.environ if environ is None else environ
    return OperatorSettings(
        pod_policy=PodPolicy(allowed_host_paths=_items(env.get(ENV_ALLOWED_HOST_PATHS, ""))),
        allowed_prometheus_urls=_items(env.get(ENV_ALLOWED_PROMETHEUS_URLS, "")),
        allow_prometheus_headers_to_default=env.get(ENV_ALLOW_PROMETHEUS_HEADERS_TO_DEFAULT, "") == "true",
        network=NetworkPeers(
            operator_namespace=env.get(ENV_OPERATOR_NAMESPACE) or None,
            operator_pod_labels=_labels(env.get(ENV_OPERATOR_POD_LABELS, "")),
            prometheus_namespace_labels=_labels(env.get(ENV_PROMETHEUS_NAMESPACE_LABELS, "")),
            prometheus_pod_labels=_labels(env.get(ENV_PROMETHEUS_POD_LABELS, "")),
        ),
    )
