"""One idempotent reconcile pass: parse -> check policy -> children -> observe -> plan -> apply -> routers -> status.

Level-based: everything is read from the cluster's state (and the routers) on every pass, nothing needed for
correctness lives in memory, and a pass with nothing to change writes nothing. The state comes as a `Snapshot`:
from the operator's watch caches when the daemon runs the pass (no request to the API server), or read from the API
by `reconcile(namespace, name)` (tests, one-off runs).

Errors are status (like kuberay's `reconcileFuncs`): the pass runs step by step, each inside `_step`; the first
step that fails stops the pass, and `Degraded` says which step failed and what the API answered (reason ReconcileError),
with one Warning event per distinct problem, cleared by the next good pass. Name collisions and child kinds the
cluster does not serve are problems of the same kind that do not stop the pass.
"""

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from .. import metrics
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
from ..api.scaletarget import SCALE_PLURAL
from ..api.spec import SecretKeyRef, SGLangDeploymentSpec
from ..api.validation import check_pod_policy, parse_spec
from ..observed import ReplicaView, owned_by, router_pod_of
from ..render import Owner, replica_pods, shared_children
from ..runtime.kube import API_TIMEOUT
from ..runtime.state import KINDS, SECRETS, Expectations, Snapshot, TtlCache
from ..runtime.writer import ChildRef, KindUnavailable, Outcome, Writer, possible_children, stale_children
from ..secretref import secret_key_text, unusable_credential
from ..settings import OperatorSettings
from .apierrors import describe_causes
from .fleet import GroupPass, group_passes
from .inferencepool import membership_changes, membership_labels, pool_members
from .loads import fetch_in_flight
from .planner import Plan, plan_replicas
from .routers import observe_routers, sync_routers
from .scaletargets import STATUS_WRITES_PER_PASS, ScaleTargetVerdict, scale_target_counts, scale_target_status
from .status import (
    PROBLEM_REASONS,
    GroupObservation,
    Problem,
    RouterObservation,
    compute_status,
    condition,
    failed_pass_status,
    merge_conditions,
    problem_event,
    status_changed,
)

log = logging.getLogger(__name__)


@dataclass
class PassResult:
    plan: Plan | None = None
    writes: dict[str, int] = field(default_factory=dict)
    status: dict[str, Any] = field(default_factory=dict)
    failed: bool = False
    """A step failed: the loop retries with back-off instead of on the resync period."""
    expected: Expectations = field(default_factory=Expectations)
    """The pod writes of this pass, which the next pass waits to see in the watch."""
    routers_changed: bool = False
    """This pass added or removed workers on the routers without a failure: its status shows the lists from
    before (a new worker not yet registered, the CR not yet Ready), so the loop follows up soon instead of a
    resync period later."""


class StepFailed(Exception):
    """A step of the pass failed; the message is what status shows (no response body, no object content)."""


def describe_failure(step: str, exc: BaseException) -> str:
    """What failed, for status and events: the step and the API's status and reason, or the error's type. Pure.

    An ApiException's body is left out (it can quote the object, which a tenant wrote) except the fields it names as
    causes (`apierrors`: a refused child says which of its fields is wrong, without the value), as is the text of
    other errors (the log has it)."""
    if isinstance(exc, ApiException):
        return f"{step}: the API server answered {exc.status} {exc.reason}".rstrip() + describe_causes(exc.body)
    if isinstance(exc, KindUnavailable):
        return f"{step}: {exc}"
    return f"{step}: {type(exc).__name__}"


@contextmanager
def _step(name: str) -> Iterator[None]:
    try:
        yield
    except StepFailed:
        raise
    except ApiException as exc:
        log.warning("%s failed: %s %s", name, exc.status, exc.reason)
        raise StepFailed(describe_failure(name, exc)) from exc
    except Exception as exc:
        log.exception("%s failed", name)
        raise StepFailed(describe_failure(name, exc)) from exc


def _absent(replicas: list[ReplicaView], listed: set[str]) -> frozenset[int]:
    """Indices of the replicas whose URL is not in `listed` (or that have no URL yet)."""
    return frozenset(r.index for r in replicas if r.url is None or r.url not in listed)


