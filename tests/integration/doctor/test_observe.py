"""What the doctor reads: per-replica PromQL against a scripted Prometheus, router lists against a scripted router,
and the pure parsing of pods and the CR. A failing or odd answer is "unknown", never an exception."""

import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from sglang_operator.api.spec import SGLangDeploymentSpec
from sglang_operator.doctor.observe import fleet_facts, pod_facts, promql, read_metrics, read_routers
from sglang_operator.prometheus.client import connect
from tests.integration.prometheus.test_client import Answer, FakePrometheus, prometheus  # noqa: F401  (fixture)
from tests.support.router.fakehttp import Reply, serving


def by_pod(**values: float | str) -> Answer:
    result = [{"metric": {"pod": pod.replace("_", "-")}, "value": [1.0, str(v)]} for pod, v in values.items()]
    return 200, {"status": "success", "data": {"resultType": "vector", "result": result}}


UID = "cr-uid"
OWNED = [{"apiVersion": "sglang.ai/v1alpha1", "kind": "SGLangDeployment", "name": "chat", "uid": UID,
          "controller": True}]  # fmt: skip


def worker(name: str, replica: int, ip: str = "10.0.0.1", **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "creationTimestamp": "2027-01-15T08:00:00Z",
                     "labels": {"sglang.ai/component": "worker", "sglang.ai/replica": str(replica),
                                "sglang.ai/node-rank": "0"}, "ownerReferences": OWNED},
        "spec": {"nodeName": "node-2"},
        "status": {"podIP": ip, "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2027-01-15T08:00:02Z"},
            {"type": "Ready", "status": "True", "lastTransitionTime": "2027-01-15T08:01:40Z"}],
            "containerStatuses": [{"restartCount": 0, "state": {"running": {"startedAt": "2027-01-15T08:00:10Z"}}}],
            **status},
    }  # fmt: skip


def test_promql_groups_by_pod_over_the_window_for_this_deployments_workers() -> None:
    queries = promql("team-a", "chat", 300)
    assert queries["load"] == (
        'sum by (pod) (rate(sglang:e2e_request_latency_seconds_sum{namespace="team-a",sglang_deployment="chat",'
        'sglang_component="worker"}[300s]))'
    )
    assert "inter_token_latency_seconds_sum" in queries["itl"] and "[300s]" in queries["itl"]
    assert queries["gpu_model"] == 'count by (pod, modelName) (DCGM_FI_DEV_GPU_UTIL{namespace="team-a"})'


