"""A thin client for the smg router's worker API (`GET/POST /workers`, `DELETE /workers/{id}`).

Facts from shared/reference/smg-router.md: ids are UUIDs (a URL is not accepted as id, so removal goes through
`GET /workers`), POST of a known URL answers 409, changes are queued (202) and visible within about a second.
Only fetching and sending here; deciding what to add or remove is `membership.plan_membership`.
"""

from dataclasses import dataclass
from typing import Any

import requests

DEFAULT_TIMEOUT_SECONDS = 5.0


class RouterError(Exception):
    """The router could not be reached or answered something unexpected."""


@dataclass(frozen=True)
class RouterWorker:
    id: str
    url: str
    status: str
    healthy: bool


class RouterClient:
    def __init__(self, base_url: str, api_key: str | None = None, timeout: float = DEFAULT_TIMEOUT_SECONDS) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.session = requests.Session()
        if api_key:
            self.session.headers["Authorization"] = f"Bearer {api_key}"

    def _call(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        try:
            return self.session.request(method, f"{self.base_url}{path}", timeout=self.timeout, **kwargs)
        except requests.RequestException as exc:
            raise RouterError(f"{method} {self.base_url}{path}: {exc}") from exc

    def list_workers(self) -> list[RouterWorker]:
        response = self._call("GET", "/workers")
        if response.status_code != 200:
            raise RouterError(f"GET /workers on {self.base_url}: HTTP {response.status_code} {response.text[:200]}")
        return [
            RouterWorker(
                id=str(item["id"]),
                url=str(item["url"]),
                status=str(item.get("status", "")),
                healthy=bool(item.get("is_healthy", False)),
            )
            for item in response.json().get("workers", [])
        ]

    def add_worker(self, url: str) -> None:
        response = self._call("POST", "/workers", json={"url": url})
        if response.status_code not in (200, 201, 202, 409):  # 409: already there, which is what we want
            raise RouterError(
                f"POST /workers {url} on {self.base_url}: HTTP {response.status_code} {response.text[:200]}"
            )

    def remove_worker(self, worker_id: str) -> None:
        response = self._call("DELETE", f"/workers/{worker_id}")
        if response.status_code not in (200, 202, 204, 404):  # 404: already gone
            raise RouterError(f"DELETE /workers/{worker_id} on {self.base_url}: HTTP {response.status_code}")

    def close(self) -> None:
        self.session.close()
