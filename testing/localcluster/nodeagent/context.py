"""What every pod worker shares: the API connection, state layout, allocations and agent settings."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import aiohttp

from localcluster.nodeagent.events import EventRecorder
from localcluster.nodeagent.images import Toolchain
from localcluster.nodeagent.ipam import Allocations
from localcluster.nodeagent.kube import Kube
from localcluster.nodeagent.layout import Layout
from localcluster.nodeagent.light import LightServer

RESYNC_S = 60.0  # how often a quiet pod re-renders its volumes and re-checks its status


@dataclass
class Context:
    kube: Kube
    layout: Layout
    allocations: Allocations
    tools: Toolchain
    isolate: bool  # containers get their own mount namespace
    events: EventRecorder
    session: aiohttp.ClientSession  # for httpGet probes and lifecycle hooks
    backoff_base: float
    gpus_per_node: int
    node_allocatable: Mapping[str, str]
    services: Mapping[str, str]  # KUBERNETES_SERVICE_* variables
    base_env: Mapping[str, str]  # PATH, HOME, ... (what an image would set)
    node_reachable: Callable[[str], bool]  # False while a node-not-ready fault cuts it off from the API
    light: LightServer  # serves the light pods (`light.py`)
