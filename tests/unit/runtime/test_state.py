"""Watch-driven passes and the shared pool: a pass from a snapshot of the indexes sends no request when nothing
changed, the next pass waits for the watch to show the last one's pod writes, the pool is bounded and its queue is
measured, failed passes back off, and the operator's metrics count what the brief lists."""

import asyncio
import functools
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kubernetes import client

from sglang_operator import metrics
from sglang_operator.controller.reconcile import Reconciler
from sglang_operator.runtime import kube
from sglang_operator.runtime.state import (
    Expectations,
    Snapshot,
    TtlCache,
    take_snapshot,
    trim_child,
    unmet,
)
from sglang_operator.runtime.workqueue import (
    Preempted,
    Priority,
    PriorityPool,
    backoff_seconds,
    run_in_pool,
)
from sglang_operator.runtime.writer import possible_children
from sglang_operator.settings import OperatorSettings, load_settings
from tests.support.controller.fakekube import FakeKube, wire

NS, NAME, UID = "team-a", "chat", "cr-uid"


def sample(name: str, labels: dict[str, str] | None = None) -> float:
    return metrics.REGISTRY.get_sample_value(name, labels or {}) or 0.0


def cluster(spec: dict[str, Any]) -> tuple[Reconciler, FakeKube]:
    fake = FakeKube()
    fake.put({"apiVersion": "sglang.ai/v1alpha1", "kind": "SGLangDeployment",
              "metadata": {"name": NAME, "namespace": NS, "uid": UID, "generation": 1},
              "spec": {"model": {"path": "org/model"}, **spec}})  # fmt: skip
    reconciler = Reconciler(client.ApiClient(), OperatorSettings(), secrets=TtlCache(60), kinds=TtlCache(10))
    wire(reconciler, fake)
    return reconciler, fake


def watched(fake: FakeKube) -> Snapshot:
    """What the indexes would hold: the fake's objects, as kopf would index them."""
    pods = {(NS, NAME): [o for (k, _), o in fake.objects.items() if k == "Pod"]}
    children = {(NS, k, n): [trim_child(o)] for (k, n), o in fake.objects.items()
                if k in ("Service", "Deployment", "NetworkPolicy", "PodMonitor")}  # fmt: skip
    names = [(ref.kind, ref.name) for ref in possible_children(NAME)]
    return take_snapshot(fake.objects[("SGLangDeployment", NAME)], pods, children, names)


def test_a_pass_from_the_watch_with_nothing_changed_sends_no_request() -> None:
    reconciler, fake = cluster({"replicas": 2, "router": {"enabled": False}, "networkPolicy": {"enabled": True}})
    reconciler.run(watched(fake))  # creates the children and pods
    reconciler.run(watched(fake))  # status catches up with the pods
    fake.calls.clear()
    for _ in range(3):
        reconciler.run(watched(fake))
    assert fake.calls == []  # no GET, no LIST, no write


def test_the_snapshot_is_a_copy_the_event_loop_can_change_under_it() -> None:
    pod = {"metadata": {"name": "p", "annotations": {"a": "1"}}}
    body = {"metadata": {"name": NAME, "namespace": NS}, "spec": {}}
    snapshot = take_snapshot(body, {(NS, NAME): [pod]}, {}, [])
    pod["metadata"]["annotations"]["a"] = "2"
    body["spec"]["replicas"] = 9
    assert snapshot.pods is not None and snapshot.pods[0]["metadata"]["annotations"] == {"a": "1"}
    assert snapshot.body["spec"] == {} and snapshot.children == {}


def test_trimmed_children_keep_identity_owners_and_hash_only() -> None:
    body = {"apiVersion": "v1", "kind": "Service", "spec": {"ports": [1]}, "metadata": {
        "name": "s", "namespace": NS, "uid": "u", "resourceVersion": "7", "ownerReferences": [{"uid": UID}],
        "annotations": {"sglang.ai/spec-hash": "h", "big": "x" * 1000}, "labels": {"a": "b"}}}  # fmt: skip
    trimmed = trim_child(body)
    assert "spec" not in trimmed and trimmed["metadata"]["annotations"] == {"sglang.ai/spec-hash": "h"}
    assert trimmed["metadata"]["uid"] == "u" and trimmed["metadata"]["ownerReferences"] == [{"uid": UID}]