class Reconciler:
    def __init__(
        self,
        api: client.ApiClient,
        settings: OperatorSettings,
        secrets: TtlCache | None = None,
        kinds: TtlCache | None = None,
    ) -> None:
        """`secrets`, `kinds`: the caches of Secrets and of served kinds (the process-wide ones by default)."""
        self.api = api
        self.core = client.CoreV1Api(api)
        self.apps = client.AppsV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.writer = Writer(api)
        self.settings = settings
        self.secrets = secrets if secrets is not None else SECRETS
        self.kinds = kinds if kinds is not None else KINDS
        self._snapshot = Snapshot(body={}, pods=[])

    # -- reads -------------------------------------------------------------------------------------------------
    def _get(self, reader: Any, *args: Any) -> dict[str, Any] | None:
        try:
            return dict(self.api.sanitize_for_serialization(reader(*args, _request_timeout=API_TIMEOUT)))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def _pods(self, component: str) -> list[dict[str, Any]]:
        """The snapshot's pods of one component (workers or routers); listed from the API, once per pass, when the
        snapshot holds none (`Snapshot.pods` None)."""
        if self._snapshot.pods is None:
            meta = self._snapshot.body["metadata"]
            listed = self.core.list_namespaced_pod(
                meta["namespace"], label_selector=f"{LABEL_DEPLOYMENT}={meta['name']}", _request_timeout=API_TIMEOUT
            )
            pods = [dict(self.api.sanitize_for_serialization(pod)) for pod in listed.items]
            self._snapshot = Snapshot(body=self._snapshot.body, pods=pods, children=self._snapshot.children)
        return [
            pod for pod in self._snapshot.pods or []
            if ((pod.get("metadata") or {}).get("labels") or {}).get(LABEL_COMPONENT) == component
        ]  # fmt: skip

    def _scale_targets(self) -> list[dict[str, Any]]:
        """The SGLangWorkerGroups naming this CR: from the watch, or listed when the snapshot has none (a cluster
        without their CRD has none)."""
        if self._snapshot.scale_targets is not None:
            return self._snapshot.scale_targets
        meta = self._snapshot.body["metadata"]
        try:
            listed = self.custom.list_namespaced_custom_object(
                GROUP, VERSION, meta["namespace"], SCALE_PLURAL, _request_timeout=API_TIMEOUT
            )
        except ApiException as exc:
            if exc.status == 404:
                return []
            raise
        return [t for t in listed.get("items") or [] if (t.get("spec") or {}).get("deployment") == meta["name"]]

    def _write_scale_targets(
        self,
        namespace: str,
        name: str,
        targets: list[dict[str, Any]],
        verdicts: list[ScaleTargetVerdict],
        status: dict[str, Any],
    ) -> None:
        """Each scale target's status: its group's serving replicas and pod selector (what an HPA reads through its
        /scale) and whether it is in effect; written only when it changed, and at most STATUS_WRITES_PER_PASS per
        pass (a namespace user may create any number of them; the rest are written by later passes)."""
        serving = {g["name"]: g["replicas"] for g in status.get("groups") or []}
        by_name = {str((t.get("metadata") or {}).get("name")): t for t in targets}
        stale = [(verdict, scale_target_status(verdict, by_name[verdict.name], serving, name)) for verdict in verdicts]
        stale = [(verdict, wanted) for verdict, wanted in stale if by_name[verdict.name].get("status") != wanted]
        # The ones in effect first (an HPA reads them), then those never written: none waits behind busy others.
        stale.sort(key=lambda item: (not item[0].in_effect, bool(by_name[item[0].name].get("status"))))
        for verdict, wanted in stale[:STATUS_WRITES_PER_PASS]:
            self.writer.patch_scale_target_status(namespace, verdict.name, wanted)

    def _secret_text(self, ref: SecretKeyRef | None, namespace: str, field: str) -> str | None:
        """A key of a Secret of the CR's namespace that the CR names at `field` (the router's or the workers' API
        key). Read only by passes that need it, and kept for `state.SECRET_TTL_SECONDS`: a rotated key is used
        within a minute, and a quiet fleet costs one GET per Secret per minute, not one per pass. Whatever makes it
        unusable is logged in the one message of `secretref` (nothing of the Secret's content or existence)."""
        if ref is None:
            return None

        def read() -> dict[str, Any] | None:
            try:
                return self._get(self.core.read_namespaced_secret, ref.name, namespace)
            except ApiException as exc:
                if exc.status == 403:  # forbidden reads as missing: the same message below
                    return None
                raise

        secret = self.secrets.get((namespace, ref.name), read)
        text = secret_key_text((secret or {}).get("data"), ref.key)
        if text is None:
            name = (self._snapshot.body.get("metadata") or {}).get("name")
            log.warning("%s/%s: %s", namespace, name, unusable_credential(field, ref.name, ref.key))
        return text

    # -- the pass ----------------------------------------------------------------------------------------------
    def reconcile(self, namespace: str, name: str) -> PassResult:
        """One pass from state read from the API server (the CR, then its pods and children as the pass goes)."""
        body = self._get(self.custom.get_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL, name)
        return PassResult() if body is None else self.run(Snapshot(body=body, pods=None))

    def run(self, snapshot: Snapshot) -> PassResult:
        """One pass over `snapshot`, timed and counted in the operator's metrics by result."""
        started = time.monotonic()
        result = PassResult()
        outcome = "error"
        try:
            result = self._run(snapshot)
            outcome = "error" if result.failed else "invalid" if result.plan is None and result.status else "ok"
            return result
        finally:
            metrics.observe_pass(time.monotonic() - started, outcome)
            for reason in _problem_reasons(result.status):
                metrics.count_error(reason)
            meta = snapshot.body.get("metadata") or {}
            if result.status and not meta.get("deletionTimestamp"):
                metrics.fleet_status(meta["namespace"], meta["name"], result.status)

    def _run(self, snapshot: Snapshot) -> PassResult:
        self._snapshot = snapshot
        self.writer.expected = Expectations(since=time.monotonic())
        body = snapshot.body
        namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
        if body["metadata"].get("deletionTimestamp"):
            return PassResult()
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        generation = int(body["metadata"].get("generation") or 0)
        previous: dict[str, Any] = body.get("status") or {}
        before = dict(self.writer.writes)
        spec, errors = parse_spec(body.get("spec"))
        if spec is None:
            return self._refuse(body, "InvalidSpec", "; ".join(str(e) for e in errors), before)
        violations = check_pod_policy(spec, self.settings.pod_policy)
        if violations:
            return self._refuse(body, "PolicyViolation", "; ".join(str(e) for e in violations), before)
        try:
            return self._pass(body, spec, before)
        except Exception as exc:  # a step's failure, or a bug between steps: either way, status says so
            if not isinstance(exc, StepFailed):
                log.exception("%s/%s: reconcile pass failed", namespace, name)
            message = str(exc) if isinstance(exc, StepFailed) else describe_failure("reconciling", exc)
            status = failed_pass_status(previous, Problem("ReconcileError", message), generation, stamp)
            self._write_status(body, previous, status)
            return PassResult(status=status, writes=self._delta(before), failed=True, expected=self.writer.expected)

    def _refuse(self, body: dict[str, Any], reason: str, message: str, before: dict[str, int]) -> PassResult:
        """A spec the operator will not act on: no child is written; Ready=False says why, with one event."""
        generation = int(body["metadata"].get("generation") or 0)
        previous: dict[str, Any] = body.get("status") or {}
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        refused = condition("Ready", False, reason, message, generation, stamp)
        status = {"observedGeneration": generation, "conditions": merge_conditions(
            list(previous.get("conditions") or []), [refused])}  # fmt: skip
        if status_changed(previous, status):
            self.writer.patch_status(body["metadata"]["namespace"], body["metadata"]["name"], status,
                                     body["metadata"]["resourceVersion"])  # fmt: skip
            self.writer.event(body, reason, message, warning=True)
        return PassResult(status=status, writes=self._delta(before))

    def _write_status(self, body: dict[str, Any], previous: dict[str, Any], status: dict[str, Any]) -> bool:
        """One status patch when anything changed, and one Warning event when a new problem appeared. True when
        status was written: events that say a status changed are posted only then (a patch refused because the
        snapshot was older than the object posts nothing; the next pass sees the newer one)."""
        meta = body["metadata"]
        if not status_changed(previous, status):
            return False
        try:
            written = self.writer.patch_status(meta["namespace"], meta["name"], status, meta["resourceVersion"])
        except Exception as exc:  # nothing else can report it: the log does, and the next pass tries again
            log.warning("%s/%s: status not written: %s", meta["namespace"], meta["name"], describe_failure("", exc))
            return False
        problem = problem_event(previous, status) if written else None
        if problem is not None:
            self.writer.event(body, problem.reason, problem.message, warning=True)
        return written

    def _children(self, spec: SGLangDeploymentSpec, owner: Owner) -> list[Problem]:
        """Write the rendered children the CR owns (or may create), delete the owned ones no longer rendered, and
        return the problems: names taken by objects the CR does not own, kinds the cluster does not serve."""
        with _step("rendering children"):
            rendered = shared_children(spec, owner, self.settings)
        wanted = {ChildRef.of(child) for child in rendered}
        observed: dict[ChildRef, dict[str, Any]] = {}
        unserved: set[tuple[str, str]] = set()
        watched = self._snapshot.children
        if watched is not None:  # from the watch: only a kind that may not be served costs a (cached) read
            for ref in possible_children(owner.name):
                if (ref.kind, ref.name) in watched:
                    observed[ref] = watched[(ref.kind, ref.name)]
                elif ref in wanted and "/" in ref.api_version and not self._served(ref, owner.namespace):
                    unserved.add((ref.api_version, ref.kind))
        for ref in possible_children(owner.name) if watched is None else []:
            with _step(f"reading {ref}"):
                try:
                    found = self.writer.read(ref, owner.namespace)
                except KindUnavailable:
                    unserved.add((ref.api_version, ref.kind))
                    continue
                except ApiException as exc:
                    if exc.status == 403 and ref not in wanted:
                        continue  # not allowed to read it, so never created it either: nothing to clean up
                    raise
            if found is not None:
                observed[ref] = found
        problems: list[Problem] = []
        for child in rendered:
            ref = ChildRef.of(child)
            if (ref.api_version, ref.kind) in unserved:
                problems.append(unserved_problem(ref))
                continue
            with _step(f"applying {ref}"):
                try:
                    outcome = self.writer.ensure(child, observed.get(ref), owner.uid)
                except KindUnavailable:
                    self.kinds.forget((owner.namespace, ref.api_version, ref.kind))
                    problems.append(unserved_problem(ref))
                    continue
            if outcome is Outcome.COLLISION:
                problems.append(Problem("NameCollision", f"{ref} exists and is not owned by this SGLangDeployment; "
                                        "left unchanged (rename or remove it)"))  # fmt: skip
            elif outcome is not Outcome.UNCHANGED:
                log.info("%s/%s: %s %s", owner.namespace, owner.name, outcome.value, ref)
        for ref in stale_children(owner.name, rendered, observed, owner.uid):
            with _step(f"deleting {ref}"):
                self.writer.delete_child(ref, owner.namespace, observed[ref])
            log.info("%s/%s: deleted %s (no longer rendered)", owner.namespace, owner.name, ref)
        return sorted(problems, key=lambda p: (p.reason != "NameCollision", p.message))

    def _served(self, ref: ChildRef, namespace: str) -> bool:
        """Whether the API server serves the child's kind (a custom one: a PodMonitor needs its CRD). One GET of
        the child, kept for `state.KIND_TTL_SECONDS` and shared by every CR of the namespace; an answer other than
        "not served" counts as served (the apply then says what is wrong)."""

        def read() -> bool:
            try:
                self.writer.read(ref, namespace)
            except KindUnavailable:
                return False
            except ApiException:
                return True
            return True

        return bool(self.kinds.get((namespace, ref.api_version, ref.kind), read))

    def _pass(self, body: dict[str, Any], spec: SGLangDeploymentSpec, before: dict[str, int]) -> PassResult:
        meta = body["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        now = datetime.now(UTC)
        stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
        generation = int(meta.get("generation") or 0)
        previous: dict[str, Any] = body.get("status") or {}
        owner = Owner(name=name, namespace=namespace, uid=meta["uid"])
        problems = self._children(spec, owner)

        with _step("reading worker pods"):
            pods = [pod for pod in self._pods(COMPONENT_WORKER) if owned_by(pod, owner.uid)]
        with _step("reading worker groups' scale targets"):
            scale_targets = self._scale_targets()
        scaled, verdicts = scale_target_counts(spec, name, scale_targets)
        groups = group_passes(spec, previous, pods, scaled)
        with _step("reading worker loads"):
            needs_loads = {g.name: g.needs_loads() for g in groups}
            needs_key = any(needs_loads.values()) or spec.router.enabled  # the routers get it with registrations
            worker_ref = spec.engine.api_key_secret_ref if needs_key else None
            worker_key = self._secret_text(worker_ref, namespace, "spec.engine.apiKeySecretRef")
            for group in groups:
                group.loads = fetch_in_flight(needs_loads[group.name], api_key=worker_key)

        routers = None
        if spec.router.enabled:
            with _step("reading router pods"):
                router_pods = [p for p in self._pods(COMPONENT_ROUTER) if router_pod_of(p, name)]
                api_key = self._secret_text(spec.router.api_key_secret_ref, namespace, "spec.router.apiKeySecretRef")
            with _step("reading router worker lists"):
                routers = observe_routers(router_pods, api_key, worker_api_key=worker_key)
        still_listed = routers.registered_urls() if routers is not None else set()
        everywhere = routers.listed_everywhere() if routers is not None else set()
        routed: list[str] = []
        members: set[str] = set()  # rank-0 pods in the InferencePool: registered everywhere, not leaving
        for group in groups:
            replicas = group.replicas
            deregistered, off_router = set(_absent(replicas, still_listed)), _absent(replicas, everywhere)
            group.plan = plan_replicas(replicas, group.targets(), group.loads.known, deregistered, now.timestamp(),
                                       off_router, unknown_loads=group.loads.unknown)  # fmt: skip
            leaving = set(group.plan.drain) | set(group.plan.delete)
            routed += [
                r.url for r in replicas
                if r.url and r.ready and r.draining_since is None and r.index not in leaving
                and (not r.warm or r.index in group.plan.promote)
            ]  # fmt: skip
            registered_urls = everywhere if routers is not None else None
            members |= pool_members(spec.inference_pool.enabled, replicas, leaving, registered_urls)
        router_obs = RouterObservation(enabled=False, ready_pods=0, registered=0, synced=True)
        routers_changed = False
        if routers is not None:
            with _step("syncing router membership"):
                synced = sync_routers(routers, routed)
            router_obs = synced.observation
            routers_changed = synced.changed and not synced.failures
            for failure in synced.failures:
                log.warning("%s/%s: %s", namespace, name, failure)
            # A replica a router still lists is not drained yet: the next pass decides again (and, preferring
            # removals under way, picks it again); its drain event is posted when the drain really starts.
            for group in groups:
                by_index = {r.index: r for r in group.replicas}
                held = [i for i in group.plan.drain if by_index[i].url in synced.unconfirmed_removals]
                if held:
                    log.info("%s/%s: replicas %s wait for a router to apply their removal", namespace, name, held)
                group.plan.drain = [i for i in group.plan.drain if i not in held]

        with _step("applying the replica plan"):
            self._label_pool_members(owner, groups, members)
            for group in groups:
                self._apply_plan(owner, group, stamp, body)
        observed = []
        for group in groups:
            by_index = {r.index: r for r in group.replicas}
            for index, timed_out in sorted(group.plan.finished_drains.items()):
                since = by_index[index].draining_since
                if index in group.plan.delete and since is not None:
                    metrics.drain_finished(max(0.0, now.timestamp() - since), timed_out)
            registered = sum(1 for r in group.replicas if r.url in everywhere and r.url in routed)
            observed.append(GroupObservation(name=group.name, spec=group.group.spec, desired=group.active,
                                             revision=group.revision, replicas=group.replicas, registered=registered,
                                             elastic=group.group.elastic, retired=group.retired))  # fmt: skip
        status = compute_status(
            name=name, namespace=namespace, generation=generation, spec=spec, groups=observed, router=router_obs,
            failed_replicas=sum(r.failed for g in groups for r in g.replicas), previous=previous, now=stamp,
            problems=problems,
        )  # fmt: skip
        written = self._write_status(body, previous, status)
        with _step("writing scale targets' status"):
            self._write_scale_targets(namespace, name, scale_targets, verdicts, status)
        if written and router_obs.error and _degraded_changed(previous, status):
            self.writer.event(body, "RegistrationFailed", router_obs.error, warning=True)
        plan = groups[0].plan if len(groups) == 1 else _merged_plan([g.plan for g in groups])
        return PassResult(plan=plan, status=status, writes=self._delta(before), expected=self.writer.expected,
                          routers_changed=routers_changed)  # fmt: skip

    def _label_pool_members(self, owner: Owner, groups: list[GroupPass], members: set[str]) -> None:
        """Set or remove the InferencePool membership label (`inferencepool.py`) where a worker pod's differs from
        `members`, through the bookkeeping apply. A pod whose drain starts on this pass is left to `_apply_plan`:
        its drain apply names no label, so the label goes in the same write that marks it draining."""
        live = {(p.get("metadata") or {}).get("name"): p for p in self._snapshot.pods or []}
        workers = {pod_name: live[pod_name] for g in groups for r in g.replicas for pod_name in r.pod_names
                   if pod_name in live}  # fmt: skip
        starting = {pod_name for g in groups for r in g.replicas if r.index in g.plan.drain for pod_name in r.pod_names}
        for pod_name, member in sorted(membership_changes(workers, members).items()):
            if pod_name in starting:
                continue
            meta = workers[pod_name].get("metadata") or {}
            annotations = _bookkeeping_annotations(meta)
            self.writer.annotate_pod(owner.namespace, pod_name, meta.get("uid"), annotations, membership_labels(member))

    def _apply_plan(self, owner: Owner, group: GroupPass, stamp: str, body: dict[str, Any]) -> None:
        plan, spec = group.plan, group.group.spec
        by_index = {r.index: r for r in group.replicas}
        live = {(p.get("metadata") or {}).get("name"): p for p in self._snapshot.pods or []}

        def bookkeeping(pod_name: str, change: dict[str, str]) -> None:
            """Apply the pod's bookkeeping annotations as they are plus `change`: the apply names every key the
            operator keeps on the pod, so none of the others is dropped."""
            meta = (live.get(pod_name) or {}).get("metadata") or {}
            kept = _bookkeeping_annotations(meta)
            self.writer.annotate_pod(owner.namespace, pod_name, meta.get("uid"), {**kept, **change})

        for index in plan.delete:
            for pod_name in by_index[index].pod_names:
                self.writer.delete_pod(owner.namespace, pod_name)
        for index in plan.drain:
            for pod_name in by_index[index].pod_names:
                bookkeeping(pod_name, {ANNOTATION_DRAINING: stamp})
            metrics.drain_started()
        for index in plan.promote:
            # "false", not a removed key: the pod was created with `warm: "true"`, a field of its create, which an
            # apply can change but not drop.
            for pod_name in by_index[index].pod_names:
                bookkeeping(pod_name, {ANNOTATION_WARM: "false"})
        for index, is_warm in [(i, False) for i in plan.create_active] + [(i, True) for i in plan.create_warm]:
            for pod in replica_pods(spec, owner, group.revision, index, group.name):
                if is_warm:
                    pod["metadata"]["annotations"][ANNOTATION_WARM] = "true"
                self.writer.create_pod(pod)
        drain_event = plan.drain_event
        prefix = f"group {group.name}: " if group.name else ""
        for event in plan.events + ([drain_event] if drain_event else []):
            self.writer.event(body, event.reason, prefix + event.message, event.warning)

    def _delta(self, before: dict[str, int]) -> dict[str, int]:
        return {verb: count - before.get(verb, 0) for verb, count in self.writer.writes.items()
                if count != before.get(verb, 0)}  # fmt: skip


def _merged_plan(plans: list[Plan]) -> Plan:
    """The plans of several groups as one, for what a pass reports (counts, emptiness); each group applied its
    own. Replica indices are per group, so the merged lists may repeat one."""
    merged = Plan()
    for plan in plans:
        for part in ("create_active", "create_warm", "promote", "drain", "delete", "events"):
            getattr(merged, part).extend(getattr(plan, part))
    return merged


def _bookkeeping_annotations(meta: dict[str, Any]) -> dict[str, str]:
    """The bookkeeping annotations a pod carries now: every apply of its bookkeeping names them all. Pure."""
    current = meta.get("annotations") or {}
    return {k: str(current[k]) for k in (ANNOTATION_DRAINING, ANNOTATION_WARM) if k in current}


def unserved_problem(ref: ChildRef) -> Problem:
    return Problem(
        "ChildKindUnavailable",
        f"{ref} not created: this cluster does not serve {ref.kind} ({ref.api_version}); is its CRD installed?",
    )


def _problem_reasons(status: dict[str, Any]) -> list[str]:
    """The reasons of the problems a pass's status reports (for the errors metric): Degraded's, or Ready's when the
    spec was refused. Pure."""
    reasons = []
    for c in status.get("conditions") or []:
        if c.get("type") == "Degraded" and c.get("status") == "True" and c.get("reason") in PROBLEM_REASONS:
            reasons.append(str(c["reason"]))
        if c.get("type") == "Ready" and c.get("reason") in ("InvalidSpec", "PolicyViolation"):
            reasons.append(str(c["reason"]))
    return reasons


def _degraded_changed(previous: dict[str, Any], new: dict[str, Any]) -> bool:
    """Whether `Degraded` differs from the last status (a router failure is posted once, not on every pass)."""

    def degraded(status: dict[str, Any]) -> Any:
        return next((c for c in status.get("conditions") or [] if c.get("type") == "Degraded"), None)

    old, current = degraded(previous), degraded(new)
    return old is None or current is None or (old.get("reason"), old.get("message")) != (
        current.get("reason"), current.get("message"))  # fmt: skip
