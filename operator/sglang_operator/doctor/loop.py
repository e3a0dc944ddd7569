"""The fleet doctor's loop: one coroutine per SGLangDeployment with `diagnostics.enabled`, one evaluation per
`diagnostics.intervalSeconds`, started on the leader by the supervisor (`runtime.supervisor`).

Like the autoscaler's loop it holds no thread: each evaluation runs in the shared pool (`runtime.workqueue`) from
the CR's body as the watch last showed it, the pods of the operator's pod index and the router Deployments of its
Deployment index (no LIST per pass); Secrets (a router API key) come through the reconciler's cache, and the router
pods' ReplicaSets through the loop's own (`runtime.routerpods`, one GET per ReplicaSet a minute at most), so the
doctor calls the router pods the reconciler calls, and no other.
"""

import asyncio
import functools
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from .. import metrics
from ..api.validation import parse_spec
from ..runtime.kube import api_client
from ..runtime.routerpods import ReplicaSetControllers, slot_deployments
from ..runtime.state import SECRETS, ChildKey, PodKey, plain
from ..runtime.supervisor import Live, LoopKind, Stopped
from ..runtime.watches import children_view
from ..runtime.workqueue import backoff_seconds, run_in_pool
from ..settings import OperatorSettings
from .doctor_pass import clear_diagnostics, doctor_once, secret_reader
from .hysteresis import is_empty
from .model import FINDING_TYPES
from .observe import cr_uid

log = logging.getLogger(__name__)
MAX_INTERVAL_SECONDS = 3600.0


def _enabled(body: Mapping[str, Any]) -> bool:
    """Diagnostics enabled, or disabled with findings still in status (the loop clears them, then stops)."""
    diagnostics = (body.get("spec") or {}).get("diagnostics")
    enabled = not isinstance(diagnostics, dict) or diagnostics.get("enabled", True) is not False
    return enabled or not is_empty((body.get("status") or {}).get("diagnostics"))


def interval_seconds(spec: Any) -> float:
    """The CR's `diagnostics.intervalSeconds` from the raw spec, clamped to [5, 3600] (default 30)."""
    diagnostics = spec.get("diagnostics")
    value = diagnostics.get("intervalSeconds") if isinstance(diagnostics, dict) else None
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        return 30.0
    return min(max(float(value), 5.0), MAX_INTERVAL_SECONDS)


def watched_slots(
    children: Mapping[ChildKey, Iterable[Mapping[str, Any]]], namespace: str, name: str, cr: Mapping[str, Any]
) -> dict[str, str]:
    """The router Deployments the CR owns, name -> uid, as the Deployment index shows them (read on the event loop,
    as the reconciler's snapshot is): the slots whose pods alone are the fleet's routers."""

    def find(slot: str) -> Mapping[str, Any] | None:
        return next(iter(children.get((namespace, "Deployment", slot), ())), None)

    return slot_deployments(name, cr_uid(cr), find)


def doctor_loop(settings: OperatorSettings) -> LoopKind:
    """The fleet doctor's loop as the supervisor runs it: for every CR with diagnostics on (or findings to clear)."""
    return LoopKind("doctor", functools.partial(sgld_doctor_loop, settings=settings), _enabled)


async def sgld_doctor_loop(
    stopped: Stopped,
    name: str,
    namespace: str,
    spec: Live,
    body: Live,
    settings: OperatorSettings,
    **indexes: Any,
) -> None:
    sgld_pods: Mapping[PodKey, Any] = indexes["sgld_pods"]
    children = children_view(**indexes)
    replica_sets = ReplicaSetControllers()
    api = api_client()

    uncached = secret_reader(api)

    def read_secret(ns: str, secret: str) -> Any:
        """Through the reconciler's Secret cache (one GET per Secret per minute at most)."""
        return SECRETS.get((ns, secret), lambda: uncached(ns, secret))

    failures = 0
    try:
        await asyncio.sleep(interval_seconds(spec))  # the first evaluation after one interval: the fleet is starting
        while not stopped:
            cr, pods = plain(body), [plain(pod) for pod in sgld_pods.get((namespace, name), ())]
            slots = watched_slots(children, namespace, name, cr)
            parsed, _ = parse_spec(cr.get("spec"))
            if parsed is not None:
                try:
                    if parsed.diagnostics.enabled:
                        once = functools.partial(doctor_once, api, cr, parsed, pods, settings, read_secret,
                                                 slots=slots, replica_sets=replica_sets)  # fmt: skip
                        await run_in_pool(once)
                    else:
                        await run_in_pool(functools.partial(clear_diagnostics, api, cr))
                    failures = 0
                except Exception:  # a failed pass changes nothing; the next one tries again, backing off
                    failures += 1
                    log.exception("diagnostics pass of %s/%s failed", namespace, name)
            interval = interval_seconds(spec)
            await asyncio.sleep(min(interval, backoff_seconds(failures, interval)))
    finally:
        metrics.forget_diagnostics(namespace, name, FINDING_TYPES)