def test_the_next_pass_waits_until_the_watch_shows_the_last_pod_writes() -> None:
    expected = Expectations(created={"new"}, deleted={"old"}, annotated={"drain": {"sglang.ai/draining-since": "t"}})
    old = {"metadata": {"name": "old"}}
    drain = {"metadata": {"name": "drain", "annotations": {}}}
    assert unmet(expected, [old, drain]) == ["new", "old", "drain"]
    seen = [{"metadata": {"name": "new"}}, {"metadata": {"name": "old", "deletionTimestamp": "now"}},
            {"metadata": {"name": "drain", "annotations": {"sglang.ai/draining-since": "t"}}}]  # fmt: skip
    assert unmet(expected, seen) == []
    assert unmet(expected, [{"metadata": {"name": "new"}}]) == []  # deleted and annotated pods gone: done


def test_a_drain_started_by_one_pass_is_expected_by_the_next() -> None:
    reconciler, fake = cluster({"replicas": 2, "router": {"enabled": False}})
    reconciler.run(watched(fake))
    fake.objects[("SGLangDeployment", NAME)]["spec"]["replicas"] = 1
    before = watched(fake)
    result = reconciler.run(before)
    assert result.plan is not None and len(result.plan.drain) == 1
    ((pod_name, annotations),) = result.expected.annotated.items()
    assert "sglang.ai/draining-since" in annotations
    assert unmet(result.expected, before.pods or []) == [pod_name]  # the cache from before the pass: wait
    assert unmet(result.expected, watched(fake).pods or []) == []  # the fake applied it: the watch shows it


def test_drains_and_passes_are_counted() -> None:
    reconciler, fake = cluster({"replicas": 2, "router": {"enabled": False}})
    ok_before = sample("sglang_operator_reconcile_duration_seconds_count", {"result": "ok"})
    reconciler.run(watched(fake))
    assert sample("sglang_operator_reconcile_duration_seconds_count", {"result": "ok"}) == ok_before + 1

    started = sample("sglang_operator_drains_total", {"event": "started"})
    fake.objects[("SGLangDeployment", NAME)]["spec"]["replicas"] = 1
    reconciler.run(watched(fake))
    assert sample("sglang_operator_drains_total", {"event": "started"}) == started + 1

    completed = sample("sglang_operator_drains_total", {"event": "completed"})
    long_ago = (datetime.now(UTC) - timedelta(seconds=30)).strftime("%Y-%m-%dT%H:%M:%SZ")
    for (kind, _), obj in fake.objects.items():
        annotations = obj["metadata"].get("annotations") or {}
        if kind == "Pod" and "sglang.ai/draining-since" in annotations:
            annotations["sglang.ai/draining-since"] = long_ago
    seconds = sample("sglang_operator_drain_duration_seconds_sum", {"result": "completed"})
    result = reconciler.run(watched(fake))
    assert result.plan is not None and len(result.plan.delete) == 1
    assert sample("sglang_operator_drains_total", {"event": "completed"}) == completed + 1
    assert sample("sglang_operator_drain_duration_seconds_sum", {"result": "completed"}) - seconds >= 30


def test_errors_are_counted_by_reason_and_a_failed_pass_is_marked_failed() -> None:
    from kubernetes.client.exceptions import ApiException

    reconciler, fake = cluster({"replicas": 1, "router": {"enabled": False}})
    fake.failures[("create", "Pod")] = ApiException(status=403, reason="Forbidden")
    before = sample("sglang_operator_reconcile_errors_total", {"reason": "ReconcileError"})
    errors_before = sample("sglang_operator_reconcile_duration_seconds_count", {"result": "error"})
    result = reconciler.run(watched(fake))
    assert result.failed
    assert sample("sglang_operator_reconcile_errors_total", {"reason": "ReconcileError"}) == before + 1
    assert sample("sglang_operator_reconcile_duration_seconds_count", {"result": "error"}) == errors_before + 1


def test_an_unserved_kind_is_read_once_per_ttl_not_once_per_pass() -> None:
    reconciler, fake = cluster({"replicas": 0, "router": {"enabled": False}, "monitoring": {"podMonitor": True}})
    fake.unserved_kinds.add("PodMonitor")
    for _ in range(3):
        reconciler.run(watched(fake))
    assert len([c for c in fake.calls if c.kind == "PodMonitor"]) == 1  # one GET, then the cached answer
    status = fake.objects[("SGLangDeployment", NAME)]["status"]
    degraded = next(c for c in status["conditions"] if c["type"] == "Degraded")
    assert degraded["reason"] == "ChildKindUnavailable"
    assert len([c for c in fake.calls if c.kind == "Event" and c.body["reason"] == "ChildKindUnavailable"]) == 1

    fake.unserved_kinds.clear()  # the CRD is installed
    reconciler.kinds = TtlCache(10)  # its TTL passed
    reconciler.run(watched(fake))
    assert ("PodMonitor", NAME) in fake.objects
    reconciler.run(watched(fake))
    degraded = next(c for c in fake.objects[("SGLangDeployment", NAME)]["status"]["conditions"]
                    if c["type"] == "Degraded")  # fmt: skip
    assert degraded["status"] == "False"


