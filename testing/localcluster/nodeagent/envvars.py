"""A container's environment and `$(VAR)` expansion, computed the way the kubelet does (pure functions).

Order (kubelet `makeEnvironmentVariables`): `envFrom` sources in order, then `env` entries in order, each value
expanded against what is defined so far plus the service variables; service variables fill in what the pod
did not set. Secrets and config maps are passed in already fetched (`None` = not found), so every missing
reference becomes an `EnvError` whose message the container shows as `CreateContainerConfigError`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from kubernetes.utils import parse_quantity

Data = Mapping[str, str]
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
_SUBSCRIPT = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")


class EnvError(Exception):
    """A reference the container needs cannot be resolved (the kubelet's CreateContainerConfigError)."""


@dataclass(frozen=True)
class PodFacts:
    """What the pod object does not carry yet but its environment may reference."""

    pod_ip: str
    host_ip: str
    node_allocatable: Mapping[str, str]


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes `$(VAR)` expansion: defined names are replaced, undefined ones kept, `$$` means `$`."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        char = text[i]
        if char == "$" and i + 1 < n:
            nxt = text[i + 1]
            if nxt == "$":
                out.append("$")
                i += 2
                continue
            if nxt == "(":
                close = text.find(")", i + 2)
                if close != -1:
                    name = text[i + 2 : close]
                    out.append(env[name] if name and name in env else text[i : close + 1])
                    i = close + 1
                    continue
        out.append(char)
        i += 1
    return "".join(out)


def service_env(host: str, port: int) -> dict[str, str]:
    """The `kubernetes` Service variables, pointing at the real apiserver (there is no cluster IP here)."""
    prefix = f"KUBERNETES_PORT_{port}_TCP"
    return {
        "KUBERNETES_SERVICE_HOST": host,
        "KUBERNETES_SERVICE_PORT": str(port),
        "KUBERNETES_SERVICE_PORT_HTTPS": str(port),
        "KUBERNETES_PORT": f"tcp://{host}:{port}",
        prefix: f"tcp://{host}:{port}",
        f"{prefix}_PROTO": "tcp",
        f"{prefix}_PORT": str(port),
        f"{prefix}_ADDR": host,
    }


def field_value(pod: Mapping[str, Any], path: str, facts: PodFacts) -> str:
    """The value of a downward-API `fieldRef.fieldPath` for an environment variable."""
    meta = pod.get("metadata", {})
    spec = pod.get("spec", {})
    simple = {
        "metadata.name": meta.get("name", ""),
        "metadata.namespace": meta.get("namespace", ""),
        "metadata.uid": meta.get("uid", ""),
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", ""),
        "status.hostIP": facts.host_ip,
        "status.hostIPs": facts.host_ip,
        "status.podIP": facts.pod_ip,
        "status.podIPs": facts.pod_ip,
    }
    if path in simple:
        return str(simple[path])
    match = _SUBSCRIPT.match(path)
    if match:
        return str((meta.get(match.group(1)) or {}).get(match.group(2), ""))
    raise EnvError(f"unsupported fieldRef fieldPath {path!r}")


def resource_value(pod: Mapping[str, Any], container_name: str, ref: Mapping[str, Any], facts: PodFacts) -> str:
    """`resourceFieldRef`: a limit falls back to node allocatable, a request to 0; rounded up by divisor."""
    name = ref.get("containerName") or container_name
    containers = pod.get("spec", {}).get("containers", []) + pod.get("spec", {}).get("initContainers", [])
    container = next((c for c in containers if c.get("name") == name), None)
    if container is None:
        raise EnvError(f"resourceFieldRef names unknown container {name!r}")
    kind, _, resource = str(ref.get("resource", "")).partition(".")
    if kind not in ("limits", "requests") or not resource:
        raise EnvError(f"unsupported resourceFieldRef resource {ref.get('resource')!r}")
    resources = container.get("resources") or {}
    raw = (resources.get(kind) or {}).get(resource)
    if raw is None:
        raw = facts.node_allocatable.get(resource, "0") if kind == "limits" else "0"
    value = Decimal(parse_quantity(raw))
    divisor = Decimal(parse_quantity(ref.get("divisor") or "1"))
    return str(math.ceil(value / divisor))


def _key_ref(kind: str, ref: Mapping[str, Any], objects: Mapping[str, Data | None]) -> str | None:
    name, key, optional = ref.get("name", ""), ref.get("key", ""), bool(ref.get("optional"))
    data = objects.get(name)
    if data is None:
        if optional:
            return None
        raise EnvError(f'{kind} "{name}" not found')
    if key not in data:
        if optional:
            return None
        raise EnvError(f"couldn't find key {key} in {kind} {name}")
    return data[key]


def container_env(
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    facts: PodFacts,
    secrets: Mapping[str, Data | None],
    config_maps: Mapping[str, Data | None],
    services: Mapping[str, str],
) -> dict[str, str]:
    """The variables the container's process sees from its spec (the base PATH/HOME come from the runner)."""
    env: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        prefix = source.get("prefix", "")
        if "configMapRef" in source:
            kind, ref, objects = "configmap", source["configMapRef"], config_maps
        elif "secretRef" in source:
            kind, ref, objects = "secret", source["secretRef"], secrets
        else:
            continue
        data = objects.get(ref.get("name", ""))
        if data is None:
            if ref.get("optional"):
                continue
            raise EnvError(f'{kind} "{ref.get("name", "")}" not found')
        for key, text in data.items():
            if _ENV_NAME.match(prefix + key):
                env[prefix + key] = text
    for entry in container.get("env") or []:
        name = entry["name"]
        if "value" in entry or "valueFrom" not in entry:
            env[name] = expand(str(entry.get("value", "")), {**services, **env})
            continue
        source = entry["valueFrom"]
        value: str | None
        if "fieldRef" in source:
            value = field_value(pod, source["fieldRef"]["fieldPath"], facts)
        elif "resourceFieldRef" in source:
            value = resource_value(pod, container["name"], source["resourceFieldRef"], facts)
        elif "secretKeyRef" in source:
            value = _key_ref("secret", source["secretKeyRef"], secrets)
        elif "configMapKeyRef" in source:
            value = _key_ref("configmap", source["configMapKeyRef"], config_maps)
        else:
            raise EnvError(f"env {name}: unsupported valueFrom {sorted(source)}")
        if value is not None:
            env[name] = value
    return {**services, **env}


def referenced_objects(pod: Mapping[str, Any]) -> tuple[set[str], set[str]]:
    """Names of the secrets and config maps the pod's env and volumes refer to (to fetch before starting)."""
    secrets: set[str] = set()
    config_maps: set[str] = set()
    spec = pod.get("spec", {})
    for container in (spec.get("initContainers") or []) + (spec.get("containers") or []):
        for source in container.get("envFrom") or []:
            if "secretRef" in source:
                secrets.add(source["secretRef"].get("name", ""))
            if "configMapRef" in source:
                config_maps.add(source["configMapRef"].get("name", ""))
        for entry in container.get("env") or []:
            value_from = entry.get("valueFrom") or {}
            if "secretKeyRef" in value_from:
                secrets.add(value_from["secretKeyRef"].get("name", ""))
            if "configMapKeyRef" in value_from:
                config_maps.add(value_from["configMapKeyRef"].get("name", ""))
    for volume in spec.get("volumes") or []:
        if "secret" in volume:
            secrets.add(volume["secret"].get("secretName", ""))
        if "configMap" in volume:
            config_maps.add(volume["configMap"].get("name", ""))
        for source in (volume.get("projected") or {}).get("sources") or []:
            if "secret" in source:
                secrets.add(source["secret"].get("name", ""))
            if "configMap" in source:
                config_maps.add(source["configMap"].get("name", ""))
    return secrets - {""}, config_maps - {""}
