"""The wake-up map holds running loops only and carries the priority events ask for; `run` flags reach the
operator's settings."""

import asyncio
import threading
from typing import Any

import pytest

from sglang_operator.controller import loop as reconcile_loop
from sglang_operator.controller.reconcile import PassResult
from sglang_operator.runtime import wakeups, watches
from sglang_operator.runtime.state import pod_signature, serving_member, spec_unobserved
from sglang_operator.runtime.supervisor import Stopped
from sglang_operator.runtime.workqueue import Priority, PriorityPool, run_in_pool
from sglang_operator.settings import OperatorSettings, load_settings, operator_environment
from tests.support.runtime.waiting import until


def test_the_wakeup_map_holds_running_loops_only() -> None:
    wakeups._wakeups.clear()
    wakeups._seen.clear()
    wakeups.wake("team-a", "gone")  # a pod event of a CR with no loop: adds nothing
    assert wakeups.pod_priority("team-a", "gone", "uid-1", 1, serving=True) == Priority.EVENT
    assert wakeups._wakeups == {} and wakeups._seen == {}
    wake = wakeups.register("team-a", "chat")
    wakeups.wake("team-a", "chat")
    assert wake.event.is_set()
    wakeups.unregister("team-a", "chat", wakeups.Wakeup())  # someone else's entry: kept
    assert ("team-a", "chat") in wakeups._wakeups
    wakeups.unregister("team-a", "chat", wake)
    assert wakeups._wakeups == {} and wakeups._seen == {}


def test_a_wakeup_keeps_the_highest_priority_asked_for_until_taken() -> None:
    wake = wakeups.Wakeup()
    assert wake.take() == Priority.RESYNC and not wake.event.is_set()
    wake.set(Priority.EVENT)
    wake.set(Priority.REGISTRATION)
    wake.set(Priority.EVENT)
    assert wake.registration.is_set()
    assert wake.event.is_set() and wake.take() == Priority.REGISTRATION
    assert not wake.event.is_set() and not wake.registration.is_set() and wake.take() == Priority.RESYNC
    wake.set(Priority.EVENT)  # only a registration takes back a queued pass
    assert wake.event.is_set() and not wake.registration.is_set()


def _worker(ready: str = "True", **meta: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "chat-0-0", "labels": {"sglang.ai/component": "worker"}, **meta},
        "status": {"conditions": [{"type": "Ready", "status": ready}]},
    }


def test_only_a_worker_newly_serving_asks_for_registration_priority() -> None:
    wakeups._wakeups.clear()
    wakeups._seen.clear()
    wake = wakeups.register("team-a", "chat")

    def priority(pod: dict[str, Any] | None, uid: str | None = "uid-1") -> Priority | None:
        signature = None if pod is None else pod_signature(pod)
        return wakeups.pod_priority("team-a", "chat", uid, signature, pod is not None and serving_member(pod))

    assert priority(_worker(ready="False")) == Priority.EVENT  # starting
    assert priority(_worker()) == Priority.REGISTRATION  # turned Ready
    assert priority(_worker(labels={"sglang.ai/component": "worker", "x": "1"})) == Priority.EVENT  # a label
    assert priority(_worker(annotations={"sglang.ai/draining-since": "2026-12-02T00:00:00Z"})) == Priority.EVENT
    assert priority(_worker()) == Priority.REGISTRATION  # back
    assert priority(_worker(), uid=None) == Priority.EVENT
    assert priority(None) == Priority.EVENT  # deleted: forgotten
    assert wakeups._seen[("team-a", "chat")] == {}
    wakeups.unregister("team-a", "chat", wake)
    assert wakeups._seen == {}


