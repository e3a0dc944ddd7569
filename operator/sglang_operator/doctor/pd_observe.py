"""What the doctor reads of a disaggregated fleet besides what it reads of every fleet; pure (the I/O, the bootstrap
probe and the queries, is `observe`'s).

- A pod's role and what its KV handoff depends on, from its main container's launch command (the flags the operator
  rendered from `spec.disaggregation`) and its image's tag (the SGLang version): what runs, not what the spec says
  now, so pods left from an older spec or a rollout show as they are.
- The bootstrap servers to probe: each ready prefill replica's rank-0 pod the CR controls, on the port it declares
  as `bootstrap`.
- The PromQL of the PD signals: smg's `smg_pd_rendezvous_failures_total{leg, phase}` on the router pods (phase
  `probe`: a bootstrap port that refused smg's registration probe; `bootstrap` and `transfer`: what the engines report
  when the legs never met or the KV handoff failed), decode's prealloc queue, prefill's running requests and
  bootstrap queue.
"""

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ..api.groups import worker_groups
from ..api.releases import image_tag_version
from ..api.spec import SGLangDeploymentSpec
from ..observed import owned_workers
from ..prometheus.client import Queries, label_matchers
from ..render.workers import BOOTSTRAP_PORT_NAME, CONTAINER_NAME
from .model import FleetFacts, LaunchFacts

ROLES = ("prefill", "decode")
_LAUNCH_FLAGS = {
    "--page-size": "page_size",
    "--kv-cache-dtype": "kv_cache_dtype",
    "--disaggregation-transfer-backend": "transfer_backend",
}
_IP = re.compile(r"^[0-9a-fA-F:.]+$")


