"""The operator's own settings: what an admin allows every tenant's CR, never what a CR allows itself.

A tenant who may create an SGLangDeployment gets GPU fleets and nothing more. Whatever would widen that (a node
directory mounted into a worker, a Prometheus of the CR's choosing, the peers a fleet's NetworkPolicy admits) is set
here, by whoever installs the operator (`sglang-operator run` flags, the chart's values), and read by pure functions
as an argument. `run` builds one `OperatorSettings` at start, from its flags over the process's environment (`ENV_*`,
which the chart's `extraEnv` may set), and hands it down explicitly: nothing below the entry point reads the
environment.
"""

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from .api.spec import EXTENDED_RESOURCE

ENV_ALLOWED_HOST_PATHS = "SGLANG_OPERATOR_ALLOWED_HOST_PATHS"
ENV_RDMA_RESOURCE = "SGLANG_OPERATOR_RDMA_RESOURCE"
ENV_ALLOWED_PROMETHEUS_URLS = "SGLANG_OPERATOR_ALLOWED_PROMETHEUS_URLS"
ENV_OPERATOR_NAMESPACE = "SGLANG_OPERATOR_NAMESPACE"
ENV_OPERATOR_POD_LABELS = "SGLANG_OPERATOR_POD_LABELS"
ENV_PROMETHEUS_NAMESPACE_LABELS = "SGLANG_OPERATOR_PROMETHEUS_NAMESPACE_LABELS"
ENV_PROMETHEUS_POD_LABELS = "SGLANG_OPERATOR_PROMETHEUS_POD_LABELS"
ENV_ALLOW_PROMETHEUS_HEADERS_TO_DEFAULT = "SGLANG_OPERATOR_ALLOW_PROMETHEUS_HEADERS_TO_DEFAULT"
ENV_PROMETHEUS_URL = "SGLANG_OPERATOR_PROMETHEUS_URL"
ENV_PROMETHEUS_TOKEN_FILE = "SGLANG_OPERATOR_PROMETHEUS_TOKEN_FILE"
ENV_PROMETHEUS_CA_FILE = "SGLANG_OPERATOR_PROMETHEUS_CA_FILE"
ENV_WORKERS = "SGLANG_OPERATOR_WORKERS"
ENV_RESYNC_SECONDS = "SGLANG_OPERATOR_RESYNC_SECONDS"
DEFAULT_WORKERS = 8
DEFAULT_RESYNC_SECONDS = 5.0


@dataclass(frozen=True)
class PodPolicy:
    """What a worker pod may carry beyond the operator's own pod. Empty: no node directory at all."""

    allowed_host_paths: tuple[str, ...] = ()
    """Node directories (and everything below them) that `model.cache.hostPath` may name, read-only."""
    rdma_resource: str | None = None
    """The RDMA device plugin's extended resource (e.g. `rdma/rdma_shared_device_a`): a prefill/decode worker whose
    KV moves over RDMA asks for one and gets IPC_LOCK. None: no worker gets either (KV then needs a TCP backend
    or a cluster where RDMA needs no device resource)."""

    def host_path_allowed(self, path: str) -> bool:
        """`path` is an absolute node directory under one of `allowed_host_paths`, compared segment by segment: no
        empty, `.` or `..` segment (what the kubelet would resolve elsewhere), `/models` allows `/models/x`, not
        `/models2`. The chart's admission policy compares the same way (`templates/admission-policy.yaml`)."""
        segments = _path_segments(path)
        return segments is not None and any(
            (allowed_segments := _path_segments(allowed)) is not None
            and segments[: len(allowed_segments)] == allowed_segments
            for allowed in self.allowed_host_paths
        )


def _path_segments(path: str) -> tuple[str, ...] | None:
    """The segments of an absolute path (a trailing `/` ignored), or None where one is empty, `.` or `..`."""
    if not path.startswith("/") or "//" in path:
        return None
    segments = tuple(path[1:].removesuffix("/").split("/")) if path.strip("/") else ()
    return None if any(s in ("", ".", "..") for s in segments) else segments


