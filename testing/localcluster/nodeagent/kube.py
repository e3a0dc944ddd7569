"""The agent's connection to the apiserver: the async Kubernetes client, objects as plain dicts.

Calls go through the generated `*_without_preload_content` methods and are decoded here, so the agent works
on the same camelCase dicts the API serves (no model round trips) and every error carries the API's message.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any
from urllib.parse import urlparse

import aiohttp
from kubernetes.aio import client, config

log = logging.getLogger(__name__)
MERGE_PATCH = "application/merge-patch+json"
WATCH_TIMEOUT_S = 240
Obj = dict[str, Any]


class ApiError(Exception):
    def __init__(self, status: int, body: str) -> None:
        self.status = status
        self.body = body
        try:
            message = json.loads(body).get("message", body)
        except (ValueError, AttributeError):
            message = body
        super().__init__(f"{status}: {message}")


async def decode(call: Awaitable[aiohttp.ClientResponse]) -> Obj:
    response = await call
    try:
        body = await response.read()
    finally:
        response.release()
    if response.status >= 400:
        raise ApiError(response.status, body.decode(errors="replace"))
    return json.loads(body) if body else {}


class Kube:
    """Typed API groups of one client plus where the apiserver listens."""

    def __init__(self, api: client.ApiClient) -> None:
        self.api = api
        self.core = client.CoreV1Api(api)
        self.coordination = client.CoordinationV1Api(api)
        url = urlparse(api.configuration.host)
        self.host = url.hostname or "127.0.0.1"
        self.port = url.port or 443

    @classmethod
    async def connect(cls, kubeconfig: str) -> Kube:
        configuration = client.Configuration()
        await config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
        configuration.connection_pool_maxsize = 16
        return cls(client.ApiClient(configuration))

    async def close(self) -> None:
        await self.api.close()

    async def version(self) -> str:
        info = await decode(client.VersionApi(self.api).get_code_without_preload_content())
        return str(info.get("gitVersion", "v0.0.0"))

    async def get_or_none(self, call: Callable[[], Awaitable[aiohttp.ClientResponse]]) -> Obj | None:
        try:
            return await decode(call())
        except ApiError as err:
            if err.status == 404:
                return None
            raise


async def _lines(response: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
    """Newline-delimited watch events of any length (aiohttp's line iterator caps lines at 64 KiB)."""
    buffer = b""
    async for chunk in response.content.iter_any():
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            if line.strip():
                yield line
    if buffer.strip():
        yield buffer


async def watch_pods(kube: Kube, field_selector: str) -> AsyncIterator[tuple[str, Obj]]:
    """List, then watch, forever: yields ("SYNC", podList) after each (re)list, then watch events.

    A 410 Gone (history compacted) or a broken stream relists; consumers treat SYNC as the full truth.
    """
    core = kube.core
    while True:
        try:
            listing = await decode(
                core.list_pod_for_all_namespaces_without_preload_content(field_selector=field_selector)
            )
            version = listing.get("metadata", {}).get("resourceVersion", "")
            yield "SYNC", listing
            while True:
                response = await core.list_pod_for_all_namespaces_without_preload_content(
                    field_selector=field_selector,
                    watch=True,
                    resource_version=version,
                    allow_watch_bookmarks=True,
                    timeout_seconds=WATCH_TIMEOUT_S,
                    _request_timeout=WATCH_TIMEOUT_S + 30,
                )
                try:
                    if response.status >= 400:
                        raise ApiError(response.status, (await response.read()).decode(errors="replace"))
                    async for line in _lines(response):
                        event = json.loads(line)
                        kind, obj = event.get("type", ""), event.get("object") or {}
                        if kind == "ERROR":
                            raise ApiError(int(obj.get("code", 500)), json.dumps(obj))
                        version = obj.get("metadata", {}).get("resourceVersion", version)
                        if kind != "BOOKMARK":
                            yield kind, obj
                finally:
                    response.release()
        except asyncio.CancelledError:
            raise
        except ApiError as err:
            if err.status != 410:
                log.warning("pod watch failed: %s", err)
                await asyncio.sleep(1.0)
        except (TimeoutError, aiohttp.ClientError, ValueError) as err:
            log.warning("pod watch interrupted: %r", err)
            await asyncio.sleep(1.0)