def main_container(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    """The SGLang container (`render.workers.CONTAINER_NAME`), else the first one; {} without containers."""
    containers = [c for c in (pod.get("spec") or {}).get("containers") or [] if isinstance(c, dict)]
    named = [c for c in containers if c.get("name") == CONTAINER_NAME]
    return (named or containers or [{}])[0]


def _flags(container: Mapping[str, Any]) -> dict[str, str]:
    """`--flag V` and `--flag=V` of the command and args (the last one wins, as in argparse)."""
    words = [w for w in [*(container.get("command") or []), *(container.get("args") or [])] if isinstance(w, str)]
    found: dict[str, str] = {}
    for i, word in enumerate(words):
        if word.startswith("--") and "=" in word:
            flag, value = word.split("=", 1)
            found[flag] = value
        elif word.startswith("--") and i + 1 < len(words) and not words[i + 1].startswith("--"):
            found[word] = words[i + 1]
    return found


def pod_role(pod: Mapping[str, Any]) -> str:
    """The pod's `--disaggregation-mode` (prefill or decode); "" for a colocated server."""
    mode = _flags(main_container(pod)).get("--disaggregation-mode", "")
    return mode if mode in ROLES else ""


def launch_facts(pod: Mapping[str, Any]) -> LaunchFacts:
    """What the pod's KV handoff depends on, as it was launched."""
    container = main_container(pod)
    flags = _flags(container)
    image = container.get("image")
    image = image[:200] if isinstance(image, str) else ""
    values = {field: flags.get(flag, "")[:64] for flag, field in _LAUNCH_FLAGS.items()}
    return LaunchFacts(version=image_tag_version(image) or image, **values)


def spec_launch(spec: SGLangDeploymentSpec) -> LaunchFacts:
    """What the spec launches every pod of a disaggregated fleet with (`topology.disaggregation_args`)."""
    dis, image = spec.disaggregation, spec.engine.sglang_image
    version = image_tag_version(image) or image
    if dis is None:
        return LaunchFacts(version=version)
    return LaunchFacts(
        page_size="" if dis.page_size is None else str(dis.page_size),
        kv_cache_dtype=dis.kv_cache_dtype or "",
        transfer_backend=dis.transfer_backend,
        version=version,
    )


def group_roles(spec: SGLangDeploymentSpec) -> dict[str, str]:
    """Worker group -> its role; only the groups that have one."""
    return {g.name: g.role for g in worker_groups(spec) if g.role}


def role_replicas(spec: SGLangDeploymentSpec) -> dict[str, int]:
    """Role -> the replicas the spec asks of that role's groups together."""
    counts: dict[str, int] = {}
    for g in worker_groups(spec):
        if g.role:
            counts[g.role] = counts.get(g.role, 0) + g.spec.replicas
    return counts


def bootstrap_port(pod: Mapping[str, Any], default: int) -> int:
    """The port the main container declares as `bootstrap` (a replica keeps the port it started with), else the
    spec's."""
    for port in main_container(pod).get("ports") or []:
        if not isinstance(port, dict):
            continue
        number = port.get("containerPort")
        if port.get("name") == BOOTSTRAP_PORT_NAME and isinstance(number, int) and 0 < number < 65536:
            return number
    return default


def bootstrap_targets(
    pods: Sequence[Mapping[str, Any]], facts: FleetFacts, default_port: int, uid: str
) -> list[tuple[str, str]]:
    """(pod, `http://<pod IP>:<bootstrap port>/health`) of each ready, serving prefill replica's rank-0 pod, among
    the worker pods the CR `uid` controls (`observed.owned_workers`): the port is the pod's own word, so a pod that
    only carries the labels is never probed."""
    by_name = {p.name: p for p in facts.pods}
    targets = []
    for pod in owned_workers(pods, uid):
        meta = pod.get("metadata") or {}
        fact = by_name.get(str(meta.get("name", "")))
        ip = (pod.get("status") or {}).get("podIP")
        if fact is None or fact.role != "prefill" or fact.rank != 0 or not fact.ready or not fact.serving:
            continue
        if not isinstance(ip, str) or not _IP.match(ip):
            continue
        host = f"[{ip}]" if ":" in ip else ip
        targets.append((fact.name, f"http://{host}:{bootstrap_port(pod, default_port)}/health"))
    return sorted(targets)


# -- PromQL ------------------------------------------------------------------------------------------------------------
RENDEZVOUS_METRIC = "smg_pd_rendezvous_failures_total"


def pd_promql(namespace: str, name: str, window: int, labels: Queries | None = None) -> dict[str, str]:
    """The PromQL of each PD field of `ReplicaMetrics`: per pod (the rendezvous failures per router pod, leg and
    phase)."""
    q = labels or Queries()
    base = {q.namespace_label: namespace, q.deployment_label: name}
    workers = label_matchers({**base, q.component_label: q.worker_component})
    routers = label_matchers({**base, q.component_label: q.router_component})
    pod, w = q.pod_label, f"{window}s"
    failures = f"{RENDEZVOUS_METRIC}{{{routers}}}"
    prealloc = f"sglang:num_decode_prealloc_queue_reqs{{{workers}}}"

    def mean(metric: str) -> str:
        return f"sum by ({pod}) (avg_over_time({metric}{{{workers}}}[{w}]))"

    return {
        # smg creates the series at its first failure: `increase` cannot see that one (it has no earlier sample),
        # so a series born in the window counts whole (`unless ... offset`).
        "rendezvous_failures": f"sum by ({pod}, leg, phase) ((increase({failures}[{w}]) > 0)"
        f" or ({failures} unless {failures} offset {w}))",
        "prealloc_queue": f"sum by ({pod}) ({prealloc})",
        "prealloc_growth": f"sum by ({pod}) (delta({prealloc}[{w}]))",
        "prealloc_lowest": f"sum by ({pod}) (min_over_time({prealloc}[{w}]))",
        "running_mean": mean("sglang:num_running_reqs"),
        # 0.5.12 renamed the prefill's bootstrap queue (it was num_prefill_prealloc_queue_reqs): either, per pod.
        "bootstrap_queue_mean": f"{mean('sglang:num_prefill_bootstrap_queue_reqs')} or "
        f"{mean('sglang:num_prefill_prealloc_queue_reqs')}",
    }


def per_router(result: Any, pod_label: str) -> dict[tuple[str, str, str], float]:
    """A vector by (pod, leg, phase) as {(router pod, leg, phase): value}; ValueError for another shape."""
    if not isinstance(result, list):
        raise ValueError("not a vector")
    out: dict[tuple[str, str, str], float] = {}
    for item in result:
        labels = item["metric"]
        pod, value = labels.get(pod_label), float(item["value"][1])
        if isinstance(pod, str) and math.isfinite(value):
            key = (pod, str(labels.get("leg", ""))[:32], str(labels.get("phase", ""))[:32])
            out[key] = value
    return out