def test_a_pod_update_no_pass_reads_wakes_nothing() -> None:
    """Bound to a node, scheduled, a container created: the pass would read the same pod, so no wake-up; a new
    phase, IP, restart or owner does wake the loop."""
    wakeups._wakeups.clear()
    wakeups._seen.clear()
    wake = wakeups.register("team-a", "chat")
    pending = _worker(ready="False")
    assert wakeups.pod_priority("team-a", "chat", "u", pod_signature(pending), False) == Priority.EVENT
    scheduled = {
        **pending,
        "spec": {"nodeName": "node-1"},
        "status": {
            **pending["status"],
            "conditions": [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "False"}],
            "hostIP": "127.0.0.1",
        },
    }
    assert wakeups.pod_priority("team-a", "chat", "u", pod_signature(scheduled), False) is None
    changes = [{"phase": "Running"}, {"podIP": "127.113.0.5"}, {"containerStatuses": [{"restartCount": 1}]}]
    for change in changes:
        changed = {**scheduled, "status": {**scheduled["status"], **change}}
        assert wakeups.pod_priority("team-a", "chat", "u", pod_signature(changed), False) == Priority.EVENT
    owned = {**scheduled, "metadata": {**scheduled["metadata"], "ownerReferences": [{"uid": "cr"}]}}
    assert wakeups.pod_priority("team-a", "chat", "u", pod_signature(owned), False) == Priority.EVENT
    wakeups.unregister("team-a", "chat", wake)


def test_serving_member_is_a_ready_worker_or_router_neither_deleted_nor_draining() -> None:
    assert serving_member(_worker())
    assert not serving_member(_worker(ready="False"))
    assert not serving_member(_worker(deletionTimestamp="2026-12-01T00:00:00Z"))
    assert not serving_member(_worker(annotations={"sglang.ai/draining-since": "2026-12-01T00:00:00Z"}))
    router, other = _worker(), _worker()
    router["metadata"]["labels"] = {"sglang.ai/component": "router"}
    other["metadata"]["labels"] = {"sglang.ai/component": "something-else"}
    assert serving_member(router) and not serving_member(other) and not serving_member({})


def test_run_flags_become_the_operators_settings() -> None:
    env = operator_environment(
        allowed_prometheus_urls=["http://prom:9090", "https://thanos"],
        allowed_host_paths=["/models"],
        operator_namespace="ops",
        operator_pod_labels="app=sgo,tier=control",
        prometheus_namespace_labels="name=monitoring",
        prometheus_pod_labels="app=prometheus",
    )
    settings = load_settings(env)
    assert (settings.workers, settings.resync_seconds) == (8, 5.0)
    assert settings.prometheus_url_allowed("http://prom:9090/api") and not settings.prometheus_url_allowed("http://x")
    assert settings.pod_policy.host_path_allowed("/models/llama") and not settings.pod_policy.host_path_allowed("/")
    assert settings.network.operator_namespace == "ops"
    assert dict(settings.network.operator_pod_labels) == {"app": "sgo", "tier": "control"}
    assert dict(settings.network.prometheus_namespace_labels) == {"name": "monitoring"}
    assert dict(settings.network.prometheus_pod_labels) == {"app": "prometheus"}
    assert operator_environment() == {}  # no flag, no variable: whatever the environment says stays


def test_the_autoscaler_interval_never_breaks_its_daemon() -> None:
    from sglang_operator.autoscaling.loop import MAX_INTERVAL_SECONDS, interval_seconds

    assert interval_seconds({"autoscaling": {"intervalSeconds": 30}}) == 30.0
    assert interval_seconds({"autoscaling": {"intervalSeconds": 2**33}}) == MAX_INTERVAL_SECONDS
    assert interval_seconds({"autoscaling": {"intervalSeconds": "abc"}}) == 15.0
    assert interval_seconds({"autoscaling": {"intervalSeconds": 0.001}}) == 1.0
    assert interval_seconds({}) == 15.0


