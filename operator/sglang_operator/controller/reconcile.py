"""One idempotent reconcile pass, as a chain of named steps over a snapshot of one CR:

    parse + policy -> children -> observe -> decide -> sync routers -> switch -> apply replicas -> report

`children` observes, decides and writes the shared children (Services, the router Deployments, ...); `observe`
reads the worker pods, the scale targets, the loads the plan needs, the routers' lists and (prefill/decode) whether
new prefills' bootstrap servers answer; `decide` (pure, `steps.py`) plans each group and says who is routed and who
is in the InferencePool; `sync routers` makes every router list the routed workers (of its KV epoch); `switch`
moves a prefill/decode fleet's router Service to a new KV epoch once its generation is whole (`cutover.py`);
`apply replicas` carries out the plans (only the drains every router confirmed); `report` writes status, the scale
targets' status and events. Each step returns a frozen value the next ones read.

Level-based: everything is read from the cluster's state (and the routers) on every pass, nothing needed for
correctness lives in memory, and a pass with nothing to change writes nothing. The state comes as a `Snapshot`,
from the operator's watch caches when the loop runs the pass (no request to the API server), or read from the API
into the same shape by `reconcile(namespace, name)` (tests, one-off runs): one read path.

Errors are status (like kuberay's `reconcileFuncs`): each step runs inside `_step`; the first step that fails stops
the pass, and `Degraded` says which step failed and what the API answered (reason ReconcileError), with one Warning
event per distinct problem, cleared by the next good pass. Name collisions and child kinds the cluster does not
serve are problems of the same kind that do not stop the pass.
"""

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from .. import metrics, names
from ..api.constants import ANNOTATION_DRAINING, ANNOTATION_WARM
from ..api.spec import SecretKeyRef
from ..api.validation import check_pod_policy, parse_spec
from ..kvepoch import Cutover, kv_epoch, plan_cutover
from ..observed import owned_by, owned_workers, pod_epoch
from ..render import Owner, replica_pods, shared_children
from ..render.router import router_service
from ..runtime.conditions import condition, merge_conditions
from ..runtime.kube import API_TIMEOUT
from ..runtime.readback import read_snapshot
from ..runtime.routerpods import ReplicaSetControllers, slot_deployments
from ..runtime.state import SECRETS, SERVED_KINDS, Expectations, Snapshot, TtlCache
from ..runtime.writer import ChildRef, KindUnavailable, Outcome, Writer, possible_children, stale_children
from ..secretref import secret_key_text, unusable_credential
from ..settings import OperatorSettings
from .apierrors import describe_causes
from .bootstrap import prefill_ports, probe_bootstrap, to_probe
from .cutover import SETTLE_SECONDS, switch_check
from .fleet import GroupPass, group_passes
from .inferencepool import membership_changes, membership_labels
from .loads import fetch_in_flight
from .planner import Plan
from .routers import observe_routers, sync_routers
from .scaletargets import STATUS_WRITES_PER_PASS, ScaleTargetVerdict, scale_target_counts, scale_target_status
from .status import (
    PROBLEM_REASONS,
    Problem,
    RouterObservation,
    compute_status,
    failed_pass_status,
    problem_event,
    status_changed,
)
from .steps import (
    Decided,
    PassContext,
    RouterSync,
    Seen,
    applied_plan,
    decide,
    drains_now,
    merged_plan,
    observations,
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
        self.writer = Writer(api)
        self.settings = settings
        self.secrets = secrets if secrets is not None else SECRETS
        self.kinds = kinds if kinds is not None else SERVED_KINDS
        self.replica_sets = ReplicaSetControllers()
        """The controllers of the router pods' ReplicaSets, as read (`runtime.routerpods`)."""

    # -- entry points ------------------------------------------------------------------------------------------
    def reconcile(self, namespace: str, name: str) -> PassResult:
        """One pass over the CR as the API server shows it now (tests, one-off runs): the snapshot is read into the
        shape the watches give the loop, then run the same way."""
        snapshot = read_snapshot(self.writer, namespace, name)
        return PassResult() if snapshot is None else self.run(snapshot)

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
        """Parse and check the spec, then run the steps; a failed step becomes status."""
        self.writer.expected = Expectations(since=time.monotonic())
        body = snapshot.body
        meta = body["metadata"]
        if meta.get("deletionTimestamp"):
            return PassResult()
        before = dict(self.writer.writes)
        spec, errors = parse_spec(body.get("spec"))
        if spec is None:
            return self._refuse(body, "InvalidSpec", "; ".join(str(e) for e in errors), before)
        violations = check_pod_policy(spec, self.settings.pod_policy)
        if violations:
            return self._refuse(body, "PolicyViolation", "; ".join(str(e) for e in violations), before)
        ctx = PassContext(
            body=body, spec=spec, owner=Owner(name=meta["name"], namespace=meta["namespace"], uid=meta["uid"]),
            now=datetime.now(UTC), pods=list(snapshot.pods or []), children=dict(snapshot.children or {}),
            scale_targets=list(snapshot.scale_targets or []),
        )  # fmt: skip
        try:
            return self._steps(ctx, before)
        except Exception as exc:  # a step's failure, or a bug between steps: either way, status says so
            if not isinstance(exc, StepFailed):
                log.exception("%s/%s: reconcile pass failed", ctx.namespace, ctx.name)
            message = str(exc) if isinstance(exc, StepFailed) else describe_failure("reconciling", exc)
            status = failed_pass_status(ctx.previous, Problem("ReconcileError", message), ctx.generation, ctx.stamp)
            self._write_status(body, ctx.previous, status)
            return PassResult(status=status, writes=self._delta(before), failed=True, expected=self.writer.expected)

    def _steps(self, ctx: PassContext, before: dict[str, int]) -> PassResult:
        """The chain: each step reads what the earlier ones returned; the first failure ends it (`StepFailed`)."""
        problems, cutover = self._children(ctx)
        seen = self._observe(ctx, cutover)
        decided = decide(ctx.spec, seen, ctx.now.timestamp())
        sync = self._sync_routers(ctx, seen, decided)
        waiting = self._switch(ctx, seen)
        plans = {group.name: applied_plan(decided, sync, group.name) for group in seen.groups}
        problems = _ordered(problems + self._apply_replicas(ctx, seen, decided.members, sync, plans))
        status = self._report(ctx, seen, decided, sync, problems, waiting)
        return PassResult(plan=merged_plan(list(plans.values())), status=status, writes=self._delta(before),
                          expected=self.writer.expected, routers_changed=sync.changed)  # fmt: skip

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

    # -- step: children ----------------------------------------------------------------------------------------
    def _children(self, ctx: PassContext) -> tuple[list[Problem], Cutover | None]:
        """Write the rendered children the CR owns (or may create), delete the owned ones no longer rendered (a
        prefill/decode fleet's router slot is kept while its epoch serves or has workers), and return the problems
        (names taken by objects the CR does not own, kinds the cluster does not serve) and the cut-over state."""
        owner = ctx.owner
        with _step("rendering children"):
            cutover = self._cutover(ctx)
            rendered = shared_children(ctx.spec, owner, self.settings, cutover)
        observed, unserved = self._observed_children(ctx, {ChildRef.of(child) for child in rendered})
        problems: list[Problem] = []
        for child in rendered:
            ref = ChildRef.of(child)
            if (ref.api_version, ref.kind) in unserved:
                problems.append(unserved_problem(ref))
                continue
            problem = self._ensure_child(owner, child, observed.get(ref))
            if problem is not None:
                problems.append(problem)
        kept = set(cutover.kept) if cutover is not None else set()
        for ref in stale_children(owner.name, rendered, observed, owner.uid):
            if ref.kind == "Deployment" and ref.name in kept:
                continue
            with _step(f"deleting {ref}"):
                self.writer.delete_child(ref, owner.namespace, observed[ref])
            log.info("%s/%s: deleted %s (no longer rendered)", owner.namespace, owner.name, ref)
        return _ordered(problems), cutover

    def _cutover(self, ctx: PassContext) -> Cutover | None:
        """A prefill/decode fleet's routers between KV epochs, from its own router Service and Deployments and its
        worker pods' epochs (`kvepoch.plan_cutover`); None for a colocated fleet or one without a router."""
        if not ctx.spec.disaggregated or not ctx.spec.router.enabled:
            return None
        uid = ctx.owner.uid

        def own(kind: str, name: str) -> dict[str, Any] | None:
            child = ctx.children.get((kind, name))
            return child if child is not None and owned_by(child, uid) else None

        slots = {name: child for name in names.router_slots(ctx.name) if (child := own("Deployment", name))}
        workers = [pod_epoch(p) for p in owned_workers(ctx.pods, uid)]
        service = own("Service", names.router(ctx.name))
        return plan_cutover(ctx.name, kv_epoch(ctx.spec), service, slots, workers)

    def _observed_children(
        self, ctx: PassContext, wanted: set[ChildRef]
    ) -> tuple[dict[ChildRef, dict[str, Any]], set[tuple[str, str]]]:
        """The children the snapshot shows, and the kinds the cluster does not serve among those the render wants
        (only a kind that may not be served costs a read, cached: `_served`)."""
        observed: dict[ChildRef, dict[str, Any]] = {}
        unserved: set[tuple[str, str]] = set()
        for ref in possible_children(ctx.name):
            if (ref.kind, ref.name) in ctx.children:
                observed[ref] = ctx.children[(ref.kind, ref.name)]
            elif ref in wanted and "/" in ref.api_version and not self._served(ref, ctx.namespace):
                unserved.add((ref.api_version, ref.kind))
        return observed, unserved

    def _ensure_child(self, owner: Owner, child: dict[str, Any], observed: dict[str, Any] | None) -> Problem | None:
        """Apply one rendered child; the problem it meets, if any (a kind gone meanwhile, a name collision)."""
        ref = ChildRef.of(child)
        with _step(f"applying {ref}"):
            try:
                outcome = self.writer.ensure(child, observed, owner.uid)
            except KindUnavailable:
                self.kinds.forget((owner.namespace, ref.api_version, ref.kind))
                return unserved_problem(ref)
        if outcome is Outcome.COLLISION:
            return collision_problem(ref)
        if outcome is not Outcome.UNCHANGED:
            log.info("%s/%s: %s %s", owner.namespace, owner.name, outcome.value, ref)
        return None

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

    # -- step: observe -----------------------------------------------------------------------------------------
    def _observe(self, ctx: PassContext, cutover: Cutover | None) -> Seen:
        """The worker pods by group with what each group should run, the loads the plans need (a prefill or decode
        replica's with its KV-handoff queues), the routers' lists, and in a prefill/decode fleet the bootstrap
        servers of the prefill replicas no router lists yet."""
        spec = ctx.spec
        with _step("reading worker pods"):
            pods = owned_workers(ctx.pods, ctx.owner.uid)
        with _step("reading worker groups' scale targets"):
            scaled, verdicts = scale_target_counts(spec, ctx.name, ctx.scale_targets)
        groups = group_passes(spec, ctx.previous, pods, scaled)
        with _step("reading worker loads"):
            needs_loads = {g.name: g.needs_loads() for g in groups}
            needs_key = any(needs_loads.values()) or spec.router.enabled  # the routers get it with registrations
            worker_ref = spec.engine.api_key_secret_ref if needs_key else None
            worker_key = self._secret_text(worker_ref, ctx.namespace, "spec.engine.apiKeySecretRef", ctx.name)
            # A prefill/decode fleet's every group (a retired one too) holds KV handoffs that only `disagg` shows.
            loads = {g.name: fetch_in_flight(needs_loads[g.name], api_key=worker_key, disagg=spec.disaggregated)
                     for g in groups}  # fmt: skip
        routers = None
        if spec.router.enabled:
            with _step("reading router pods"):
                router_pods = self._router_pods(ctx)
                api_key = self._secret_text(
                    spec.router.api_key_secret_ref, ctx.namespace, "spec.router.apiKeySecretRef", ctx.name
                )
            with _step("reading router worker lists"):
                epoch_of = cutover.of if cutover is not None else str
                routers = observe_routers(router_pods, api_key, worker_api_key=worker_key, epoch_of=epoch_of)
        seen = Seen(groups=groups, loads=loads, routers=routers, verdicts=verdicts, cutover=cutover)
        if spec.disaggregation is None or routers is None:
            return seen
        with _step("reading prefill bootstrap servers"):
            ports = prefill_ports(groups, ctx.pods_by_name, spec.disaggregation.bootstrap_port)
            answered = probe_bootstrap(to_probe(groups, ports, seen.still_listed), ports)
        return replace(seen, bootstrap_ports=ports, bootstrapped=answered)

    def _router_pods(self, ctx: PassContext) -> list[dict[str, Any]]:
        """The pods of the CR's own router Deployments (`runtime.routerpods`, the doctor's selection too): the
        ReplicaSet controlling each candidate is read (cached) for the Deployment that controls it, which must be the
        slot's, owned by the CR. A read that fails other than 404 fails the step."""
        slots = slot_deployments(ctx.name, ctx.owner.uid, lambda slot: ctx.children.get(("Deployment", slot)))
        return self.replica_sets.router_pods(self.apps, ctx.pods, ctx.namespace, ctx.name, slots)

    def _secret_text(self, ref: SecretKeyRef | None, namespace: str, field: str, cr: str = "") -> str | None:
        """A key of a Secret of the CR's namespace that the CR names at `field` (the router's or the workers' API
        key). Read only by passes that need it, and kept for `state.SECRET_TTL_SECONDS`: a rotated key is used
        within a minute, and a quiet fleet costs one GET per Secret per minute, not one per pass. Whatever makes it
        unusable is logged in the one message of `secretref` (nothing of the Secret's content or existence); `cr`:
        the CR's name, for the log."""
        if ref is None:
            return None

        def read() -> dict[str, Any] | None:
            try:
                secret = self.core.read_namespaced_secret(ref.name, namespace, _request_timeout=API_TIMEOUT)
                return dict(self.api.sanitize_for_serialization(secret))
            except ApiException as exc:
                if exc.status in (403, 404):  # forbidden reads as missing: the same message below
                    return None
                raise

        secret = self.secrets.get((namespace, ref.name), read)
        text = secret_key_text((secret or {}).get("data"), ref.key)
        if text is None:
            log.warning("%s/%s: %s", namespace, cr, unusable_credential(field, ref.name, ref.key))
        return text

    # -- step: sync routers ------------------------------------------------------------------------------------
    def _sync_routers(self, ctx: PassContext, seen: Seen, decided: Decided) -> RouterSync:
        """Every router lists the routed workers; the drains that may start are those every router confirmed."""
        if seen.routers is None:
            idle = RouterObservation(enabled=False, ready_pods=0, registered=0, synced=True)
            return RouterSync(idle, changed=False, drains=drains_now(seen, decided, set()))
        serving = seen.cutover.serving if seen.cutover is not None else ""
        with _step("syncing router membership"):
            synced = sync_routers(seen.routers, decided.routed, disaggregated=ctx.spec.disaggregated,
                                  worker_epochs=decided.epochs, serving_epoch=serving)  # fmt: skip
        for failure in synced.failures:
            log.warning("%s/%s: %s", ctx.namespace, ctx.name, failure)
        # A replica a router still lists is not drained yet: the next pass decides again (and, preferring removals
        # under way, picks it again); its drain event is posted when the drain really starts.
        drains = drains_now(seen, decided, synced.unconfirmed_removals)
        for group in seen.groups:
            held = [i for i in decided.plans[group.name].drain if i not in drains[group.name]]
            if held:
                log.info("%s/%s: replicas %s wait for every router to be read and to apply their removal",
                         ctx.namespace, ctx.name, held)  # fmt: skip
        return RouterSync(synced.observation, synced.changed and not synced.failures, drains)

    # -- step: switch ------------------------------------------------------------------------------------------
    def _switch(self, ctx: PassContext, seen: Seen) -> str | None:
        """During a prefill/decode fleet's cut-over, move the router Service to the new KV epoch's routers once the
        new generation is whole (`cutover.switch_check`, on the lists the pass read); what status says while it
        waits (None: no cut-over, or it switched now)."""
        cutover = seen.cutover
        if cutover is None or not cutover.in_progress or seen.routers is None:
            return None
        check = switch_check(cutover, seen.groups, seen.routers, ctx.spec.router.replicas)
        if not check.ready:
            return check.note
        switched = replace(cutover, serving=cutover.desired, since=ctx.stamp)
        service = router_service(ctx.spec, ctx.owner, switched)
        with _step("switching the router Service to the new KV epoch"):
            self.writer.ensure(service, ctx.children.get(("Service", service["metadata"]["name"])), ctx.owner.uid)
        message = (f"the router Service now selects the routers of KV epoch {cutover.desired} (was "
                   f"{cutover.serving}); the old generation drains in {SETTLE_SECONDS:.0f}s")  # fmt: skip
        log.info("%s/%s: %s", ctx.namespace, ctx.name, message)
        self.writer.event(ctx.body, "CutOver", message)
        return None

    # -- step: apply replicas ----------------------------------------------------------------------------------
    def _apply_replicas(
        self, ctx: PassContext, seen: Seen, members: set[str], sync: RouterSync, plans: dict[str, Plan]
    ) -> list[Problem]:
        """The InferencePool labels, then each group's plan as the pass carries it out (`steps.applied_plan`); the
        problems met (a pod name another owner holds)."""
        problems: list[Problem] = []
        with _step("applying the replica plan"):
            self._label_pool_members(ctx, seen, members, sync)
            for group in seen.groups:
                problems += self._apply_plan(ctx, group, plans[group.name])
        return problems

    def _label_pool_members(self, ctx: PassContext, seen: Seen, members: set[str], sync: RouterSync) -> None:
        """Set or remove the InferencePool membership label (`inferencepool.py`) where a worker pod's differs from
        `members`, through the bookkeeping apply. A pod whose drain starts on this pass is left to `_apply_plan`:
        its drain apply names no label, so the label goes in the same write that marks it draining."""
        live = ctx.pods_by_name
        workers = {pod_name: live[pod_name] for g in seen.groups for r in g.replicas for pod_name in r.pod_names
                   if pod_name in live}  # fmt: skip
        starting = {pod_name for g in seen.groups for r in g.replicas if r.index in sync.drains[g.name]
                    for pod_name in r.pod_names}  # fmt: skip
        for pod_name, member in sorted(membership_changes(workers, members).items()):
            if pod_name in starting:
                continue
            meta = workers[pod_name].get("metadata") or {}
            annotations = _bookkeeping_annotations(meta)
            self.writer.annotate_pod(ctx.namespace, pod_name, meta.get("uid"), annotations, membership_labels(member))

    def _apply_plan(self, ctx: PassContext, group: GroupPass, plan: Plan) -> list[Problem]:
        """Deletes, drains, promotions, creations, then the plan's events, in that order; the creations' problems."""
        by_index = {r.index: r for r in group.replicas}
        live = ctx.pods_by_name
        for index in plan.delete:
            for pod_name in by_index[index].pod_names:
                uid = ((live.get(pod_name) or {}).get("metadata") or {}).get("uid")
                if isinstance(uid, str) and uid:  # the pod observed, by its uid: never one made under its name since
                    self.writer.delete_pod(ctx.namespace, pod_name, uid)
        for index in plan.drain:
            self._bookkeeping(ctx, by_index[index].pod_names, {ANNOTATION_DRAINING: ctx.stamp})
            metrics.drain_started()
        for index in plan.promote:
            # "false", not a removed key: the pod was created with `warm: "true"`, a field of its create, which an
            # apply can change but not drop.
            self._bookkeeping(ctx, by_index[index].pod_names, {ANNOTATION_WARM: "false"})
        problems = self._create_replicas(ctx, group, plan)
        drain_event = plan.drain_event
        prefix = f"group {group.name}: " if group.name else ""
        for event in plan.events + ([drain_event] if drain_event else []):
            self.writer.event(ctx.body, event.reason, prefix + event.message, event.warning)
        return problems

    def _bookkeeping(self, ctx: PassContext, pod_names: list[str], change: dict[str, str]) -> None:
        """Apply each pod's bookkeeping annotations as they are plus `change`: the apply names every key the
        operator keeps on the pod, so none of the others is dropped."""
        live = ctx.pods_by_name
        for pod_name in pod_names:
            meta = (live.get(pod_name) or {}).get("metadata") or {}
            kept = _bookkeeping_annotations(meta)
            self.writer.annotate_pod(ctx.namespace, pod_name, meta.get("uid"), {**kept, **change})

    def _create_replicas(self, ctx: PassContext, group: GroupPass, plan: Plan) -> list[Problem]:
        """Create the planned replicas' pods; a pod name another owner holds is a name collision (reported like a
        child's), and the rest of that replica is not created."""
        problems = []
        for index, is_warm in [(i, False) for i in plan.create_active] + [(i, True) for i in plan.create_warm]:
            pods = replica_pods(group.group.spec, ctx.owner, group.revision, index, group.name, group.group.pd,
                                self.settings.pod_policy.rdma_resource)  # fmt: skip
            for pod in pods:
                if is_warm:
                    pod["metadata"]["annotations"][ANNOTATION_WARM] = "true"
                if self.writer.create_pod(pod) is Outcome.COLLISION:
                    problems.append(collision_problem(ChildRef.of(pod)))
                    break
        return problems

    # -- step: report ------------------------------------------------------------------------------------------
    def _report(
        self,
        ctx: PassContext,
        seen: Seen,
        decided: Decided,
        sync: RouterSync,
        problems: list[Problem],
        cutting_over: str | None = None,
    ) -> dict[str, Any]:
        """Drain metrics, then status (one patch when it changed), the scale targets' status and the router's
        failure event; returns the status."""
        now = ctx.now.timestamp()
        for group in seen.groups:
            by_index = {r.index: r for r in group.replicas}
            plan = decided.plans[group.name]
            for index, timed_out in sorted(plan.finished_drains.items()):
                since = by_index[index].draining_since
                if index in plan.delete and since is not None:
                    metrics.drain_finished(max(0.0, now - since), timed_out)
        status = compute_status(
            name=ctx.name, namespace=ctx.namespace, generation=ctx.generation, spec=ctx.spec,
            groups=observations(seen, decided), router=sync.observation,
            failed_replicas=sum(r.failed for g in seen.groups for r in g.replicas), previous=ctx.previous,
            now=ctx.stamp, problems=problems, cutting_over=cutting_over,
        )  # fmt: skip
        written = self._write_status(ctx.body, ctx.previous, status)
        with _step("writing scale targets' status"):
            self._write_scale_targets(ctx, seen.verdicts, status)
        if written and sync.observation.error and _degraded_changed(ctx.previous, status):
            self.writer.event(ctx.body, "RegistrationFailed", sync.observation.error, warning=True)
        return status

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

    def _write_scale_targets(
        self, ctx: PassContext, verdicts: list[ScaleTargetVerdict], status: dict[str, Any]
    ) -> None:
        """Each scale target's status: its group's serving replicas and pod selector (what an HPA reads through its
        /scale) and whether it is in effect; written only when it changed, and at most STATUS_WRITES_PER_PASS per
        pass (a namespace user may create any number of them; the rest are written by later passes)."""
        serving = {g["name"]: g["replicas"] for g in status.get("groups") or []}
        by_name = {str((t.get("metadata") or {}).get("name")): t for t in ctx.scale_targets}
        stale = [(v, scale_target_status(v, by_name[v.name], serving, ctx.name)) for v in verdicts]
        stale = [(verdict, wanted) for verdict, wanted in stale if by_name[verdict.name].get("status") != wanted]
        # The ones in effect first (an HPA reads them), then those never written: none waits behind busy others.
        stale.sort(key=lambda item: (not item[0].in_effect, bool(by_name[item[0].name].get("status"))))
        for verdict, wanted in stale[:STATUS_WRITES_PER_PASS]:
            self.writer.patch_scale_target_status(ctx.namespace, verdict.name, wanted)

    def _delta(self, before: dict[str, int]) -> dict[str, int]:
        return {verb: count - before.get(verb, 0) for verb, count in self.writer.writes.items()
                if count != before.get(verb, 0)}  # fmt: skip


def _bookkeeping_annotations(meta: dict[str, Any]) -> dict[str, str]:
    """The bookkeeping annotations a pod carries now: every apply of its bookkeeping names them all. Pure."""
    current = meta.get("annotations") or {}
    return {k: str(current[k]) for k in (ANNOTATION_DRAINING, ANNOTATION_WARM) if k in current}


def collision_problem(ref: ChildRef) -> Problem:
    """An object of a child's (or pod's) name that the CR does not own: left alone, reported."""
    return Problem("NameCollision", f"{ref} exists and is not owned by this SGLangDeployment; left unchanged "
                   "(rename or remove it)")  # fmt: skip


def _ordered(problems: list[Problem]) -> list[Problem]:
    """Name collisions first, then by message: the order status and events show them in. Pure."""
    return sorted(problems, key=lambda p: (p.reason != "NameCollision", p.message))


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
