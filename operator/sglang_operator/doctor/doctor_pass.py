"""One evaluation of one fleet: observe (`observe`), diagnose (`diagnose`), and for the operator also remember
(`hysteresis`) and report (status, events, metric).

The operator's pass writes `status.diagnostics` and nothing else, with a merge patch of that one field (the doctor is
its only writer, so no resourceVersion guard is needed and none of the reconciler's or the autoscaler's fields is
touched), only when it changed; a healthy fleet that never had a finding is never written. A Warning event is posted
once per finding, when it appears, and a Normal one when it clears.
"""

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kubernetes import client

from .. import metrics as operator_metrics
from ..api.spec import SGLangDeploymentSpec
from ..prometheus.access import prometheus_access
from ..prometheus.client import Credentials, connect
from ..prometheus.credentials import resolve_credentials
from ..runtime.kube import API_TIMEOUT
from ..runtime.routerpods import ReplicaSetControllers
from ..runtime.writer import Writer
from ..secretref import secret_key_text, unusable_credential
from ..settings import OperatorSettings
from .diagnose import diagnose
from .hysteresis import Evolution, evolve, is_empty
from .model import FINDING_TYPES, Diagnosis, ReplicaMetrics, RouterView
from .observe import cr_uid, fleet_facts, probe_bootstrap, read_metrics, read_routers, router_pods
from .pd_observe import bootstrap_targets

DEADLINE_SECONDS = 20.0
"""The whole evaluation's budget: every Prometheus query and router call shares it."""
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Evaluation:
    diagnosis: Diagnosis
    metrics: ReplicaMetrics | None


SecretReader = Callable[[str, str], Mapping[str, Any] | None]
"""(namespace, name) -> the Secret as JSON, or None when absent."""


def evaluate(
    api: client.ApiClient,
    body: Mapping[str, Any],
    spec: SGLangDeploymentSpec,
    pods: Sequence[Mapping[str, Any]],
    settings: OperatorSettings,
    now: float | None = None,
    prometheus_url: str | None = None,
    as_user: bool = False,
    read_secret: SecretReader | None = None,
    deadline_seconds: float = DEADLINE_SECONDS,
    slots: Mapping[str, str] | None = None,
    replica_sets: ReplicaSetControllers | None = None,
) -> Evaluation:
    """Observe and diagnose once; never raises for what Prometheus or a router answers. Prometheus: where the
    autoscaler reads it (the operator); `as_user` (the CLI, with the caller's own rights): `prometheus_url` without
    credentials when given, else the CR's URL or the settings' default one with the CR's prometheusAuth and no
    allow-list (that list guards the operator's requests, not the caller's). `settings`: the operator's, or the
    CLI's (only its default Prometheus URL). The router pods called are the reconciler's (`observe.router_pods`):
    `slots`, the router Deployments the CR owns (name -> uid) as the operator's watch shows them, else read now;
    `replica_sets`, the loop's cache of their ReplicaSets' controllers, else a fresh one."""
    meta = body.get("metadata") or {}
    namespace, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
    now = time.time() if now is None else now
    deadline = time.monotonic() + deadline_seconds
    core = client.CoreV1Api(api)
    metrics, why = None, None
    url: str | None
    credentials: Credentials | None
    if as_user and prometheus_url:
        url, credentials = prometheus_url, Credentials()
    elif as_user:
        url = spec.autoscaling.prometheus_url or settings.default_prometheus.url
        credentials, why = resolve_credentials(core, namespace, spec.autoscaling.prometheus_auth)
        why = why if url else "no Prometheus URL: give --prometheus-url"
    else:
        url, credentials, why = prometheus_access(core, namespace, spec.autoscaling, settings)
    if url is not None and credentials is not None:
        try:
            prometheus = connect(url, min(5.0, deadline_seconds), credentials)
            window = spec.diagnostics.window_seconds
            metrics = read_metrics(prometheus, namespace, name, window, deadline, disaggregated=spec.disaggregated)
        except Exception as e:  # e.g. a malformed URL
            why = f"cannot use Prometheus at {url[:200]!r}: {type(e).__name__}"
    reader = read_secret or secret_reader(api)
    api_key, key_error = _router_api_key(spec, namespace, reader)
    routers: tuple[RouterView, ...] = ()
    if not key_error:
        cache = replica_sets if replica_sets is not None else ReplicaSetControllers()
        own = router_pods(client.AppsV1Api(api), pods, namespace, name, cr_uid(body), slots, cache)
        routers = read_routers(own, spec.router.port, api_key, deadline)
    facts = fleet_facts(body, spec, pods, routers, now)
    if spec.disaggregation is not None:
        targets = bootstrap_targets(pods, facts, spec.disaggregation.bootstrap_port, cr_uid(body))
        facts = dataclasses.replace(facts, bootstrap=probe_bootstrap(targets, deadline))
    return Evaluation(diagnose(metrics, facts, spec.diagnostics, why), metrics)


