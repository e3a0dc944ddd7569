"""Labels, selectors and owner references shared by every rendered child."""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..api.constants import (
    ANNOTATION_SCRAPE,
    ANNOTATION_SCRAPE_PATH,
    ANNOTATION_SCRAPE_PORT,
    API_VERSION,
    GROUP,
    KIND,
    LABEL_APP_COMPONENT,
    LABEL_APP_INSTANCE,
    LABEL_APP_MANAGED_BY,
    LABEL_APP_NAME,
    LABEL_APP_PART_OF,
    LABEL_COMPONENT,
    LABEL_DEPLOYMENT,
    MANAGED_BY,
)


@dataclass(frozen=True)
class Owner:
    """The CR a child belongs to: enough to name, label and own the child."""

    name: str
    namespace: str
    uid: str


def selector_labels(owner: Owner, component: str) -> dict[str, str]:
    return {LABEL_DEPLOYMENT: owner.name, LABEL_COMPONENT: component}


def child_labels(owner: Owner, component: str) -> dict[str, str]:
    return {
        **selector_labels(owner, component),
        LABEL_APP_NAME: "sglang" if component == "worker" else "smg",
        LABEL_APP_INSTANCE: owner.name,
        LABEL_APP_COMPONENT: component,
        LABEL_APP_MANAGED_BY: MANAGED_BY,
        LABEL_APP_PART_OF: "sglang-operator",
    }


def owner_reference(owner: Owner) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": owner.name,
        "uid": owner.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def object_meta(
    owner: Owner, name: str, labels: dict[str, str], annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": owner.namespace,
        "labels": labels,
        "ownerReferences": [owner_reference(owner)],
    }
    if annotations:
        meta["annotations"] = annotations
    return meta


RESERVED_PREFIX = f"{GROUP}/"
"""Label and annotation keys under the operator's own prefix carry its state (`sglang.ai/draining-since`,
`sglang.ai/warm`, `sglang.ai/replica-nodes`, the selector labels): only the operator writes them."""


def with_operator_keys(tenant: Mapping[str, str], operator: Mapping[str, str]) -> dict[str, str]:
    """The tenant's labels or annotations (from `template.metadata`) merged under the operator's own.

    The operator's keys always win, and tenant keys under `sglang.ai/` are dropped even where the operator sets no
    such key on this object: a template annotation `sglang.ai/draining-since` would otherwise mark every new pod as
    draining. Validation refuses such keys too; rendering does not rely on it.
    """
    kept = {key: value for key, value in tenant.items() if not key.startswith(RESERVED_PREFIX)}
    return {**kept, **operator}


def scrape_annotations(port: int, path: str = "/metrics") -> dict[str, str]:
    return {ANNOTATION_SCRAPE: "true", ANNOTATION_SCRAPE_PORT: str(port), ANNOTATION_SCRAPE_PATH: path}