@dataclass(frozen=True)
class NetworkPeers:
    """Who a fleet's NetworkPolicy lets reach its workers besides the fleet's own routers: the operator (drain
    checks, registration) and Prometheus (scrapes). Unset selectors leave that peer out."""

    operator_namespace: str | None = None
    operator_pod_labels: Mapping[str, str] = field(default_factory=dict)
    prometheus_namespace_labels: Mapping[str, str] = field(default_factory=dict)
    prometheus_pod_labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class DefaultPrometheus:
    """The operator's own Prometheus: read for every CR that names no `autoscaling.prometheusURL`, with the
    operator's own credentials (a bearer token file, a CA bundle) unless the CR names `prometheusAuth`."""

    url: str | None = None
    token_file: str | None = None
    ca_file: str | None = None


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
    default_prometheus: DefaultPrometheus = field(default_factory=DefaultPrometheus)
    workers: int = DEFAULT_WORKERS
    """Threads of the one pool every pass runs in (`runtime.workqueue`), whatever the number of CRs: 1..256."""
    resync_seconds: float = DEFAULT_RESYNC_SECONDS
    """Seconds between passes of a CR when nothing wakes it: 1..3600."""

    def prometheus_url_allowed(self, url: str) -> bool:
        """`url` is a plain Prometheus base URL under one of `allowed_prometheus_urls` (`_url_under`)."""
        return any(_url_under(url, prefix) for prefix in self.allowed_prometheus_urls)


@dataclass(frozen=True)
class BaseURL:
    """An http(s) URL reduced to what decides where a request goes: compared part by part, never as text."""

    scheme: str
    host: str
    port: int
    segments: tuple[str, ...]


_DEFAULT_PORTS = {"http": 80, "https": 443}


def parse_base_url(url: str) -> BaseURL | None:
    """`url` as a Prometheus base URL, or None where it is not a plain one: not http(s); a query (`?query=...&`
    would make Prometheus run the tenant's PromQL), a fragment (`#` would cut the operator's own path off), user
    info (`http://allowed@evil`), a backslash, `%` (`%2e%2e`, `%2f`: a server that decodes them sees another path
    than the one compared), whitespace or anything but printable ASCII; an empty, `.` or `..` path segment (a
    server resolves `a/../b` to `b`). The scheme and host are compared lower-case, the host without a trailing
    dot (the same name to DNS), an IP literal as written, the port as a number (80 and 443 by default). The
    chart's admission policy reads URLs the same way (`templates/admission-policy.yaml`), so a URL it admits is
    one the operator queries."""
    if not url.isascii() or any(c in url for c in "\\?#@%") or any(not c.isprintable() or c.isspace() for c in url):
        return None
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").removesuffix(".")
    if scheme not in _DEFAULT_PORTS or not host or "//" in parts.path:
        return None
    segments = tuple(segment for segment in parts.path.split("/") if segment)
    if any(segment in (".", "..") for segment in segments):
        return None
    return BaseURL(scheme, host, port if port is not None else _DEFAULT_PORTS[scheme], segments)


def _url_under(url: str, prefix: str) -> bool:
    """`url` is under `prefix`: the same scheme, host and port, and the prefix's path segments first, each whole
    (`http://prom:9090/team-a` allows `http://prom:9090/team-a/x`, not `.../team-ab` nor `.../team-a/../team-b`,
    and `http://prom:9090` not `http://prom:90901` or `http://prom:9090.evil`). Both are parsed by
    `parse_base_url`; either one that is not a plain base URL allows nothing."""
    parsed, base = parse_base_url(url), parse_base_url(prefix)
    if parsed is None or base is None:
        return False
    same_origin = (parsed.scheme, parsed.host, parsed.port) == (base.scheme, base.host, base.port)
    return same_origin and parsed.segments[: len(base.segments)] == base.segments


def _labels(text: str) -> dict[str, str]:
    """`k=v,k2=v2` -> a dict; blanks ignored."""
    pairs = (item.partition("=") for item in text.split(",") if item.strip())
    return {key.strip(): value.strip() for key, _, value in pairs}


def _items(text: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in text.split(",") if item.strip())


def _extended_resource(text: str) -> str | None:
    """An extended resource name (`vendor/name`), None when absent or malformed (it would make every PD pod
    unschedulable or invalid)."""
    return text if re.fullmatch(EXTENDED_RESOURCE, text) else None


