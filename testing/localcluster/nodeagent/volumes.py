"""What each pod volume contains and where it is mounted (pure; `mounts.py` writes and binds).

Supported: secret, configMap, downwardAPI, projected (secret, configMap, downwardAPI, serviceAccountToken
sources), emptyDir (medium Memory lives on the host's /dev/shm tmpfs) and hostPath. Anything else (PVCs, CSI,
NFS, ...) fails the pod's volume setup with a message, as a kubelet without that plugin would.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from localcluster.nodeagent.envvars import EnvError, PodFacts, expand, field_value, resource_value

DEFAULT_MODE = 0o644
DEFAULT_TOKEN_SECONDS = 3600
BinaryData = Mapping[str, bytes]


class VolumeError(Exception):
    """A volume cannot be set up (the kubelet's FailedMount)."""


@dataclass(frozen=True)
class FileSpec:
    path: str  # relative to the volume root
    content: bytes
    mode: int


@dataclass(frozen=True)
class VolumePlan:
    name: str
    kind: str  # "files" (content rendered by the agent) | "dir" | "memory" | "host"
    files: tuple[FileSpec, ...] = ()
    host_path: str = ""
    host_type: str = ""


@dataclass(frozen=True)
class Bind:
    """One bind mount into a container's mount namespace."""

    source: str
    target: str
    read_only: bool


@dataclass(frozen=True)
class Sources:
    """What the volumes reference, fetched by the agent: None means not found."""

    secrets: Mapping[str, BinaryData | None] = field(default_factory=dict)
    config_maps: Mapping[str, BinaryData | None] = field(default_factory=dict)
    tokens: Mapping[tuple[str, int], str] = field(default_factory=dict)  # (audience, seconds) -> token


def token_requests(pod: Mapping[str, Any]) -> set[tuple[str, int]]:
    """(audience, expirationSeconds) of every projected serviceAccountToken source ("" = API audience)."""
    wanted = set()
    for volume in pod.get("spec", {}).get("volumes") or []:
        for source in (volume.get("projected") or {}).get("sources") or []:
            token = source.get("serviceAccountToken")
            if token is not None:
                seconds = int(token.get("expirationSeconds") or DEFAULT_TOKEN_SECONDS)
                wanted.add((token.get("audience") or "", seconds))
    return wanted


def _safe_path(path: str) -> str:
    normal = posixpath.normpath(path)
    if normal.startswith(("/", "..")) or normal == ".":
        raise VolumeError(f"invalid volume item path {path!r}")
    return normal


def _key_files(
    kind: str,
    source: Mapping[str, Any],
    name: str,
    objects: Mapping[str, BinaryData | None],
    default_mode: int,
) -> list[FileSpec]:
    data = objects.get(name)
    optional = bool(source.get("optional"))
    if data is None:
        if optional:
            return []
        raise VolumeError(f'{kind} "{name}" not found')
    items = source.get("items")
    if not items:
        return [FileSpec(_safe_path(key), value, default_mode) for key, value in sorted(data.items())]
    files = []
    for item in items:
        key = item["key"]
        if key not in data:
            if optional:
                continue
            raise VolumeError(f"couldn't find key {key} in {kind} {name}")
        files.append(FileSpec(_safe_path(item["path"]), data[key], int(item.get("mode", default_mode))))
    return files


def _format_map(values: Mapping[str, str]) -> bytes:
    """Labels/annotations as the downward API writes them: `key="value"` lines, sorted by key."""
    return "\n".join(f"{key}={json.dumps(values[key])}" for key in sorted(values)).encode()


def _downward_files(
    pod: Mapping[str, Any], items: list[Mapping[str, Any]], facts: PodFacts, default_mode: int
) -> list[FileSpec]:
    files = []
    meta = pod.get("metadata", {})
    for item in items:
        mode = int(item.get("mode", default_mode))
        path = _safe_path(item["path"])
        try:
            if "fieldRef" in item:
                field_path = item["fieldRef"]["fieldPath"]
                if field_path in ("metadata.labels", "metadata.annotations"):
                    content = _format_map(meta.get(field_path.split(".")[1]) or {})
                else:
                    content = field_value(pod, field_path, facts).encode()
            elif "resourceFieldRef" in item:
                ref = item["resourceFieldRef"]
                content = resource_value(pod, ref.get("containerName", ""), ref, facts).encode()
            else:
                continue
        except EnvError as err:
            raise VolumeError(str(err)) from err
        files.append(FileSpec(path, content, mode))
    return files


def _projected_files(
    pod: Mapping[str, Any], projected: Mapping[str, Any], facts: PodFacts, sources: Sources
) -> list[FileSpec]:
    mode = int(projected.get("defaultMode", DEFAULT_MODE))
    files: list[FileSpec] = []
    for source in projected.get("sources") or []:
        if "secret" in source:
            ref = source["secret"]
            files += _key_files("secret", ref, ref.get("name", ""), sources.secrets, mode)
        elif "configMap" in source:
            ref = source["configMap"]
            files += _key_files("configmap", ref, ref.get("name", ""), sources.config_maps, mode)
        elif "downwardAPI" in source:
            files += _downward_files(pod, source["downwardAPI"].get("items") or [], facts, mode)
        elif "serviceAccountToken" in source:
            ref = source["serviceAccountToken"]
            key = (ref.get("audience") or "", int(ref.get("expirationSeconds") or DEFAULT_TOKEN_SECONDS))
            if key not in sources.tokens:
                raise VolumeError(f"no service account token for audience {key[0] or '(api)'}")
            files.append(FileSpec(_safe_path(ref["path"]), sources.tokens[key].encode(), mode))
        else:
            raise VolumeError(f"unsupported projected source {sorted(source)}")
    return files


def plan_volume(pod: Mapping[str, Any], volume: Mapping[str, Any], facts: PodFacts, sources: Sources) -> VolumePlan:
    name = volume["name"]
    if "emptyDir" in volume:
        medium = (volume.get("emptyDir") or {}).get("medium", "")
        return VolumePlan(name, "memory" if medium == "Memory" else "dir")
    if "hostPath" in volume:
        host = volume["hostPath"]
        return VolumePlan(name, "host", host_path=host["path"], host_type=host.get("type", ""))
    if "secret" in volume:
        ref = volume["secret"]
        mode = int(ref.get("defaultMode", DEFAULT_MODE))
        files = _key_files("secret", ref, ref.get("secretName", ""), sources.secrets, mode)
    elif "configMap" in volume:
        ref = volume["configMap"]
        mode = int(ref.get("defaultMode", DEFAULT_MODE))
        files = _key_files("configmap", ref, ref.get("name", ""), sources.config_maps, mode)
    elif "downwardAPI" in volume:
        ref = volume["downwardAPI"]
        files = _downward_files(pod, ref.get("items") or [], facts, int(ref.get("defaultMode", DEFAULT_MODE)))
    elif "projected" in volume:
        files = _projected_files(pod, volume["projected"], facts, sources)
    else:
        kinds = sorted(set(volume) - {"name"})
        raise VolumeError(f'volume "{name}": {", ".join(kinds)} volumes are not supported by the local node agent')
    return VolumePlan(name, "files", files=tuple(files))


READ_ONLY_KINDS = ("secret", "configMap", "downwardAPI", "projected")


def container_binds(
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    volume_dirs: Mapping[str, str],
    env: Mapping[str, str],
    etc_hosts: str,
) -> list[Bind]:
    """The binds of one container, parents before children (`/a` before `/a/b`), then /etc/hosts."""
    kinds = {v["name"]: next((k for k in READ_ONLY_KINDS if k in v), "") for v in pod["spec"].get("volumes") or []}
    binds = []
    for mount in container.get("volumeMounts") or []:
        name = mount["name"]
        if name not in volume_dirs:
            raise VolumeError(f'volumeMount "{name}" has no matching volume')
        source = volume_dirs[name]
        sub = mount.get("subPath") or expand(mount.get("subPathExpr") or "", env)
        if sub:
            source = posixpath.join(source, _safe_path(sub))
        read_only = bool(mount.get("readOnly")) or bool(kinds.get(name))
        binds.append(Bind(source, posixpath.normpath(mount["mountPath"]), read_only))
    binds.sort(key=lambda b: b.target.count("/"))
    if not any(b.target == "/etc/hosts" for b in binds):
        binds.append(Bind(etc_hosts, "/etc/hosts", read_only=False))
    return binds


def etc_hosts(pod: Mapping[str, Any], pod_ip: str, cluster_domain: str = "cluster.local") -> str:
    """The kubelet-managed /etc/hosts: localhost, the pod's own name, then hostAliases."""
    meta, spec = pod.get("metadata", {}), pod.get("spec", {})
    hostname = spec.get("hostname") or meta.get("name", "")
    names = [hostname]
    if spec.get("subdomain"):
        fqdn = f"{hostname}.{spec['subdomain']}.{meta.get('namespace', '')}.svc.{cluster_domain}"
        names.insert(0, fqdn)
    lines = [
        "# Kubernetes-managed hosts file (local node agent).",
        "127.0.0.1\tlocalhost",
        "::1\tlocalhost ip6-localhost ip6-loopback",
        f"{pod_ip}\t{' '.join(names)}",
    ]
    aliases = spec.get("hostAliases") or []
    if aliases:
        lines += ["", "# Entries added by HostAliases."]
        lines += [f"{a['ip']}\t{' '.join(a.get('hostnames') or [])}" for a in aliases]
    return "\n".join(lines) + "\n"
