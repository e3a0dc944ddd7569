"""Hostile specs, round two (issue 29):
Prometheus URLs and headers, and other specs that steer the operator's HTTP calls.
"""

from __future__ import annotations

from tests.support.hostile.model import SCHEMA, Hostile, cr

_HEADERS = "spec.autoscaling.prometheusAuth.headers"
_ALLOWLIST = "must be one of"


def _header(name: str, value: str = "x") -> dict[str, object]:
    return cr({"autoscaling": {"prometheusAuth": {"headers": {name: value}}}})


# Gap 11: prometheusAuth.headers is an allowlist of tenant headers (X-Scope-OrgID, THANOS-TENANT). Every other name,
# in any case, is refused: the ones that change the request itself, the credentials, and the proxies' trust headers.
_NOT_TENANT_HEADERS = {
    "host": ("Host", "another virtual host behind a shared proxy"),
    "host-lower": ("host", "the same, in lower case"),
    "content-length": ("Content-Length", "a body length the request does not have: request smuggling"),
    "transfer-encoding": ("Transfer-Encoding", "chunked framing the request does not use: request smuggling"),
    "connection": ("Connection", "hop-by-hop control of the operator's pooled connections"),
    "cookie": ("Cookie", "a session of someone else's"),
    "proxy-authorization": ("Proxy-Authorization", "credentials for the proxy in front of Prometheus"),
    "authorization-mixed-case": ("aUtHoRiZaTiOn", "credentials outside Secrets, in a case the old rule missed too"),
    "x-forwarded-for": ("X-Forwarded-For", "a client address a proxy's allow-list trusts"),
    "x-real-ip": ("X-Real-IP", "the same, nginx's name"),
    "forwarded": ("Forwarded", "the same, RFC 7239's name"),
    "x-forwarded-host": ("X-Forwarded-Host", "another virtual host through the proxy"),
    "x-original-url": ("X-Original-URL", "another path than the one the operator asked for"),
    "x-auth-request-user": ("X-Auth-Request-User", "an identity an oauth2-proxy would have vouched for"),
    "x-scope-orgid-suffix": ("X-Scope-OrgID-Extra", "a name that only starts like a tenant header"),
    "x-scope-orgid-prefix": ("My-X-Scope-OrgID", "a name that only ends like a tenant header"),
    "x-grafana-org-id": ("X-Grafana-Org-Id", "another product's tenant header, not in the list"),
    "non-ascii-lookalike": ("X-Scope-OrgİD", "a non-ASCII letter that Python's lower() would fold"),
}

# fmt: off
CASES: list[Hostile] = [
    *(Hostile(f"prometheus-header-{key}", _header(name), _HEADERS, _ALLOWLIST, SCHEMA, why)
      for key, (name, why) in _NOT_TENANT_HEADERS.items()),
    Hostile("prometheus-header-tenant-and-host",
            cr({"autoscaling": {"prometheusAuth": {"headers": {"X-Scope-OrgID": "team-a", "Host": "mimir-admin"}}}}),
            _HEADERS, _ALLOWLIST, SCHEMA, "one allowed header does not carry another"),
]
# fmt: on
