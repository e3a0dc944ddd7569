"""The KV epoch of a prefill/decode fleet: a short hash of what a KV handoff between a prefill and a decode server
depends on. Pure.

smg pairs any prefill with any decode of the model, and SGLang refuses a page-size or KV-dtype mismatch only at the
first transfer, a model-dtype one (`--dtype`: the pages' dtype while the KV dtype is auto) never, and across
releases may mistransfer. So a change of any of these fields is never rolled group by group: the fleet cuts over
whole, from the routers of one epoch to those of the next (`controller/cutover.py`), and each router lists only
workers of its own epoch. Every worker pod and router pod of a prefill/decode fleet carries its epoch as the
`sglang.ai/kv-epoch` label.
"""

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .api.constants import ANNOTATION_KV_EPOCH, ANNOTATION_KV_EPOCH_SINCE
from .api.releases import DTYPE_ALIASES
from .api.spec import SGLangDeploymentSpec
from .names import router_slots

KV_CONTRACT: tuple[tuple[str, Callable[[SGLangDeploymentSpec], object]], ...] = (
    ("model.path", lambda s: s.model.path),
    ("model.revision", lambda s: s.model.revision),
    ("engine.image", lambda s: s.engine.sglang_image),
    ("engine.version", lambda s: s.engine.sglang_version),
    ("disaggregation.transferBackend", lambda s: s.disaggregation and s.disaggregation.transfer_backend),
    ("disaggregation.pageSize", lambda s: s.disaggregation and s.disaggregation.page_size),
    ("disaggregation.kvCacheDtype", lambda s: s.disaggregation and s.disaggregation.kv_cache_dtype),
    ("disaggregation.dtype", lambda s: s.disaggregation and _dtype(s.disaggregation.dtype)),
)
"""Each field of the contract and its effective value (the image a version alone names, the version an image
alone implies, one spelling of a dtype): writing out a default does not start a cut-over, and a field left unset
is left out of the hash, so a field added later keeps every fleet's epoch. The image and the model are the fleet's,
never a group's, so the epoch is one per fleet."""


def _dtype(dtype: str | None) -> str | None:
    """`--dtype` as it shapes the KV pages: SGLang's default `auto` is the unset field, `half` is `float16`."""
    return None if dtype in (None, "auto") else DTYPE_ALIASES.get(dtype, dtype)


def kv_epoch(spec: SGLangDeploymentSpec) -> str:
    """The epoch of a prefill/decode fleet's spec; "" for a colocated fleet (one generation at a time, no epoch)."""
    if spec.disaggregation is None:
        return ""
    contract = {field: value for field, get in KV_CONTRACT if (value := get(spec)) not in (None, "")}
    return hashlib.sha256(json.dumps(contract, sort_keys=True, default=str).encode()).hexdigest()[:10]


@dataclass(frozen=True)
class Cutover:
    """Where a prefill/decode fleet's routers stand between KV epochs, read from its router Service and Deployments.

    The router Service selects the routers of the serving epoch. The spec's epoch (`desired`) runs in the router
    Deployment `slot`, rendered from the spec; while it differs from the serving one, the serving epoch's Deployment
    is kept as it is, and the Service moves to the new epoch only once all of its workers are ready and listed by
    its routers (`controller/cutover.py`). A Deployment of an older epoch is kept while workers of that epoch are
    left (they drain from its routers), then deleted.
    """

    desired: str
    serving: str
    since: str | None
    """When the Service's selector moved to the serving epoch (RFC 3339); None: since the Service was created."""
    slot: str
    """The router Deployment rendered from the spec, with the desired epoch."""
    kept: tuple[str, ...] = ()
    """Router Deployments left as they are: the serving epoch's during a cut-over, an older epoch's while its workers
    drain."""

    @property
    def in_progress(self) -> bool:
        return self.serving != self.desired

    def of(self, label: str) -> str:
        """The epoch of a pod by its label: one made before epochs existed belongs to the serving epoch."""
        return label or self.serving


def _epoch_annotation(child: Mapping[str, Any] | None) -> str | None:
    value = (((child or {}).get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_KV_EPOCH)
    return value if isinstance(value, str) else None


def plan_cutover(
    deployment: str,
    desired: str,
    service: Mapping[str, Any] | None,
    slots: Mapping[str, Mapping[str, Any]],
    worker_labels: Iterable[str],
) -> Cutover:
    """The cut-over state of a prefill/decode fleet of epoch `desired`, from its router Service, its router
    Deployments (`slots`: name -> the observed object, only those that exist) and its worker pods' epoch labels.

    A Service or Deployment without the epoch annotation (made before epochs existed) holds the serving epoch, and
    the Service of such a fleet serves the spec's: the generation running when the operator learned of epochs is
    the current one. Pure."""
    serving = _epoch_annotation(service) or desired
    since = (((service or {}).get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_KV_EPOCH_SINCE)
    held = {name: _epoch_annotation(child) or serving for name, child in slots.items()}
    slot_names = router_slots(deployment)
    slot = next((name for name in slot_names if held.get(name) == desired), None)
    if slot is None:
        free = [name for name in slot_names if name not in held]
        idle = [name for name in slot_names if held.get(name) != serving]
        slot = (free or idle or [slot_names[0]])[0]
    in_use = {label or serving for label in worker_labels} | {serving}
    kept = tuple(name for name in slot_names if name != slot and held.get(name) in in_use)
    return Cutover(desired, serving, since if isinstance(since, str) else None, slot, kept)