def secret_reader(api: client.ApiClient) -> SecretReader:
    """Secrets of a namespace read with the operator's account; None for a missing one."""
    core = client.CoreV1Api(api)

    def read(namespace: str, name: str) -> Mapping[str, Any] | None:
        try:
            return dict(api.sanitize_for_serialization(
                core.read_namespaced_secret(name, namespace, _request_timeout=API_TIMEOUT)))  # fmt: skip
        except client.ApiException as e:
            if e.status == 404:
                return None
            raise

    return read


def _router_api_key(spec: SGLangDeploymentSpec, namespace: str, read: SecretReader) -> tuple[str | None, str | None]:
    """(key, None), (None, None) without one, or (None, why) when it cannot be used (routers: unknown). A missing,
    forbidden or bad Secret or key is one message (`secretref`), as the reconciler and the autoscaler say it."""
    ref = spec.router.api_key_secret_ref
    if ref is None:
        return None, None
    unusable = unusable_credential("spec.router.apiKeySecretRef", ref.name, ref.key)
    try:
        secret = read(namespace, ref.name)
    except client.ApiException as e:
        if e.status == 403:
            return None, unusable
        return None, f"spec.router.apiKeySecretRef: Secret {ref.name} could not be read now (HTTP {e.status})"
    except Exception as e:  # the API server unreachable or too slow
        return None, f"spec.router.apiKeySecretRef: Secret {ref.name} could not be read now ({type(e).__name__})"
    key = secret_key_text((secret or {}).get("data"), ref.key)
    return (key, None) if key is not None else (None, unusable)


@dataclass(frozen=True)
class DoctorPass:
    evolution: Evolution
    wrote: bool


def doctor_once(
    api: client.ApiClient,
    body: Mapping[str, Any],
    spec: SGLangDeploymentSpec,
    pods: Sequence[Mapping[str, Any]],
    settings: OperatorSettings,
    read_secret: SecretReader | None = None,
    now: float | None = None,
    slots: Mapping[str, str] | None = None,
    replica_sets: ReplicaSetControllers | None = None,
) -> DoctorPass:
    """The operator's pass: evaluate, apply hysteresis to the previous `status.diagnostics`, and report. `slots`,
    `replica_sets`: the router Deployments and the ReplicaSet cache `evaluate` selects router pods with."""
    now = time.time() if now is None else now
    evaluation = evaluate(
        api, body, spec, pods, settings, now=now, read_secret=read_secret, slots=slots, replica_sets=replica_sets
    )
    previous = (body.get("status") or {}).get("diagnostics")
    d = spec.diagnostics
    stamp = datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    evolution = evolve(previous, evaluation.diagnosis, d.appear_after, d.clear_after, stamp)
    meta = body["metadata"]
    publish(meta["namespace"], meta["name"], evolution.status)
    if evolution.status == previous or (is_empty(previous) and is_empty(evolution.status)):
        return DoctorPass(evolution, False)
    writer = Writer(api)
    writer.patch_diagnostics(meta["namespace"], meta["name"], evolution.status)
    for finding in evolution.appeared:
        writer.event(dict(body), f"Diagnosis{finding['type']}", finding_line(finding), warning=True)
    for finding in evolution.cleared:
        what = f" on {finding['pod']}" if finding.get("pod") else ""
        writer.event(dict(body), "DiagnosisCleared", f"{finding['type']}{what} no longer holds")
    return DoctorPass(evolution, True)


def clear_diagnostics(api: client.ApiClient, body: Mapping[str, Any]) -> bool:
    """Diagnostics switched off: empty `status.diagnostics` (once; True when written)."""
    if is_empty((body.get("status") or {}).get("diagnostics")):
        return False
    meta = body["metadata"]
    Writer(api).patch_diagnostics(meta["namespace"], meta["name"], {"findings": [], "tracking": [], "unknown": []})
    return True


def finding_line(finding: Mapping[str, Any]) -> str:
    where = f"replica {finding['replica']} ({finding['pod']}): " if finding.get("pod") else "fleet: "
    return f"{where}{finding['evidence']}. Action: {finding['action']}"


def publish(namespace: str, name: str, status: Mapping[str, Any]) -> None:
    """The metric `sglang_operator_diagnostic_findings{namespace,name,type}`: reported findings by type."""
    counts = dict.fromkeys(FINDING_TYPES, 0)
    for finding in status.get("findings") or []:
        if finding.get("type") in counts:
            counts[finding["type"]] += 1
    for kind, count in counts.items():
        operator_metrics.diagnostic_findings(namespace, name, kind, count)
