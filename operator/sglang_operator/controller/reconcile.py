"""One idempotent reconcile pass: parse -> observe -> plan -> apply -> sync routers -> status.

Level-based: everything is read from the cluster (and the routers) on every pass, nothing needed for correctness
lives in memory, and a pass with nothing to change writes nothing.
"""

import base64
import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from ..api.constants import (
    ANNOTATION_DRAINING,
    ANNOTATION_WARM,
    COMPONENT_ROUTER,
    COMPONENT_WORKER,
    GROUP,
    LABEL_COMPONENT,
    LABEL_DEPLOYMENT,
    PLURAL,
    VERSION,
)
from ..api.spec import SGLangDeploymentSpec
from ..api.validation import parse_spec
from ..render import Owner, replica_pods, revision_hash, shared_children
from .apply import Writer
from .loads import fetch_in_flight
from .observed import ReplicaView, group_replicas
from .planner import Plan, Targets, plan_replicas
from .routers import observe_routers, sync_routers
from .status import RouterObservation, compute_status, condition, merge_conditions, status_changed

log = logging.getLogger(__name__)


@dataclass
class PassResult:
    plan: Plan | None = None
    writes: dict[str, int] = field(default_factory=dict)
    status: dict[str, Any] = field(default_factory=dict)


def desired_replicas(spec: SGLangDeploymentSpec, status: dict[str, Any]) -> tuple[int, int]:
    """(active, warm): the autoscaler's count from status when it owns the fleet, else `spec.replicas`.

    A recommend-only autoscaler does not own it: its count in status is for comparison, and no warm replicas run.
    """
    scaling = spec.autoscaling
    if not scaling.enabled or scaling.recommend_only:
        return spec.replicas, 0
    autoscaler = status.get("autoscaler") or {}
    decided, warm = autoscaler.get("desiredReplicas"), autoscaler.get("warmReplicas")
    count = spec.replicas if decided is None else int(decided)
    return (
        max(scaling.min_replicas, min(scaling.max_replicas, count)),
        scaling.warm_replicas if warm is None else int(warm),
    )


def _absent(replicas: list[ReplicaView], listed: set[str]) -> frozenset[int]:
    """Indices of the replicas whose URL is not in `listed` (or that have no URL yet)."""
    return frozenset(r.index for r in replicas if r.url is None or r.url not in listed)


def _selector(name: str, component: str) -> str:
    return f"{LABEL_DEPLOYMENT}={name},{LABEL_COMPONENT}={component}"