def test_the_reconciler_leaves_the_autoscalers_fields_alone() -> None:
    """`qps`, `autoscaler` and MetricsAvailable belong to the autoscaler: the reconciler's patch never names them."""
    reconciler, fake = cluster({"replicas": 1, "router": {"enabled": False}})
    cr = fake.objects[("SGLangDeployment", NAME)]
    available = {"type": "MetricsAvailable", "status": "True", "reason": "MetricsFresh", "message": "",
                 "observedGeneration": 1, "lastTransitionTime": "2026-01-01T00:00:00Z"}  # fmt: skip
    cr["status"] = {"qps": "3.5", "autoscaler": {"desiredReplicas": 1}, "conditions": [available]}
    reconciler.run(watched(fake))
    patch = next(c for c in fake.calls if c.verb == "patch_status").body["status"]
    assert "qps" not in patch and "autoscaler" not in patch
    assert available in patch["conditions"]  # sent back as read, under the resourceVersion it was read with
    assert cr["status"]["qps"] == "3.5"


def test_backoff_and_settings() -> None:
    assert backoff_seconds(0, 5.0) == 5.0
    assert [backoff_seconds(n, 5.0) for n in (1, 2, 3, 4)] == [1.0, 2.0, 4.0, 8.0]
    assert backoff_seconds(50, 5.0) == 60.0
    workers = {text: load_settings({"SGLANG_OPERATOR_WORKERS": text}).workers for text in ("", "3", "lots", "0")}
    assert workers == {"": 8, "3": 3, "lots": 8, "0": 1}
    assert load_settings({"SGLANG_OPERATOR_RESYNC_SECONDS": "nan"}).resync_seconds == 5.0


def test_the_pool_bounds_threads_and_measures_its_queue() -> None:
    from concurrent.futures import ThreadPoolExecutor

    pool = ThreadPoolExecutor(max_workers=2)
    release = threading.Event()
    running: set[int] = set()
    peak = [0]
    lock = threading.Lock()

    def work() -> int:
        with lock:
            running.add(threading.get_ident())
            peak[0] = max(peak[0], len(running))
        release.wait(5)
        with lock:
            running.discard(threading.get_ident())
        return 1

    waits_before = sample("sglang_operator_workqueue_wait_seconds_count")

    async def main() -> list[int]:
        tasks = [asyncio.ensure_future(run_in_pool(work, pool)) for _ in range(10)]
        deadline = time.monotonic() + 5
        while sample("sglang_operator_workqueue_depth") < 8 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert sample("sglang_operator_workqueue_depth") == 8  # 2 running, 8 waiting for a worker
        release.set()
        return await asyncio.gather(*tasks)

    assert asyncio.run(main()) == [1] * 10
    assert peak[0] <= 2
    assert sample("sglang_operator_workqueue_depth") == 0
    assert sample("sglang_operator_workqueue_wait_seconds_count") == waits_before + 10
    pool.shutdown()


@pytest.mark.parametrize(
    ("method", "url", "verb"),
    [
        ("GET", "https://k/api/v1/namespaces/a/pods?labelSelector=x", "list"),
        ("GET", "https://k/api/v1/namespaces/a/pods/p", "get"),
        ("GET", "https://k/apis/sglang.ai/v1alpha1/namespaces/a/sglangdeployments/c", "get"),
        ("GET", "https://k/api/v1/nodes", "list"),
        ("GET", "https://k/apis/coordination.k8s.io/v1/namespaces/a/leases?fieldSelector=x&watch=True", "watch"),
        ("GET", "https://k/api/v1/namespaces/a/pods?watch=true", "watch"),
        ("GET", "https://k/api/v1/namespaces/a/pods?watch=false", "list"),
        ("GET", "https://k/api/v1/namespaces/a/pods?watchdog=true", "list"),
        ("POST", "https://k/api/v1/namespaces/a/pods", "create"),
        ("DELETE", "https://k/api/v1/namespaces/a/pods/p", "delete"),
        ("PATCH", "https://k/api/v1/namespaces/a/pods/p", "patch"),
    ],
)
def test_request_verbs(method: str, url: str, verb: str) -> None:
    assert kube.request_verb(method, url) == verb


