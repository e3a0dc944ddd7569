"""What the doctor reads, and the pure parsing of it.

I/O: per-replica PromQL over the window (the autoscaler's client, credentials and label names, see
`prometheus.client`; in a disaggregated fleet also the PD signals of `pd_observe.pd_promql`), each router pod's
worker list (`router.client`) and, in a disaggregated fleet, each ready prefill's bootstrap server
(`probe_bootstrap`). Every such call is bounded by what is left of one total deadline for the whole evaluation; a
failed or malformed answer makes that signal unknown (None), never an exception out of the evaluation. Which pods are
the fleet's routers is read from the API server first (`router_pods`: their ReplicaSets' controllers, as the
reconciler reads them), under the API client's own timeout.

Pure: `pod_facts` and `fleet_facts` turn the pods' and the CR's JSON into the doctor's values.
"""

import dataclasses
import logging
import math
import re
import shlex
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from kubernetes import client

from ..api.constants import (
    ANNOTATION_DRAINING,
    ANNOTATION_WARM,
    LABEL_NODE_RANK,
    LABEL_REPLICA,
    LABEL_WORKER_GROUP,
)
from ..api.spec import SGLangDeploymentSpec
from ..observed import owned_workers
from ..prometheus.client import PrometheusClient, Queries, failure_reason, label_matchers
from ..router.client import RouterClient, RouterError
from ..runtime.httpcall import CallFailed, describe, request
from ..runtime.routerpods import ReplicaSetControllers, read_deployment, router_candidates, slot_deployments
from .diagnose import scale_ups
from .model import BootstrapProbe, FleetFacts, PodFacts, ReplicaMetrics, RouterView
from .pd_observe import group_roles, launch_facts, pd_promql, per_router, pod_role, role_replicas, spec_launch

MIN_CALL_SECONDS = 0.5
"""A call is not started with less than this left of the deadline."""
PROBE_SECONDS = 2.0
"""One bootstrap probe's deadline (SGLang's bootstrap server answers `GET /health` at once)."""
_PROBE_ANSWER_BYTES = 4096
"""SGLang answers `OK`: a longer answer is not a bootstrap server's."""
log = logging.getLogger(__name__)


def promql(namespace: str, name: str, window: int, labels: Queries | None = None) -> dict[str, str]:
    """The per-replica PromQL of each `ReplicaMetrics` field, grouped by the pod label."""
    q = labels or Queries()
    workers = label_matchers(
        {q.namespace_label: namespace, q.deployment_label: name, q.component_label: q.worker_component}
    )
    namespace_only = label_matchers({q.namespace_label: namespace})
    pod, w = q.pod_label, f"{window}s"

    def mean_of(metric: str) -> str:
        total = f"sum by ({pod}) (rate({metric}_sum{{{workers}}}[{w}]))"
        return f"{total} / sum by ({pod}) (rate({metric}_count{{{workers}}}[{w}]))"

    return {
        # Little's law: seconds of request per second is the mean number in the replica (running + queued) over
        # the whole window, where averaging the num_running_reqs gauge would sample it at a few scrape instants
        # (a false LoadImbalance on a healthy fleet: docs/doctor.md, "Why load is read through Little's law").
        "load": f"sum by ({pod}) (rate(sglang:e2e_request_latency_seconds_sum{{{workers}}}[{w}]))",
        "requests": f"sum by ({pod}) (increase(sglang:num_requests_total{{{workers}}}[{w}]))",
        "ttft": mean_of("sglang:time_to_first_token_seconds"),
        "itl": mean_of("sglang:inter_token_latency_seconds"),
        "cache_hit_rate": f"avg by ({pod}) (avg_over_time(sglang:cache_hit_rate{{{workers}}}[{w}]))",
        "gpu_model": f"count by ({pod}, modelName) (DCGM_FI_DEV_GPU_UTIL{{{namespace_only}}})",
    }


def read_metrics(
    client: PrometheusClient,
    namespace: str,
    name: str,
    window: int,
    deadline: float,
    labels: Queries | None = None,
    disaggregated: bool = False,
) -> ReplicaMetrics:
    """Each per-replica signal over the window (and the PD signals of a disaggregated fleet); a query that fails,
    times out or answers in another shape leaves its field None and says why in `errors`. Stops querying once the
    deadline (monotonic seconds) has passed."""
    pod_label = (labels or Queries()).pod_label
    queries = promql(namespace, name, window, labels)
    if disaggregated:
        queries |= pd_promql(namespace, name, window, labels)
    parsers = {"gpu_model": _labels, "rendezvous_failures": per_router}
    values: dict[str, Any] = {}
    errors: list[str] = []
    for field, query in queries.items():
        left = deadline - time.monotonic()
        if left < MIN_CALL_SECONDS:
            errors.append(f"{field}: not read, the evaluation's deadline passed")
            continue
        try:
            result = client.custom_query(query, timeout=left)
            values[field] = parsers.get(field, _per_pod)(result, pod_label)
        except Exception as e:  # whatever the client or Prometheus does wrong is "unknown", never raised
            errors.append(f"{field}: {_why(e)}")
    return ReplicaMetrics(window_seconds=window, errors=tuple(errors), **values)