def test_a_cr_whose_spec_no_pass_has_seen_goes_first_after_a_start() -> None:
    """After a restart or a handover every CR's loop starts; those whose spec changed meanwhile (a new CR, a
    `kubectl scale` while no operator ran) ask for an event's priority, the others only resync."""
    assert spec_unobserved({"metadata": {"generation": 1}})
    assert spec_unobserved({"metadata": {"generation": 3}, "status": {"observedGeneration": 2}})
    assert not spec_unobserved({"metadata": {"generation": 3}, "status": {"observedGeneration": 3}})


def wire_fake_loop(monkeypatch: pytest.MonkeyPatch, reconciler: type, pooled: Any) -> None:
    """Run the real reconcile loop over a fake reconciler and a pool stand-in."""
    monkeypatch.setattr(reconcile_loop, "Reconciler", reconciler)
    monkeypatch.setattr(reconcile_loop, "api_client", lambda: None)
    monkeypatch.setattr(reconcile_loop, "run_in_pool", pooled)


def test_a_pod_turning_ready_takes_back_the_loops_queued_pass_and_it_runs_on_a_fresh_snapshot(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The pool's one thread is busy; a new CR's loop queues an event's pass; a worker of that CR turns Ready (a
    registration): the queued pass never runs, the loop's next pass runs with registration's priority and sees the
    pod. Without the take-back, the stale pass (no pod) would run first."""
    pool = PriorityPool(1, "test")
    release, runs = threading.Event(), []
    body = {"metadata": {"name": "chat", "namespace": "team-a", "generation": 1, "uid": "u"}, "spec": {}}
    pods: dict[Any, list[dict[str, Any]]] = {}

    stopped = Stopped()

    class FakeReconciler:
        def __init__(self, _api: object, _settings: OperatorSettings) -> None:
            pass

        def run(self, snapshot: Any) -> PassResult:
            runs.append(len(snapshot.pods or []))
            stopped.set()
            return PassResult()

    async def pooled(fn: Any, priority: Priority = Priority.RESYNC, preempt: Any = None) -> Any:
        return await run_in_pool(fn, pool, priority, preempt)

    wire_fake_loop(monkeypatch, FakeReconciler, pooled)

    async def main() -> None:
        taken = threading.Event()

        def blocker() -> None:
            taken.set()
            release.wait(5)

        busy = asyncio.ensure_future(run_in_pool(blocker, pool))
        await until(taken.is_set)
        empty: dict[Any, Any] = {}
        loop = asyncio.ensure_future(reconcile_loop.sgld_reconcile_loop(
            stopped=stopped, name="chat", namespace="team-a", body=body, settings=OperatorSettings(resync_seconds=0.01),
            sgld_pods=pods, sgld_services=empty,
            sgld_deployments=empty, sgld_networkpolicies=empty, sgld_podmonitors=empty, sgld_inferencepools=empty,
            sgld_scale_targets=empty))  # fmt: skip
        await until(lambda: pool._queue.qsize() == 1)  # the loop's first pass (an event's: no status yet) queues
        pods[("team-a", "chat")] = [{"metadata": {"name": "chat-0-0", "uid": "p"}}]
        wakeups.wake("team-a", "chat", Priority.REGISTRATION)
        await until(lambda: pool._queue.qsize() == 2)  # taken back (a cancelled entry stays queued) and resubmitted
        release.set()
        await asyncio.wait_for(asyncio.gather(busy, loop), 5)

    asyncio.run(main())
    assert runs == [1]
    pool.shutdown()


def test_a_pass_that_changed_the_routers_is_followed_up_soon_at_registrations_priority(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A pass that registered a worker wrote a status from the routers' lists as they were before (not Ready); the
    next pass comes after `FOLLOW_UP_SECONDS` at registration's priority, not after the resync period behind every
    other CR's pass. A router that never lists what it was sent gets at most `MAX_FOLLOW_UPS` in a row."""
    changed = [True, False, True, True, True, True]  # what each pass did to the routers
    priorities: list[Priority] = []
    body = {"metadata": {"name": "chat", "namespace": "team-a", "generation": 1, "uid": "u"}, "spec": {}}
    stopped = Stopped()

    class FakeReconciler:
        def __init__(self, _api: object, _settings: OperatorSettings) -> None:
            pass

        def run(self, snapshot: Any) -> PassResult:
            return PassResult(routers_changed=changed[len(priorities) - 1])

    async def pooled(fn: Any, priority: Priority = Priority.RESYNC, preempt: Any = None) -> Any:
        priorities.append(priority)
        return fn()

    wire_fake_loop(monkeypatch, FakeReconciler, pooled)
    monkeypatch.setattr(reconcile_loop, "FOLLOW_UP_SECONDS", 0.01)

    async def main() -> None:
        empty: dict[Any, Any] = {}
        loop = asyncio.ensure_future(reconcile_loop.sgld_reconcile_loop(
            stopped=stopped, name="chat", namespace="team-a", body=body, settings=OperatorSettings(resync_seconds=30.0),
            sgld_pods=empty, sgld_services=empty,
            sgld_deployments=empty, sgld_networkpolicies=empty, sgld_podmonitors=empty, sgld_inferencepools=empty,
            sgld_scale_targets=empty))  # fmt: skip
        await until(lambda: len(priorities) == 2)  # the first pass registered: a follow-up, which changed nothing
        await asyncio.sleep(0.1)
        assert priorities == [Priority.EVENT, Priority.REGISTRATION]  # then the resync period
        wakeups.wake("team-a", "chat")  # an event: a pass that registers, and a router that never lists it
        await until(lambda: len(priorities) == 6)
        await asyncio.sleep(0.1)
        assert priorities[2:] == [Priority.EVENT] + [Priority.REGISTRATION] * reconcile_loop.MAX_FOLLOW_UPS
        stopped.set()
        wakeups.wake("team-a", "chat")
        await asyncio.wait_for(loop, 5)

    asyncio.run(main())