def test_every_api_request_is_counted_by_verb_and_code(monkeypatch: pytest.MonkeyPatch) -> None:
    class Response:
        status = 404

    monkeypatch.setattr(client.ApiClient, "call_api", lambda self, *a, **k: Response())
    api = kube.CountingApiClient()
    before = sample("sglang_operator_kubernetes_requests_total", {"verb": "apply", "code": "404"})
    api.call_api("PATCH", "https://k/api/v1/namespaces/a/services/s",
                 {"Content-Type": "application/apply-patch+yaml"})  # fmt: skip
    assert sample("sglang_operator_kubernetes_requests_total", {"verb": "apply", "code": "404"}) == before + 1

    def refused(self: Any, *a: Any, **k: Any) -> Any:
        raise ConnectionRefusedError

    monkeypatch.setattr(client.ApiClient, "call_api", refused)
    errors = sample("sglang_operator_kubernetes_requests_total", {"verb": "list", "code": "error"})
    with pytest.raises(ConnectionRefusedError):
        api.call_api("GET", "https://k/api/v1/namespaces/a/pods")
    assert sample("sglang_operator_kubernetes_requests_total", {"verb": "list", "code": "error"}) == errors + 1


def test_passes_go_by_priority_then_arrival() -> None:
    """One worker, busy; three resyncs queue, then a pass an event asked for, then one registering a worker that
    turned Ready: the registration runs next, then the event's, then the resyncs in arrival order; a cancelled
    waiter never runs; an exception reaches its caller."""
    pool = PriorityPool(1, "test")
    release, order = threading.Event(), []

    def blocker() -> None:
        release.wait(5)

    def record(label: str) -> str:
        order.append(label)
        return label

    def boom() -> None:
        raise ValueError("pass failed")

    async def main() -> list[str]:
        first = asyncio.ensure_future(run_in_pool(blocker, pool))
        await asyncio.sleep(0.05)  # the worker has taken it
        resyncs = [asyncio.ensure_future(run_in_pool(functools.partial(record, f"resync-{i}"), pool)) for i in range(3)]
        cancelled = pool.submit(record, "cancelled")
        cancelled.cancel()
        event = asyncio.ensure_future(run_in_pool(functools.partial(record, "event"), pool, Priority.EVENT))
        registration = asyncio.ensure_future(
            run_in_pool(functools.partial(record, "registration"), pool, Priority.REGISTRATION)
        )
        await asyncio.sleep(0.05)
        release.set()
        await first
        with pytest.raises(ValueError, match="pass failed"):
            await run_in_pool(boom, pool, Priority.EVENT)
        return list(await asyncio.gather(registration, event, *resyncs))

    expected = ["registration", "event", "resync-0", "resync-1", "resync-2"]
    assert asyncio.run(main()) == expected
    assert order == expected
    pool.shutdown()


def test_a_queued_pass_is_taken_back_when_preempted_and_a_started_one_runs_to_the_end() -> None:
    """One worker, busy: a queued event's pass whose `preempt` is set never runs (`Preempted`, the queue depth back
    where it was); a pass already running when `preempt` is set finishes and returns its result."""
    pool = PriorityPool(1, "test")
    release, taken, ran = threading.Event(), threading.Event(), []

    def blocker() -> str:
        taken.set()
        release.wait(5)
        return "blocker"

    def record(label: str) -> str:
        ran.append(label)
        return label

    async def main() -> str:
        urgent = asyncio.Event()
        started = asyncio.ensure_future(run_in_pool(blocker, pool, preempt=urgent))
        for _ in range(500):  # at most 5 s for the worker to take it
            if taken.is_set():
                break
            await asyncio.sleep(0.01)
        assert taken.is_set()
        depth = sample("sglang_operator_workqueue_depth", {})
        queued = asyncio.ensure_future(run_in_pool(functools.partial(record, "stale"), pool, Priority.EVENT, urgent))
        await asyncio.sleep(0)  # the coroutine submits it
        assert sample("sglang_operator_workqueue_depth", {}) == depth + 1
        urgent.set()
        with pytest.raises(Preempted):
            await queued
        assert sample("sglang_operator_workqueue_depth", {}) == depth
        release.set()
        return await started

    assert asyncio.run(main()) == "blocker"
    assert ran == []
    pool.shutdown()
