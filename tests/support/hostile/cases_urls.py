"""Hostile specs, round two (issue 29, gap 2): Prometheus URLs under an allowed prefix that still steer the query,
and host paths that leave an allowed directory. Refused by the operator's settings (`POLICY`): by
`OperatorSettings.prometheus_url_allowed` / `PodPolicy.host_path_allowed` at reconcile and in `validate`, and by the
chart's ValidatingAdmissionPolicy at admission (`e2e/tests/test_admission_policy.py`).

`URLS` and `HOST_PATHS` are the tables both readings must agree on: the operator's (settings.py) and the admission
policy's CEL, under `ALLOWED_URLS` and `ALLOWED_HOST_PATHS`.
"""

from __future__ import annotations

from tests.support.hostile.model import POLICY, SCHEMA, Hostile, cr

ALLOWED_URLS = ("http://prometheus.monitoring.svc:9090", "https://mimir.example/prometheus/team-a/")
ALLOWED_HOST_PATHS = ("/models", "/mnt/cache/")

_PROM = "http://prometheus.monitoring.svc:9090"
_MIMIR = "https://mimir.example/prometheus/team-a"

# (url, allowed under ALLOWED_URLS, why)
URLS: list[tuple[str, bool, str]] = [
    (_PROM, True, "the prefix itself"),
    (_PROM + "/", True, "a trailing slash"),
    (_PROM + "/api/v1", True, "a path below it"),
    ("http://Prometheus.Monitoring.SVC:9090", True, "the host compares lower-case"),
    ("http://prometheus.monitoring.svc.:9090", True, "a trailing dot: the same DNS name"),
    (_MIMIR, True, "the per-team prefix without its slash"),
    ("https://mimir.example:443/prometheus/team-a/x", True, "the default port written out"),
    (_PROM + "?query=up", False, "a query: Prometheus runs the tenant's PromQL"),
    (_PROM + "/api/v1/query?query=up&", False, "a query that swallows the operator's own"),
    (_PROM + "/#", False, "a fragment cuts the operator's path off"),
    (_PROM + "@evil.example", False, "userinfo: the host is evil.example"),
    ("http://user:pw@prometheus.monitoring.svc:9090", False, "credentials in the URL"),
    ("http://prometheus.monitoring.svc:90901", False, "another port that starts alike"),
    ("http://prometheus.monitoring.svc:9090.evil.example", False, "another host that starts alike"),
    ("https://prometheus.monitoring.svc:9090", False, "another scheme"),
    ("http://prometheus.monitoring.svc", False, "port 80, not 9090"),
    (_MIMIR + "/../team-b", False, "a dot segment out of the team's prefix"),
    (_MIMIR + "/./x", False, "a dot segment"),
    (_MIMIR + "/%2e%2e/team-b", False, "an encoded dot segment"),
    (_MIMIR + "%2f..%2fteam-b", False, "an encoded slash"),
    (_MIMIR + "/%74eam", False, "any percent-encoding"),
    (_MIMIR + "\\..\\team-b", False, "backslashes some servers read as slashes"),
    ("https://mimir.example/prometheus/team-ab", False, "a segment that starts alike"),
    ("https://mimir.example/prometheus//team-a", False, "an empty segment"),
    ("https://mimir.example/prometheus", False, "above the prefix"),
    ("http://[::1]:9090", False, "an IPv6 literal not allowed"),
    ("ftp://prometheus.monitoring.svc:9090", False, "not http"),
]

# (path, allowed under ALLOWED_HOST_PATHS, why)
HOST_PATHS: list[tuple[str, bool, str]] = [
    ("/models", True, "the directory itself"),
    ("/models/", True, "a trailing slash"),
    ("/models/llama", True, "below it"),
    ("/mnt/cache", True, "an allowed path written with a slash"),
    ("/mnt/cache/hf/hub", True, "deeper below"),
    ("/models2", False, "a sibling that starts alike"),
    ("/models/../etc", False, "a dot-dot segment"),
    ("/models/./x", False, "a dot segment"),
    ("/models//x", False, "an empty segment"),
    ("//models", False, "a double slash"),
    ("/mnt", False, "above the allowed directory"),
    ("/", False, "the node's root"),
    ("models", False, "a relative path"),
]

_PLAIN = "must be a Prometheus base URL without a query (?), a fragment (#), user info (@) or a backslash"

# fmt: off
CASES: list[Hostile] = [
    # the schema's rule (validation.PROMETHEUS_URL_PLAIN, with its CEL twin): no base URL needs these
    *(Hostile(f"prometheus-url-{name}", cr({"autoscaling": {"prometheusURL": url}}), "spec.autoscaling.prometheusURL",
              _PLAIN, SCHEMA, why)
      for name, url, why in [
          ("query", _PROM + "/?query=up", "Prometheus runs the tenant's PromQL; the result lands in status"),
          ("query-swallows-ours", _PROM + "/api/v1/query?query=up&x=", "the operator's own query becomes a parameter"),
          ("empty-query", _PROM + "/?", "a query, however empty"),
          ("fragment", _PROM + "/#", "the operator's path becomes a fragment, never sent"),
          ("fragment-in-path", _MIMIR + "#/x", "the per-team path cut off"),
          ("userinfo-in-path", _PROM + "/@evil.example", "a host after '@' to a lenient parser"),
          ("backslash", _MIMIR + "\\..\\team-b", "a path some servers read with slashes"),
      ]),
    # the operator's settings (settings.parse_base_url), under ALLOWED_URLS: the POLICY cases below
    *(Hostile(f"prometheus-url-under-prefix-{i}", cr({"autoscaling": {"prometheusURL": url}}),
              "spec.autoscaling.prometheusURL", "is not a Prometheus the operator allows", POLICY, why,
              allowed_prometheus_urls=ALLOWED_URLS)
      for i, (url, allowed, why) in enumerate(URLS)
      if not allowed and url.startswith("http") and not any(c in url for c in "?#@\\")),  # else the schema refuses
    *(Hostile(f"host-path-under-allowed-{i}",
              cr({"model": {"cache": {"type": "hostPath", "hostPath": path}}}), "spec.model.cache.hostPath",
              "is not under a node directory the operator allows", POLICY, why, allowed_host_paths=ALLOWED_HOST_PATHS)
      for i, (path, allowed, why) in enumerate(HOST_PATHS) if not allowed and path.startswith("/")),
]
# fmt: on