def _per_pod(result: Any, pod_label: str) -> Mapping[str, float]:
    if not isinstance(result, list):
        raise ValueError("not a vector")
    out: dict[str, float] = {}
    for item in result:
        pod = item["metric"].get(pod_label)
        value = float(item["value"][1])
        if isinstance(pod, str) and math.isfinite(value):
            out[pod] = value
    return out


def _labels(result: Any, pod_label: str) -> Mapping[str, str]:
    if not isinstance(result, list):
        raise ValueError("not a vector")
    out: dict[str, str] = {}
    for item in result:
        pod, model = item["metric"].get(pod_label), item["metric"].get("modelName")
        if isinstance(pod, str) and isinstance(model, str):
            out[pod] = model[:128]
    return out


def _why(error: BaseException) -> str:
    """Why a query failed, never what the server said."""
    if isinstance(error, KeyError | IndexError | TypeError | ValueError | AttributeError):
        return "unexpected answer (not a PromQL vector)"
    return failure_reason(error, 0)


def read_routers(
    router_pods: Sequence[Mapping[str, Any]], port: int, api_key: str | None, deadline: float
) -> tuple[RouterView, ...]:
    """Each Ready router pod's worker list (URL -> healthy); a router that cannot be read has `workers` None."""
    views = []
    for pod in router_pods:
        ip = (pod.get("status") or {}).get("podIP")
        name = str((pod.get("metadata") or {}).get("name", ""))
        if not ip or not _ready(pod) or (pod.get("metadata") or {}).get("deletionTimestamp"):
            continue
        left = deadline - time.monotonic()
        if left < MIN_CALL_SECONDS:
            views.append(RouterView(name, None))
            continue
        router = RouterClient(f"http://{ip}:{port}", api_key, timeout=min(left, 5.0))
        try:
            workers = router.list_workers()
            views.append(RouterView(name, {w.url: w.healthy for w in workers if w.status != "draining"}))
        except RouterError:
            views.append(RouterView(name, None))
        finally:
            router.close()
    return tuple(views)


def probe_bootstrap(targets: Sequence[tuple[str, str]], deadline: float) -> tuple[BootstrapProbe, ...] | None:
    """`GET` each (pod, bootstrap health URL) once, each call under what is left of the deadline (at most
    `PROBE_SECONDS`): a refused connection, a timeout or another status than 200 does not answer. None (unknown)
    when the deadline ends before every target was probed."""
    probes = []
    for pod, url in targets:
        left = deadline - time.monotonic()
        if left < MIN_CALL_SECONDS:
            return None
        try:
            answer = request("GET", url, deadline_seconds=min(left, PROBE_SECONDS), max_bytes=_PROBE_ANSWER_BYTES)
            why = "" if answer.status == 200 else f"{describe('GET', url)}: HTTP {answer.status}"
        except CallFailed as e:
            why = str(e)
        probes.append(BootstrapProbe(pod, url, why))
    return tuple(probes)