def _bounded(text: str | None, default: float, low: float, high: float) -> float:
    """A number from a variable, clamped to [low, high]; the default when absent, not a number or NaN."""
    try:
        value = float(text) if text else default
    except ValueError:
        return default
    return float(min(max(value, low), high)) if value == value else default


def operator_environment(
    prometheus_url: str | None = None,
    prometheus_token_file: str | None = None,
    prometheus_ca_file: str | None = None,
    allowed_prometheus_urls: list[str] | None = None,
    allowed_host_paths: list[str] | None = None,
    rdma_resource: str | None = None,
    operator_namespace: str | None = None,
    operator_pod_labels: str | None = None,
    prometheus_namespace_labels: str | None = None,
    prometheus_pod_labels: str | None = None,
    allow_prometheus_headers_to_default: bool = False,
    workers: int | None = None,
    resync_seconds: float | None = None,
) -> dict[str, str]:
    """`run`'s flags as the variables they override (`ENV_*`): only the flags given appear, so a variable the chart
    sets stays where no flag is given. Pure."""
    values = {
        ENV_PROMETHEUS_URL: prometheus_url,
        ENV_PROMETHEUS_TOKEN_FILE: prometheus_token_file,
        ENV_PROMETHEUS_CA_FILE: prometheus_ca_file,
        ENV_ALLOWED_PROMETHEUS_URLS: ",".join(allowed_prometheus_urls or []),
        ENV_ALLOWED_HOST_PATHS: ",".join(allowed_host_paths or []),
        ENV_RDMA_RESOURCE: rdma_resource,
        ENV_OPERATOR_NAMESPACE: operator_namespace,
        ENV_OPERATOR_POD_LABELS: operator_pod_labels,
        ENV_PROMETHEUS_NAMESPACE_LABELS: prometheus_namespace_labels,
        ENV_PROMETHEUS_POD_LABELS: prometheus_pod_labels,
        ENV_ALLOW_PROMETHEUS_HEADERS_TO_DEFAULT: "true" if allow_prometheus_headers_to_default else None,
        ENV_WORKERS: None if workers is None else str(workers),
        ENV_RESYNC_SECONDS: None if resync_seconds is None else str(resync_seconds),
    }
    return {env: value for env, value in values.items() if value}


def load_settings(env: Mapping[str, str]) -> OperatorSettings:
    """The settings from variables (`ENV_*`: the environment with `run`'s flags over it). Pure."""
    return OperatorSettings(
        pod_policy=PodPolicy(
            allowed_host_paths=_items(env.get(ENV_ALLOWED_HOST_PATHS, "")),
            rdma_resource=_extended_resource(env.get(ENV_RDMA_RESOURCE, "")),
        ),
        allowed_prometheus_urls=_items(env.get(ENV_ALLOWED_PROMETHEUS_URLS, "")),
        allow_prometheus_headers_to_default=env.get(ENV_ALLOW_PROMETHEUS_HEADERS_TO_DEFAULT, "") == "true",
        network=NetworkPeers(
            operator_namespace=env.get(ENV_OPERATOR_NAMESPACE) or None,
            operator_pod_labels=_labels(env.get(ENV_OPERATOR_POD_LABELS, "")),
            prometheus_namespace_labels=_labels(env.get(ENV_PROMETHEUS_NAMESPACE_LABELS, "")),
            prometheus_pod_labels=_labels(env.get(ENV_PROMETHEUS_POD_LABELS, "")),
        ),
        default_prometheus=DefaultPrometheus(
            url=env.get(ENV_PROMETHEUS_URL) or None,
            token_file=env.get(ENV_PROMETHEUS_TOKEN_FILE) or None,
            ca_file=env.get(ENV_PROMETHEUS_CA_FILE) or None,
        ),
        workers=int(_bounded(env.get(ENV_WORKERS), DEFAULT_WORKERS, 1, 256)),
        resync_seconds=_bounded(env.get(ENV_RESYNC_SECONDS), DEFAULT_RESYNC_SECONDS, 1.0, 3600.0),
    )