class Reconciler:
    def __init__(self, api: client.ApiClient) -> None:
        self.api = api
        self.core = client.CoreV1Api(api)
        self.apps = client.AppsV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.writer = Writer(api)

    # -- reads -------------------------------------------------------------------------------------------------
    def _get(self, reader: Any, *args: Any) -> dict[str, Any] | None:
        try:
            return dict(self.api.sanitize_for_serialization(reader(*args)))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def _pods(self, namespace: str, name: str, component: str) -> list[dict[str, Any]]:
        pods = self.core.list_namespaced_pod(namespace, label_selector=_selector(name, component))
        return [dict(self.api.sanitize_for_serialization(pod)) for pod in pods.items]

    def _observed_child(self, child: dict[str, Any]) -> dict[str, Any] | None:
        namespace, name = child["metadata"]["namespace"], child["metadata"]["name"]
        if child["kind"] == "Deployment":
            return self._get(self.apps.read_namespaced_deployment, name, namespace)
        if child["kind"] == "Service":
            return self._get(self.core.read_namespaced_service, name, namespace)
        group, version = child["apiVersion"].split("/")
        return self._get(
            self.custom.get_namespaced_custom_object, group, version, namespace, child["kind"].lower() + "s", name
        )

    def _router_api_key(self, spec: SGLangDeploymentSpec, namespace: str) -> str | None:
        ref = spec.router.api_key_secret_ref
        if ref is None:
            return None
        secret = self._get(self.core.read_namespaced_secret, ref.name, namespace)
        encoded = ((secret or {}).get("data") or {}).get(ref.key)
        return base64.b64decode(encoded).decode() if encoded else None

    # -- the pass ----------------------------------------------------------------------------------------------
    def reconcile(self, namespace: str, name: str) -> PassResult:
        body = self._get(self.custom.get_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL, name)
        if body is None or body["metadata"].get("deletionTimestamp"):
            return PassResult()
        now = datetime.now(UTC)
        stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
        generation = int(body["metadata"].get("generation") or 0)
        previous: dict[str, Any] = body.get("status") or {}
        before = dict(self.writer.writes)
        spec, errors = parse_spec(body.get("spec"))
        if spec is None:
            message = "; ".join(str(e) for e in errors)
            invalid = condition("Ready", False, "InvalidSpec", message, generation, stamp)
            status = {"observedGeneration": generation, "conditions": merge_conditions(
                list(previous.get("conditions") or []), [invalid])}  # fmt: skip
            if status_changed(previous, status):
                self.writer.patch_status(namespace, name, status, body["metadata"]["resourceVersion"])
                self.writer.event(body, "InvalidSpec", message, warning=True)
            return PassResult(status=status, writes=self._delta(before))

        owner = Owner(name=name, namespace=namespace, uid=body["metadata"]["uid"])
        for child in shared_children(spec, owner):
            if self.writer.ensure(child, self._observed_child(child)):
                log.info("applied %s/%s", child["kind"], child["metadata"]["name"])

        revision = revision_hash(spec)
        active, warm = desired_replicas(spec, previous)
        replicas = group_replicas(self._pods(namespace, name, COMPONENT_WORKER))
        serving = [r for r in replicas if r.draining_since is None and not r.warm]
        needs_loads = [r for r in replicas if r.draining_since is not None] + (
            serving if len(serving) > active or any(r.revision != revision for r in serving) else []
        )
        loads = fetch_in_flight(needs_loads)

        router_pods = self._pods(namespace, name, COMPONENT_ROUTER) if spec.router.enabled else []
        routers = observe_routers(router_pods, self._router_api_key(spec, namespace)) if spec.router.enabled else None
        still_listed = routers.registered_urls() if routers is not None else set()
        everywhere = routers.listed_everywhere() if routers is not None else set()
        deregistered, off_router = set(_absent(replicas, still_listed)), _absent(replicas, everywhere)
        plan = plan_replicas(replicas, Targets(active, warm, revision, spec.update_strategy), loads, deregistered,
                             now.timestamp(), off_router)  # fmt: skip

        by_index = {r.index: r for r in replicas}
        leaving = set(plan.drain) | set(plan.delete)
        routed = [
            r.url for r in replicas
            if r.url and r.ready and r.draining_since is None and r.index not in leaving
            and (not r.warm or r.index in plan.promote)
        ]  # fmt: skip
        router_obs = RouterObservation(enabled=False, ready_pods=0, registered=0, synced=True)
        if routers is not None:
            synced = sync_routers(routers, routed)
            router_obs = synced.observation
            for failure in synced.failures:
                self.writer.event(body, "RegistrationFailed", failure, warning=True)
            # A replica a router still lists is not drained yet: the next pass decides again (and, preferring
            # removals under way, picks it again); its drain event is posted when the drain really starts.
            held = [i for i in plan.drain if by_index[i].url in synced.unconfirmed_removals]
            if held:
                log.info("%s/%s: replicas %s wait for a router to apply their removal", namespace, name, held)
            plan.drain = [i for i in plan.drain if i not in held]

        self._apply_plan(spec, owner, revision, replicas, plan, stamp, body)
        status = compute_status(
            name=name, namespace=namespace, generation=generation, spec=spec, desired=active, revision=revision,
            replicas=replicas, router=router_obs, failed_replicas=sum(r.failed for r in replicas),
            previous=previous, now=stamp,
        )  # fmt: skip
        qps = ((previous.get("autoscaler") or {}).get("observed") or {}).get("qps")
        if qps is not None:
            status["qps"] = qps
        if status_changed(previous, status):
            self.writer.patch_status(namespace, name, status, body["metadata"]["resourceVersion"])
        return PassResult(plan=plan, status=status, writes=self._delta(before))

    def _apply_plan(
        self,
        spec: SGLangDeploymentSpec,
        owner: Owner,
        revision: str,
        replicas: list[ReplicaView],
        plan: Plan,
        stamp: str,
        body: dict[str, Any],
    ) -> None:
        by_index = {r.index: r for r in replicas}
        for index in plan.delete:
            for pod_name in by_index[index].pod_names:
                self.writer.delete_pod(owner.namespace, pod_name)
        for index in plan.drain:
            for pod_name in by_index[index].pod_names:
                self.writer.annotate_pod(owner.namespace, pod_name, {ANNOTATION_DRAINING: stamp})
        for index in plan.promote:
            for pod_name in by_index[index].pod_names:
                self.writer.annotate_pod(owner.namespace, pod_name, {ANNOTATION_WARM: None})
        for index, is_warm in [(i, False) for i in plan.create_active] + [(i, True) for i in plan.create_warm]:
            for pod in replica_pods(spec, owner, revision, index):
                if is_warm:
                    pod["metadata"]["annotations"][ANNOTATION_WARM] = "true"
                self.writer.create_pod(pod)
        drain_event = plan.drain_event
        for event in plan.events + ([drain_event] if drain_event else []):
            self.writer.event(body, event.reason, event.message, event.warning)

    def _delta(self, before: dict[str, int]) -> dict[str, int]:
        return {verb: count - before.get(verb, 0) for verb, count in self.writer.writes.items()
                if count != before.get(verb, 0)}  # fmt: skip
