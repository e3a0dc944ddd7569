"""A pod's sandbox: what a container runtime prepares before any container starts.

Fetches the secrets, config maps and service account tokens the pod references, renders each volume into
`<state>/pods/<uid>/volumes/<name>` (or /dev/shm for memory emptyDirs), and writes the pod's /etc/hosts.
Re-running it refreshes secret/configMap contents and rotates tokens in place, as the kubelet does.
"""

from __future__ import annotations

import base64
import os
import shutil
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp

from localcluster.nodeagent.envvars import Data, PodFacts
from localcluster.nodeagent.kube import ApiError, Kube, decode
from localcluster.nodeagent.layout import Layout
from localcluster.nodeagent.volumes import (
    BinaryData,
    Sources,
    VolumeError,
    VolumePlan,
    etc_hosts,
    plan_volume,
    token_requests,
)

TOKEN_REFRESH_FRACTION = 0.8


def _decode_secret(obj: Mapping[str, Any]) -> dict[str, bytes]:
    return {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}


def _decode_config_map(obj: Mapping[str, Any]) -> dict[str, bytes]:
    data = {k: v.encode() for k, v in (obj.get("data") or {}).items()}
    data.update({k: base64.b64decode(v) for k, v in (obj.get("binaryData") or {}).items()})
    return data


def as_text(objects: Mapping[str, BinaryData | None]) -> dict[str, Data | None]:
    """Values for environment variables (decoded as UTF-8, invalid bytes replaced)."""
    return {
        name: None if data is None else {k: v.decode(errors="replace") for k, v in data.items()}
        for name, data in objects.items()
    }


async def fetch_secrets(kube: Kube, namespace: str, names: Iterable[str]) -> dict[str, BinaryData | None]:
    read = kube.core.read_namespaced_secret_without_preload_content
    return await _fetch(kube, names, lambda name: read(name, namespace), _decode_secret)


async def fetch_config_maps(kube: Kube, namespace: str, names: Iterable[str]) -> dict[str, BinaryData | None]:
    read = kube.core.read_namespaced_config_map_without_preload_content
    return await _fetch(kube, names, lambda name: read(name, namespace), _decode_config_map)


async def _fetch(
    kube: Kube,
    names: Iterable[str],
    read: Callable[[str], Awaitable[aiohttp.ClientResponse]],
    decode_data: Callable[[Mapping[str, Any]], BinaryData],
) -> dict[str, BinaryData | None]:
    """Each named object's data, None for one that does not exist (the pod then waits, as a kubelet does)."""
    out: dict[str, BinaryData | None] = {}
    for name in sorted(set(names)):
        obj = await kube.get_or_none(lambda name=name: read(name))  # type: ignore[misc]
        out[name] = None if obj is None else decode_data(obj)
    return out


class TokenCache:
    """Bound service account tokens of one pod, re-requested after 80 % of their lifetime."""

    def __init__(self) -> None:
        self._tokens: dict[tuple[str, int], tuple[str, float]] = {}  # key -> (token, refresh at)

    def next_refresh(self) -> float | None:
        return min((at for _, at in self._tokens.values()), default=None)

    async def get(self, kube: Kube, pod: Mapping[str, Any], wanted: set[tuple[str, int]]) -> dict[tuple[str, int], str]:
        meta, spec = pod["metadata"], pod.get("spec", {})
        account = spec.get("serviceAccountName") or "default"
        now = time.time()
        for key in sorted(wanted):
            cached = self._tokens.get(key)
            if cached and cached[1] > now:
                continue
            audience, seconds = key
            body = {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {
                    "audiences": [audience] if audience else [],
                    "expirationSeconds": seconds,
                    "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]},
                },
            }
            try:
                answer = await decode(
                    kube.core.create_namespaced_service_account_token_without_preload_content(
                        account, meta["namespace"], body
                    )
                )
            except (TimeoutError, ApiError, aiohttp.ClientError, OSError) as err:
                raise VolumeError(f'failed to fetch token for service account "{account}": {err}') from err
            status = answer.get("status") or {}
            expires = datetime.fromisoformat(str(status["expirationTimestamp"]).replace("Z", "+00:00")).timestamp()
            self._tokens[key] = (status["token"], now + (expires - now) * TOKEN_REFRESH_FRACTION)
        return {key: self._tokens[key][0] for key in wanted}


def _write_files(root: Path, plan: VolumePlan) -> None:
    """Write the plan's files (atomically, each) and remove files the plan no longer has."""
    root.mkdir(parents=True, exist_ok=True)
    wanted = set()
    for spec in plan.files:
        target = root / spec.path
        wanted.add(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.exists() and target.read_bytes() == spec.content and (target.stat().st_mode & 0o777) == spec.mode:
            continue
        tmp = target.with_name(f".{target.name}.tmp")
        tmp.write_bytes(spec.content)
        os.chmod(tmp, spec.mode)
        tmp.replace(target)
    for path in sorted(root.rglob("*"), reverse=True):
        if path.is_file() and path not in wanted:
            path.unlink()
        elif path.is_dir() and not any(path.iterdir()):
            path.rmdir()


def _host_path(plan: VolumePlan) -> str:
    path = Path(plan.host_path)
    if plan.host_type == "DirectoryOrCreate":
        path.mkdir(parents=True, exist_ok=True)
    elif plan.host_type == "FileOrCreate" and not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
    elif plan.host_type in ("Directory", "File", "Socket", "CharDevice", "BlockDevice") and not path.exists():
        raise VolumeError(f"hostPath type check failed: {plan.host_path} is not a {plan.host_type}")
    return str(path)


def materialize(layout: Layout, uid: str, plan: VolumePlan) -> str:
    """Create or refresh one volume on disk; returns the folder (or host path) to bind."""
    if plan.kind == "host":
        return _host_path(plan)
    if plan.kind == "memory":
        path = layout.memory_volume(uid, plan.name)
        path.mkdir(parents=True, exist_ok=True)
        return str(path)
    path = layout.volume(uid, plan.name)
    if plan.kind == "dir":
        path.mkdir(parents=True, exist_ok=True)
    else:
        _write_files(path, plan)
    return str(path)


async def prepare(
    kube: Kube,
    layout: Layout,
    pod: Mapping[str, Any],
    facts: PodFacts,
    tokens: TokenCache,
    secret_names: Iterable[str],
    config_map_names: Iterable[str],
) -> dict[str, str]:
    """Fetch, render and write every volume plus /etc/hosts; returns volume name -> folder to bind."""
    meta = pod["metadata"]
    namespace, uid = meta["namespace"], meta["uid"]
    sources = Sources(
        secrets=await fetch_secrets(kube, namespace, secret_names),
        config_maps=await fetch_config_maps(kube, namespace, config_map_names),
        tokens=await tokens.get(kube, pod, token_requests(pod)),
    )
    plans = [plan_volume(pod, volume, facts, sources) for volume in pod.get("spec", {}).get("volumes") or []]
    dirs = {plan.name: materialize(layout, uid, plan) for plan in plans}
    hosts = layout.etc_hosts(uid)
    hosts.parent.mkdir(parents=True, exist_ok=True)
    content = etc_hosts(pod, facts.pod_ip)
    if not hosts.exists() or hosts.read_text() != content:
        hosts.write_text(content)  # in place: a bind-mounted file keeps its inode
    return dirs


def remove(layout: Layout, uid: str) -> None:
    """Delete a pod's state (volumes, hosts file, pidfiles); logs stay for post-mortems."""
    shutil.rmtree(layout.pod(uid), ignore_errors=True)
    shutil.rmtree(layout.memory_root / uid, ignore_errors=True)
