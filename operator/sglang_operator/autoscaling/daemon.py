"""kopf wiring of the autoscaler: one daemon per SGLangDeployment with autoscaling enabled, one pass per interval.

A daemon rather than a fixed-interval timer, because each CR chooses its own `intervalSeconds`; kopf stops it when
autoscaling is switched off or the CR is deleted.
"""

import logging
from typing import Any

import kopf

from ..api.constants import GROUP, PLURAL, VERSION
from ..controller.kube import api_client
from .loop import autoscale_once

log = logging.getLogger(__name__)


def _enabled(spec: Any, **_: Any) -> bool:
    return bool((spec.get("autoscaling") or {}).get("enabled"))


@kopf.daemon(GROUP, VERSION, PLURAL, when=_enabled, cancellation_timeout=10.0)
def sgld_autoscale_loop(stopped: kopf.DaemonStopped, name: str, namespace: str | None, spec: Any, **_: Any) -> None:
    assert namespace is not None  # the CRD is namespaced
    api = api_client()
    while not stopped:
        try:
            result = autoscale_once(api, namespace, name)
            if result.decision is not None and result.wrote:
                log.info("%s/%s autoscaler: %s", namespace, name, result.decision.reason)
        except Exception:  # a failed pass holds the count; the next interval tries again
            log.exception("autoscaling pass of %s/%s failed", namespace, name)
        stopped.wait(interval_seconds(spec))


MAX_INTERVAL_SECONDS = 3600.0


def interval_seconds(spec: Any) -> float:
    """The CR's `intervalSeconds`, read from the raw spec kopf hands over: anything that is not a number in
    [1, MAX_INTERVAL_SECONDS] is clamped or defaulted (a wait of 2**33 s raises, and the daemon must not die)."""
    value = (spec.get("autoscaling") or {}).get("intervalSeconds") or 15
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        return 15.0
    return min(max(float(value), 1.0), MAX_INTERVAL_SECONDS)
