"""A thin client for the smg router's worker API (`GET/POST /workers`, `DELETE /workers/{id}`).

A worker is registered with its type: `regular` in a colocated fleet, `prefill` (with the port of its bootstrap
server) or `decode` in a prefill/decode one (shared/reference/pd.md: smg checks neither, and PATCH of either answers
202 and changes nothing, so a wrong entry is removed and registered again: `membership.plan_membership`).

Facts from shared/reference/smg-router.md: ids are UUIDs (a URL is not accepted as id, so removal goes through
`GET /workers`), POST of a known URL answers 409, changes are queued (202) and visible within about a second.
Only fetching and sending here; deciding what to add or remove is `membership.plan_membership`.

Every call ends within `timeout` seconds in total and follows no redirect (`httpcall.request`: the router's image is
the tenant's, and a redirect would carry the workers' API key in a registration body to a target of its choice), and
an answer of any other shape than the documented one is a `RouterError`, never another exception: the pass then
reports the router as unknown. Error messages name the method, the path and the HTTP status, never the router's
words.
"""

import json
from dataclasses import dataclass
from typing import Any, Final, Literal
from urllib.parse import quote

from ..runtime.httpcall import CallFailed, Response, request

DEFAULT_TIMEOUT_SECONDS = 5.0
MAX_WORKERS_LISTED = 10_000
"""More entries than any fleet registers: a longer list is not a worker list."""
_MAX_FIELD_CHARS = 2048
_MAX_TYPE_CHARS = 64

WorkerType = Literal["regular", "prefill", "decode"]
"""The types the operator registers (smg's `worker_type`). A list may show others (`encode`): no desired entry
matches them, so they are removed."""
REGULAR: Final = "regular"


class RouterError(Exception):
    """The router could not be reached or answered something unexpected."""


@dataclass(frozen=True)
class RouterWorker:
    id: str
    url: str
    status: str
    healthy: bool
    worker_type: str = REGULAR
    bootstrap_port: int | None = None
    """The prefill's bootstrap port smg hands decode servers (None: smg sends `"bootstrap_port": null`)."""


WORKER_RUNTIME: Final = "sglang"
"""Every worker the operator registers is an SGLang server (smg's `runtime_type`)."""


def _worker_type(item: dict[str, Any], position: int) -> str:
    """An entry's `worker_type` (absent: `regular`, as older routers list every worker); ValueError if not a name."""
    value = item.get("worker_type", REGULAR)
    if not isinstance(value, str) or not value or len(value) > _MAX_TYPE_CHARS:
        raise ValueError(f"entry {position} has no usable 'worker_type'")
    return value


def _bootstrap_port(item: dict[str, Any], position: int) -> int | None:
    """An entry's `bootstrap_port`: absent or null is None, else a TCP port; ValueError otherwise."""
    value = item.get("bootstrap_port")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 65536:
        raise ValueError(f"entry {position} has no usable 'bootstrap_port'")
    return value


def parse_workers(payload: Any) -> list[RouterWorker]:
    """The entries of a `GET /workers` answer; ValueError (naming what is wrong, not quoting it) otherwise."""
    if not isinstance(payload, dict):
        raise ValueError(f"expected an object, got {type(payload).__name__}")
    items = payload.get("workers", [])
    if not isinstance(items, list):
        raise ValueError(f"'workers' is {type(items).__name__}, not a list")
    if len(items) > MAX_WORKERS_LISTED:
        raise ValueError(f"{len(items)} workers listed, more than {MAX_WORKERS_LISTED}")
    workers = []
    for position, item in enumerate(items):
        if not isinstance(item, dict):
            raise ValueError(f"entry {position} is {type(item).__name__}, not an object")
        identity, url = item.get("id"), item.get("url")
        if not isinstance(identity, str) or not identity or len(identity) > _MAX_FIELD_CHARS:
            raise ValueError(f"entry {position} has no usable 'id'")
        if not isinstance(url, str) or not url or len(url) > _MAX_FIELD_CHARS:
            raise ValueError(f"entry {position} has no usable 'url'")
        status = item.get("status", "")
        workers.append(
            RouterWorker(
                id=identity,
                url=url,
                status=status if isinstance(status, str) else "",
                healthy=item.get("is_healthy") is True,
                worker_type=_worker_type(item, position),
                bootstrap_port=_bootstrap_port(item, position),
            )
        )
    return workers


class RouterClient:
    def __init__(self, base_url: str, api_key: str | None = None, timeout: float = DEFAULT_TIMEOUT_SECONDS) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}

    def _call(self, method: str, path: str, json_body: Any = None) -> Response:
        try:
            return request(
                method, f"{self.base_url}{path}", deadline_seconds=self.timeout, headers=self.headers,
                json_body=json_body,
            )  # fmt: skip
        except CallFailed as exc:
            raise RouterError(str(exc)) from exc

    def list_workers(self) -> list[RouterWorker]:
        response = self._call("GET", "/workers")
        if response.status != 200:
            raise RouterError(f"GET {self.base_url}/workers: HTTP {response.status}")
        try:
            return parse_workers(json.loads(response.content))
        except (ValueError, RecursionError) as exc:  # not JSON, 1e400 and friends, or not the documented shape
            why = (
                "not JSON" if isinstance(exc, json.JSONDecodeError | UnicodeDecodeError | RecursionError) else str(exc)
            )
            raise RouterError(f"GET {self.base_url}/workers: HTTP 200 with an unexpected answer ({why})") from exc

    def add_worker(
        self,
        url: str,
        worker_api_key: str | None = None,
        worker_type: WorkerType = REGULAR,
        bootstrap_port: int | None = None,
    ) -> None:
        """Register `url`; with the workers' API key, which the router then sends to that worker.

        `worker_type` and `bootstrap_port` are sent for a prefill/decode worker only (a regular worker's body is
        what it always was): smg hands the prefill's port to the decode server it pairs it with.

        `drain_settle_secs: 0`: the operator drains a replica itself (off every router first, then until its
        `/v1/loads` show nothing in flight), so smg's own settle step (5 s, listing the removed worker as `draining`)
        only adds a window in which smg 1.13.0 answers 503: while a removed worker is still listed, its overload
        fallback does not apply, and a burst that vetoes every other worker finds "no available workers".

        `runtime` says what smg would otherwise find out by probing: it skips its classification step, one
        `GET /health`, which SGLang answers only after a one-token generation (about 1 s). That halves the time from
        this call to the worker being routable (docs/registration.md)."""
        body: dict[str, Any] = {"url": url, "runtime": WORKER_RUNTIME, "health": {"drain_settle_secs": 0}}
        if worker_api_key:
            body["api_key"] = worker_api_key
        if worker_type != REGULAR:
            body["worker_type"] = worker_type
        if bootstrap_port is not None:
            body["bootstrap_port"] = bootstrap_port
        response = self._call("POST", "/workers", json_body=body)
        if response.status not in (200, 201, 202, 409):  # 409: already there, which is what we want
            raise RouterError(f"POST {self.base_url}/workers {url}: HTTP {response.status}")

    def remove_worker(self, worker_id: str) -> None:
        response = self._call("DELETE", f"/workers/{quote(worker_id, safe='')}")
        if response.status not in (200, 202, 204, 404):  # 404: already gone
            raise RouterError(f"DELETE {self.base_url}/workers/<id>: HTTP {response.status}")  # the id is the router's

    def close(self) -> None:
        """Nothing to release: connections belong to `httpcall`'s shared pool (kept for callers' `finally`)."""