def test_a_snapshot_copy_is_deep_and_leaves_out_the_managed_fields() -> None:
    from sglang_operator.runtime.state import plain

    pod = {"metadata": {"name": "p", "labels": {"a": "1"}, "managedFields": [{"manager": "kubelet"}]},
           "status": {"conditions": [{"type": "Ready"}]}}  # fmt: skip
    copied = plain(pod)
    assert copied == {"metadata": {"name": "p", "labels": {"a": "1"}}, "status": {"conditions": [{"type": "Ready"}]}}
    copied["metadata"]["labels"]["a"] = "2"
    copied["status"]["conditions"].append({})
    assert pod["metadata"]["labels"] == {"a": "1"} and len(pod["status"]["conditions"]) == 1
    assert plain({"spec": {}}) == {"spec": {}}


def test_kopf_keeps_no_diff_base() -> None:
    """No change handler reads kopf's diffs: building one would deep-copy every object on every event."""
    import kopf

    storage = watches.NoDiffBase()
    body = kopf.Body({"metadata": {"name": "p", "annotations": {"x": "y"}}, "spec": {"big": list(range(100))}})
    assert storage.build(body=body) == {} and storage.fetch(body=body) is None


def test_the_operators_kopf_registry_logs_in_and_holds_every_index_the_loops_read() -> None:
    """The runtime builds kopf's registry itself (nothing registers at import): it must name kopf's login (a registry
    of one's own has none, and kopf then refuses to start) and every index a loop reads by name."""
    from sglang_operator.runtime.supervisor import Supervisor

    registry = watches.operator_registry(Supervisor([], lambda *_: None), workers=2)
    activities = {str(handler.activity.value) for handler in registry._activities.get_all_handlers()}
    assert activities == {"authentication", "startup", "cleanup"}
    indexes = {str(handler.id) for handler in registry._indexing.get_all_handlers()}
    assert indexes == {
        "sgld_pods", "sgld_services", "sgld_deployments", "sgld_networkpolicies", "sgld_podmonitors",
        "sgld_inferencepools", "sgld_scale_targets",
    }  # fmt: skip
