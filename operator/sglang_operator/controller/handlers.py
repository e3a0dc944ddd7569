"""kopf wiring, kept thin: one daemon per SGLangDeployment runs the reconcile loop; child events only wake it.

The daemon is the single writer for its CR (kopf serialises nothing across handlers, so there is exactly one loop
per object), it resyncs every few seconds even when no event arrives, and it wakes at once on any event of a
child pod, so registration follows readiness within a second.
"""

import logging
import threading
from collections.abc import Mapping
from typing import Any

import kopf

from ..api.constants import GROUP, LABEL_DEPLOYMENT, PLURAL, VERSION
from .kube import api_client
from .reconcile import Reconciler

RESYNC_SECONDS = 5.0
log = logging.getLogger(__name__)

_wakeups: dict[tuple[str, str], threading.Event] = {}
_wakeups_lock = threading.Lock()


def _register(namespace: str, name: str) -> threading.Event:
    with _wakeups_lock:
        return _wakeups.setdefault((namespace, name), threading.Event())


def _unregister(namespace: str, name: str, event: threading.Event) -> None:
    """The daemon is gone (kopf stops it when the CR is deleted, or the operator stops): its entry goes too, so the
    map holds running loops only. Only its own entry: a CR deleted and created again under the same name may have
    registered a new loop already."""
    with _wakeups_lock:
        if _wakeups.get((namespace, name)) is event:
            del _wakeups[(namespace, name)]


def _wake(namespace: str, name: str) -> None:
    """Wake the CR's loop if it runs. Events never add entries: a pod of a deleted CR (or any pod carrying the
    label) must not grow the map."""
    with _wakeups_lock:
        event = _wakeups.get((namespace, name))
    if event is not None:
        event.set()


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.persistence.finalizer = f"{GROUP}/operator"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=GROUP, key="last-handled")
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 60
    settings.watching.client_timeout = 90
    settings.networking.request_timeout = 30


@kopf.daemon(GROUP, VERSION, PLURAL, cancellation_timeout=10.0)
def sgld_reconcile_loop(stopped: kopf.DaemonStopped, name: str, namespace: str | None, **_: Any) -> None:
    assert namespace is not None  # the CRD is namespaced
    reconciler = Reconciler(api_client())
    wake = _register(namespace, name)
    try:
        while not stopped:
            wake.clear()
            try:
                result = reconciler.reconcile(namespace, name)
                if result.writes:
                    log.info("%s/%s: %s", namespace, name, result.writes)
            except Exception:  # a failed pass is retried on the next one; the loop itself must survive
                log.exception("reconcile of %s/%s failed", namespace, name)
            deadline_left = RESYNC_SECONDS
            while deadline_left > 0 and not stopped and not wake.is_set():
                wake.wait(0.25)
                deadline_left -= 0.25
    finally:
        _unregister(namespace, name, wake)


@kopf.on.update(GROUP, VERSION, PLURAL, field="spec")
def sgld_spec_changed(name: str, namespace: str | None, **_: Any) -> None:
    _wake(namespace or "", name)


@kopf.on.event("", "v1", "pods", labels={LABEL_DEPLOYMENT: kopf.PRESENT})
def pod_changed(labels: Mapping[str, str], namespace: str | None, **_: Any) -> None:
    _wake(namespace or "", labels[LABEL_DEPLOYMENT])
