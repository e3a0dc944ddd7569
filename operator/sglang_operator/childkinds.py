"""The kinds of the children a SGLangDeployment owns besides its worker pods, in one table: the watches
(`runtime/watches.py`: one index per kind), the writer (`runtime/writer.py`: what a CR may own, each kind's API) and
the reconciler (which names to look up for a CR) all derive from it. `render.shared_children` renders a subset
(tests/unit/runtime/test_writer.py keeps the two in agreement). Pure.
"""

from collections.abc import Callable
from dataclasses import dataclass

from . import names


@dataclass(frozen=True)
class ChildKind:
    api_version: str
    kind: str
    plural: str
    index: str
    """The name of the kopf index that watches the kind (a pass reads it from the loop's indexes by this name)."""
    names: tuple[Callable[[str], str], ...]
    """The child names of this kind for a CR of a given name."""

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    @property
    def version(self) -> str:
        return self.api_version.rpartition("/")[2]


CHILD_KINDS: tuple[ChildKind, ...] = (
    ChildKind("v1", "Service", "services", "sgld_services", (names.workers_service, names.router)),
    ChildKind("apps/v1", "Deployment", "deployments", "sgld_deployments", (names.router, names.router_b)),
    ChildKind(
        "networking.k8s.io/v1", "NetworkPolicy", "networkpolicies", "sgld_networkpolicies", (names.network_policy,),
    ),
    ChildKind("monitoring.coreos.com/v1", "PodMonitor", "podmonitors", "sgld_podmonitors", (names.pod_monitor,)),
    ChildKind(
        "inference.networking.k8s.io/v1", "InferencePool", "inferencepools", "sgld_inferencepools",
        (names.inference_pool,),
    ),
)  # fmt: skip


def child_kind(kind: str) -> ChildKind:
    """The table's entry for `kind` (KeyError for a kind the operator never owns)."""
    for entry in CHILD_KINDS:
        if entry.kind == kind:
            return entry
    raise KeyError(kind)
