"""Third-party CRDs, read from the Go modules their projects publish (the only place they come from here).

`go mod download -json MODULE@VERSION` puts the module into the Go module cache (verified against the checksum
database, and against the sum pinned below) and names its folder; the CRD is read from the path the project keeps
it at. Nothing else is downloaded; a warm module cache answers without the network.

- KEDA (`github.com/kedacore/keda/v2`): ScaledObject, for `examples/keda-scaledobject.yaml`;
- the Gateway API Inference Extension (`sigs.k8s.io/gateway-api-inference-extension`): the v1 InferencePool the
  operator renders (`spec.inferencePool`).
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from localcluster.procs import wait_for

DOWNLOAD_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class CrdSource:
    module: str
    version: str
    sum: str
    """The module's `h1:` hash (as go.sum would pin it): a module that differs is refused."""
    path: str
    """The CRD's file inside the module."""


KEDA_SCALEDOBJECT = CrdSource(
    module="github.com/kedacore/keda/v2",
    version="v2.21.0",
    sum="h1:R6z2HZvstK4RLUMxroNACzBj74xGxt3kG59b5Xc+Xps=",
    path="config/crd/bases/keda.sh_scaledobjects.yaml",
)
INFERENCE_POOL = CrdSource(
    module="sigs.k8s.io/gateway-api-inference-extension",
    version="v1.5.0",
    sum="h1:w9Awt60cmI1vM7Y6N81h8wDCBP0WkmxpdI7GKY0v070=",
    path="config/crd/bases/inference.networking.k8s.io_inferencepools.yaml",
)


def module_dir(source: CrdSource) -> Path:
    """The module's folder in the Go module cache, downloaded first if absent."""
    env = {**os.environ, "GOFLAGS": "-mod=mod", "GOTOOLCHAIN": "local"}
    proc = subprocess.run(
        ["go", "mod", "download", "-json", f"{source.module}@{source.version}"],
        capture_output=True, text=True, env=env, cwd="/", timeout=DOWNLOAD_TIMEOUT_S, check=False,
    )  # fmt: skip
    try:
        info = json.loads(proc.stdout)
    except ValueError:
        info = {}
    if proc.returncode != 0 or info.get("Error") or not info.get("Dir"):
        raise RuntimeError(
            f"go mod download {source.module}@{source.version} failed: {info.get('Error') or proc.stderr}"
        )
    if info.get("Sum") != source.sum:
        raise RuntimeError(f"{source.module}@{source.version} has sum {info.get('Sum')}, expected {source.sum}")
    return Path(info["Dir"])


def load_crd(source: CrdSource) -> dict[str, Any]:
    crd: dict[str, Any] = yaml.safe_load((module_dir(source) / source.path).read_text())
    return crd


def install(api: client.ApiClient, crd: dict[str, Any], timeout: float = 60.0) -> None:
    """Create the CRD (or replace it, keeping its resourceVersion) on the API server and wait until Established."""
    ext = client.ApiextensionsV1Api(api)
    name = crd["metadata"]["name"]
    for _ in range(5):  # other test processes may install it at the same time
        try:
            current = ext.read_custom_resource_definition(name)
        except ApiException as exc:
            if exc.status != 404:
                raise
            try:
                ext.create_custom_resource_definition(crd)
                break
            except ApiException as create_exc:
                if create_exc.status != 409:
                    raise
                continue
        body = {**crd, "metadata": {**crd["metadata"], "resourceVersion": current.metadata.resource_version}}
        try:
            ext.replace_custom_resource_definition(name, body)
            break
        except ApiException as exc:
            if exc.status != 409:
                raise

    def established() -> bool:
        conditions = ext.read_custom_resource_definition(name).status.conditions or []
        return any(c.type == "Established" and c.status == "True" for c in conditions)

    wait_for(established, timeout, f"CRD {name} Established")
