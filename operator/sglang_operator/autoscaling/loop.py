"""The autoscaler's loop: one coroutine per SGLangDeployment with autoscaling enabled, one pass per interval.

A loop rather than a fixed-interval timer, because each CR chooses its own `intervalSeconds`; the supervisor
(`runtime.supervisor`) starts it on the leader and stops it when autoscaling is switched off or the CR is
deleted. Like the reconcile loop, it holds no thread: each pass runs in the shared pool (`runtime.workqueue`),
from the CR's body as the watch last showed it and the pods of the operator's pod index (no GET or LIST per pass).
"""

import asyncio
import functools
import logging
from collections.abc import Mapping
from typing import Any

from .. import metrics
from ..runtime.kube import api_client
from ..runtime.state import PodKey, plain
from ..runtime.supervisor import Live, LoopKind, Stopped
from ..runtime.workqueue import backoff_seconds, run_in_pool
from ..settings import OperatorSettings
from .autoscale_pass import autoscale_once

log = logging.getLogger(__name__)


def _enabled(body: Mapping[str, Any]) -> bool:
    return bool(((body.get("spec") or {}).get("autoscaling") or {}).get("enabled"))


def autoscaler_loop(settings: OperatorSettings) -> LoopKind:
    """The autoscaler's loop as the supervisor runs it: for every CR with autoscaling enabled."""
    return LoopKind("autoscaler", functools.partial(sgld_autoscale_loop, settings=settings), _enabled)


async def sgld_autoscale_loop(
    stopped: Stopped,
    name: str,
    namespace: str,
    spec: Live,
    body: Live,
    settings: OperatorSettings,
    **indexes: Any,
) -> None:
    """`indexes`: every kopf index by its function's name; this reads the pod index."""
    sgld_pods: Mapping[PodKey, Any] = indexes["sgld_pods"]
    api = api_client()
    failures = 0
    try:
        while not stopped:
            cr, pods = plain(body), [plain(pod) for pod in sgld_pods.get((namespace, name), ())]
            try:
                result = await run_in_pool(
                    functools.partial(autoscale_once, api, settings, namespace, name, body=cr, pods=pods)
                )
                failures = 0
                if result.decision is not None and result.wrote:
                    log.info("%s/%s autoscaler: %s", namespace, name, result.decision.reason)
            except Exception:  # a failed pass holds the count; the next one tries again, backing off
                failures += 1
                log.exception("autoscaling pass of %s/%s failed", namespace, name)
            interval = interval_seconds(spec)
            await asyncio.sleep(min(interval, backoff_seconds(failures, interval)))
    finally:
        metrics.forget_deployment(namespace, name)


MAX_INTERVAL_SECONDS = 3600.0


def interval_seconds(spec: Any) -> float:
    """The CR's `intervalSeconds`, read from the raw spec kopf hands over: anything that is not a number in
    [1, MAX_INTERVAL_SECONDS] is clamped or defaulted (a wait of 2**33 s raises, and the daemon must not die)."""
    value = (spec.get("autoscaling") or {}).get("intervalSeconds") or 15
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        return 15.0
    return min(max(float(value), 1.0), MAX_INTERVAL_SECONDS)