def test_read_metrics_maps_each_signal_per_pod_and_reports_what_failed(
    prometheus: Callable[..., FakePrometheus],  # noqa: F811
) -> None:
    gpu = 200, {"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {"pod": "chat-a-0-0", "modelName": "NVIDIA H200"}, "value": [1.0, "8"]}]}}  # fmt: skip
    fake = prometheus({
        "e2e_request_latency": by_pod(chat_a_0_0=1.5, chat_a_1_0=4.0),
        "num_requests_total": by_pod(chat_a_0_0=120, chat_a_1_0="NaN"),
        "time_to_first_token": (500, {"status": "error", "error": "boom"}),
        "inter_token_latency": (200, {"status": "success", "data": {"resultType": "vector", "result": [{"x": 1}]}}),
        "cache_hit_rate": by_pod(chat_a_0_0=0.8),
        "DCGM_FI_DEV_GPU_UTIL": gpu,
    })  # fmt: skip
    got = read_metrics(connect(fake.url), "team-a", "chat", 300, time.monotonic() + 10)
    assert got.load == {"chat-a-0-0": 1.5, "chat-a-1-0": 4.0}
    assert got.requests == {"chat-a-0-0": 120.0}  # NaN is no reading
    assert got.ttft is None and got.itl is None
    assert got.cache_hit_rate == {"chat-a-0-0": 0.8}
    assert got.gpu_model == {"chat-a-0-0": "NVIDIA H200"}
    assert got.errors == ("ttft: HTTP 500", "itl: unexpected answer (not a PromQL vector)")


def test_read_metrics_stops_at_the_deadline(prometheus: Callable[..., FakePrometheus]) -> None:  # noqa: F811
    hang = threading.Event()
    fake = prometheus({}, hang=hang)
    started = time.monotonic()
    got = read_metrics(connect(fake.url, timeout_seconds=1.0), "team-a", "chat", 300, started + 1.5)
    assert time.monotonic() - started < 4.0
    assert got.load is None and got.gpu_model is None
    assert any("deadline" in e for e in got.errors)


def test_read_routers_lists_urls_with_health_and_marks_a_failing_router_unknown() -> None:
    listing = {"workers": [{"id": "a", "url": "http://10.0.0.1:30000", "is_healthy": True},
                           {"id": "b", "url": "http://10.0.0.2:30000", "is_healthy": False},
                           {"id": "c", "url": "http://10.0.0.3:30000", "status": "draining"}]}  # fmt: skip
    with serving({("GET", "/workers"): Reply.json(listing)}) as good, serving({("GET", "*"): Reply(500)}) as bad:
        pods = []
        for name, fake in (("r-good", good), ("r-bad", bad)):
            parts = urlsplit(fake.url)
            pods.append({"metadata": {"name": name}, "status": {"podIP": parts.hostname, "conditions": [
                {"type": "Ready", "status": "True"}]}, "port": parts.port})  # fmt: skip
        views = [read_routers([p], p["port"], None, time.monotonic() + 5)[0] for p in pods]
    assert views[0].workers == {"http://10.0.0.1:30000": True, "http://10.0.0.2:30000": False}
    assert views[1].workers is None


def test_pod_facts_read_timestamps_conditions_and_state() -> None:
    facts = pod_facts(worker("chat-a-1-0", 1))
    assert (facts.name, facts.replica, facts.rank, facts.node, facts.ready, facts.serving) == (
        "chat-a-1-0", "1", 0, "node-2", True, True)  # fmt: skip
    assert facts.scheduled is not None and facts.created is not None and facts.started is not None
    assert (facts.scheduled - facts.created, facts.started - facts.created) == (2.0, 10.0)
    assert facts.ready_since is not None and facts.ready_since - facts.created == 100.0
    draining = worker("chat-a-2-0", 2)
    draining["metadata"]["annotations"] = {"sglang.ai/draining-since": "2027-01-15T09:00:00Z"}
    assert not pod_facts(draining).serving
    assert pod_facts({"metadata": {"labels": {"sglang.ai/node-rank": "x"}}}).rank == -1


def test_fleet_facts_take_policy_thresholds_urls_and_scale_ups_from_the_cr() -> None:
    spec = SGLangDeploymentSpec.model_validate({
        "model": {"path": "m"}, "router": {"policy": "cache_aware", "args": ["--balance-abs-threshold", "8",
                                                                            "--balance-rel-threshold=1.2"]},
        "autoscaling": {"enabled": True},
    })  # fmt: skip
    history = [{"time": "2027-01-15T08:00:00Z", "replicas": 1}, {"time": "2027-01-15T08:05:00Z", "replicas": 2}]
    body = {"metadata": {"uid": UID}, "status": {"readyReplicas": 2, "autoscaler": {"history": history}}}
    router = {"metadata": {"labels": {"sglang.ai/component": "router"}}}
    facts = fleet_facts(body, spec, [worker("chat-a-0-0", 0), router], [], now=0.0)
    assert (facts.policy, facts.balance_abs_threshold, facts.balance_rel_threshold) == ("cache_aware", 8.0, 1.2)
    assert facts.pod_urls == {"chat-a-0-0": "http://10.0.0.1:30000"}
    other_port = worker("chat-a-1-0", 1, ip="10.0.0.2")
    other_port["spec"]["containers"] = [{"name": "sglang", "ports": [{"name": "http", "containerPort": 31000}]}]
    assert fleet_facts(body, spec, [other_port], [], now=0.0).pod_urls == {"chat-a-1-0": "http://10.0.0.2:31000"}
    assert [(u.before, u.after) for u in facts.scale_ups] == [(1, 2)]
    assert [p.name for p in facts.pods] == ["chat-a-0-0"] and facts.ready_replicas == 2


LOOKALIKES = {
    "no-owner": [],
    "another-owner": [{**OWNED[0], "uid": "someone-else"}],
    "not-the-controller": [{**OWNED[0], "controller": False}],
}


def test_fleet_facts_keep_only_the_worker_pods_the_cr_controls() -> None:
    """Issue 37: a pod of the namespace labelled as a worker is not one: only a controller ownerReference to the
    CR's uid makes it the fleet's (the reconciler's own test, `observed.owned_workers`)."""
    spec = SGLangDeploymentSpec.model_validate({"model": {"path": "m"}})
    pods = [worker("chat-a-0-0", 0)]
    for i, owners in enumerate(LOOKALIKES.values()):
        lookalike = worker(f"chat-a-{i + 5}-0", i + 5, ip=f"10.0.0.{i + 5}")
        lookalike["metadata"]["ownerReferences"] = owners
        pods.append(lookalike)
    facts = fleet_facts({"metadata": {"uid": UID}, "status": {}}, spec, pods, [], now=0.0)
    assert [p.name for p in facts.pods] == ["chat-a-0-0"]
    assert facts.pod_urls == {"chat-a-0-0": "http://10.0.0.1:30000"}


def test_the_doctor_and_the_reconciler_select_worker_pods_with_one_function() -> None:
    from sglang_operator import observed
    from sglang_operator.controller import reconcile
    from sglang_operator.doctor import observe, pd_observe

    assert reconcile.owned_workers is observed.owned_workers
    assert observe.owned_workers is observed.owned_workers and pd_observe.owned_workers is observed.owned_workers