# -- pure parsing ----------------------------------------------------------------------------------------------------
def _time(value: Any) -> float | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _condition(status: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    for c in status.get("conditions") or []:
        if isinstance(c, dict) and c.get("type") == kind:
            return c
    return {}


def _ready(pod: Mapping[str, Any]) -> bool:
    return _condition(pod.get("status") or {}, "Ready").get("status") == "True"


def pod_facts(pod: Mapping[str, Any]) -> PodFacts:
    """The doctor's view of one worker pod's JSON."""
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    containers = [c for c in status.get("containerStatuses") or [] if isinstance(c, dict)]
    main = containers[0] if containers else {}
    running = (main.get("state") or {}).get("running") or {}
    ready = _ready(pod)
    try:
        rank = int(labels.get(LABEL_NODE_RANK, "0"))
    except ValueError:
        rank = -1
    serving = (
        not meta.get("deletionTimestamp")
        and ANNOTATION_DRAINING not in annotations
        and annotations.get(ANNOTATION_WARM) != "true"
    )
    restarts = main.get("restartCount")
    return PodFacts(
        role=pod_role(pod),
        launch=launch_facts(pod),
        name=str(meta.get("name", "")),
        replica=str(labels.get(LABEL_REPLICA, "")),
        group=str(labels.get(LABEL_WORKER_GROUP, "")),
        rank=rank,
        node=str(spec.get("nodeName") or ""),
        created=_time(meta.get("creationTimestamp")),
        scheduled=_time(_condition(status, "PodScheduled").get("lastTransitionTime")),
        started=_time(running.get("startedAt")),
        ready=ready,
        ready_since=_time(_condition(status, "Ready").get("lastTransitionTime")) if ready else None,
        restarts=restarts if isinstance(restarts, int) else 0,
        serving=serving,
    )


def _flag(args: Sequence[str], flag: str, default: float) -> float:
    """The value of `--flag V` or `--flag=V` in the router's extra args (the last one wins, as in argparse)."""
    value = default
    words = list(args)
    for i, word in enumerate(words):
        text = None
        if word == flag and i + 1 < len(words):
            text = words[i + 1]
        elif word.startswith(flag + "="):
            text = word.split("=", 1)[1]
        if text is not None:
            try:
                number = float(text)
            except ValueError:
                continue
            value = number if math.isfinite(number) else value
    return value


def _split(args: Sequence[str]) -> list[str]:
    words: list[str] = []
    for arg in args:
        try:
            words += shlex.split(arg)
        except ValueError:
            words.append(arg)
    return words


_URL = re.compile(r"^[0-9a-fA-F:.]+$")


def _http_port(pod: Mapping[str, Any], default: int) -> int:
    """The main container's `http` port (what `observed` registers), else the spec's engine port."""
    containers = (pod.get("spec") or {}).get("containers") or []
    for port in (containers[0].get("ports") or []) if containers and isinstance(containers[0], dict) else []:
        if isinstance(port, dict) and port.get("name") == "http" and isinstance(port.get("containerPort"), int):
            return int(port["containerPort"])
    return default


def fleet_facts(
    body: Mapping[str, Any],
    spec: SGLangDeploymentSpec,
    pods: Sequence[Mapping[str, Any]],
    routers: Sequence[RouterView],
    now: float,
) -> FleetFacts:
    """The fleet's non-metric facts from the CR and its pods (workers and routers, as the pod index holds them): only
    the worker pods the CR controls (`observed.owned_workers`, the reconciler's own selection), never by label."""
    workers = owned_workers(pods, cr_uid(body))
    facts = tuple(pod_facts(p) for p in workers)
    urls = {}
    for pod, fact in zip(workers, facts, strict=True):
        ip = (pod.get("status") or {}).get("podIP")
        if fact.rank == 0 and isinstance(ip, str) and _URL.match(ip):
            urls[fact.name] = f"http://{ip}:{_http_port(pod, spec.engine.port)}"  # as the reconciler registers it
    status = body.get("status") or {}
    autoscaler = status.get("autoscaler") or {}
    owns = spec.autoscaling.enabled and not spec.autoscaling.recommend_only
    if spec.disaggregated:  # a pod launched without a mode (an older spec's) takes its group's role
        roles = group_roles(spec)
        facts = tuple(f if f.role else dataclasses.replace(f, role=roles.get(f.group, "")) for f in facts)
    args = _split(spec.router.args)
    return FleetFacts(
        now=now,
        pods=facts,
        policy=spec.router.policy,
        sticky_sessions=spec.router.sticky_sessions.enabled,
        router_enabled=spec.router.enabled,
        balance_abs_threshold=_flag(args, "--balance-abs-threshold", 64.0),
        balance_rel_threshold=_flag(args, "--balance-rel-threshold", 1.5),
        cache_type=spec.model.cache.type,
        routers=tuple(routers),
        pod_urls=urls,
        scale_ups=scale_ups(autoscaler.get("history"), not owns),
        ready_replicas=int(status.get("readyReplicas") or 0) if isinstance(status.get("readyReplicas"), int) else 0,
        disaggregated=spec.disaggregated,
        role_replicas=role_replicas(spec),
        launch=spec_launch(spec),
    )


def cr_uid(body: Mapping[str, Any]) -> str:
    """The CR's uid ("" when absent: then no pod is its)."""
    uid = (body.get("metadata") or {}).get("uid")
    return uid if isinstance(uid, str) else ""


def router_pods(
    apps: client.AppsV1Api,
    pods: Sequence[Mapping[str, Any]],
    namespace: str,
    deployment: str,
    owner_uid: str,
    slots: Mapping[str, str] | None,
    replica_sets: ReplicaSetControllers,
) -> list[Mapping[str, Any]]:
    """The fleet's router pods, selected as the reconciler selects them (`runtime.routerpods`: a pod of a ReplicaSet
    that the CR's own router Deployment of that slot controls, by uid), never by label or name alone: the doctor
    sends them the router's API key. `slots`: the router Deployments the CR owns, name -> uid, as the watch shows
    them; None: read now (the CLI). A read that fails leaves no router pod (the routers unknown), never an
    exception."""
    if not router_candidates(pods, deployment):
        return []  # nothing to read: no pod is even named as a router's
    try:
        if slots is None:
            slots = slot_deployments(deployment, owner_uid, read_deployment(apps, namespace))
        return replica_sets.router_pods(apps, pods, namespace, deployment, slots)
    except Exception as e:  # the API server unreachable, too slow, or the reader may not read ReplicaSets
        log.warning("%s/%s: router pods not read, so not called (%s)", namespace, deployment, _why_not(e))
        return []


def _why_not(error: BaseException) -> str:
    """Why a read of the API server failed, never what it said (a tenant can write what it quotes)."""
    status = getattr(error, "status", None)
    return f"HTTP {status}" if isinstance(status, int) else type(error).__name__
