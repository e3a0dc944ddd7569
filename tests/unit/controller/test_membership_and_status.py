"""Router membership planning and the pure status function."""

from sglang_operator.api.spec import SGLangDeploymentSpec
from sglang_operator.controller.routers import RouterState
from sglang_operator.controller.status import GroupObservation, RouterObservation, compute_status
from sglang_operator.observed import ReplicaView, group_replicas
from sglang_operator.router.client import RouterWorker
from sglang_operator.router.membership import plan_membership
from sglang_operator.runtime.conditions import merge_conditions


def worker(id_: str, url: str, healthy: bool = True) -> RouterWorker:
    return RouterWorker(id=id_, url=url, status="ready", healthy=healthy)


def test_membership_adds_missing_removes_stale_and_duplicates() -> None:
    observed = [worker("a", "http://w1"), worker("b", "http://w1", healthy=False), worker("c", "http://gone")]
    plan = plan_membership(["http://w1", "http://w2"], observed)
    assert plan.add == ("http://w2",)
    assert [w.id for w in plan.remove] == ["b", "c"]


def test_membership_in_sync_is_empty() -> None:
    assert plan_membership(["http://w1"], [worker("a", "http://w1")]).empty


def pod_dict(name: str, replica: int, rank: int, ready: bool, revision: str = "r1") -> dict[str, object]:
    return {
        "metadata": {"name": name, "labels": {"sglang.ai/replica": str(replica), "sglang.ai/node-rank": str(rank),
                                              "sglang.ai/revision": revision},
                     "annotations": {"sglang.ai/replica-nodes": "1"}},
        "spec": {"containers": [{"ports": [{"name": "http", "containerPort": 30000}]}]},
        "status": {"phase": "Running", "podIP": f"127.1.0.{replica + 1}",
                   "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }  # fmt: skip


def test_group_replicas_reads_labels_ip_and_readiness() -> None:
    replicas = group_replicas([pod_dict("a", 0, 0, True), pod_dict("b", 1, 0, False)])
    assert [(r.index, r.ready, r.url) for r in replicas] == [
        (0, True, "http://127.1.0.1:30000"),
        (1, False, "http://127.1.0.2:30000"),
    ]


def _status(replicas: list[ReplicaView], previous: dict[str, object], now: str) -> dict[str, object]:
    spec = SGLangDeploymentSpec.model_validate({"model": {"path": "m"}, "parallelism": {"tp": 2}})
    router = RouterObservation(enabled=True, ready_pods=1, registered=len(replicas), synced=True)
    group = GroupObservation(name="", spec=spec, desired=2, revision="r1", replicas=replicas)
    return compute_status(name="d", namespace="ns", generation=3, spec=spec, groups=[group], router=router,
                          failed_replicas=0, previous=previous, now=now)  # fmt: skip


def test_status_counts_and_conditions() -> None:
    replicas = group_replicas([pod_dict("a", 0, 0, True), pod_dict("b", 1, 0, True)])
    status = _status(replicas, {}, "t1")
    assert (status["replicas"], status["readyReplicas"], status["ready"], status["totalGPUs"]) == (2, 2, "2/2", 4)
    assert status["selector"] == "sglang.ai/deployment=d,sglang.ai/component=worker"
    assert status["endpoint"] == "http://d-router.ns.svc:30000"
    conditions = {c["type"]: c for c in status["conditions"]}  # type: ignore[union-attr]
    assert conditions["Ready"]["status"] == "True" and conditions["Progressing"]["status"] == "False"


def test_status_is_stable_and_keeps_transition_times() -> None:
    replicas = group_replicas([pod_dict("a", 0, 0, True), pod_dict("b", 1, 0, True)])
    first = _status(replicas, {}, "t1")
    assert _status(replicas, first, "t2") == first  # nothing changed: identical, so no patch
    degraded = group_replicas([pod_dict("a", 0, 0, True), pod_dict("b", 1, 0, False)])
    flipped = {c["type"]: c for c in _status(degraded, first, "t3")["conditions"]}  # type: ignore[union-attr]
    assert flipped["Ready"]["lastTransitionTime"] == "t3"
    assert flipped["RouterSynced"]["lastTransitionTime"] == "t1"


def test_merge_conditions_keeps_foreign_types() -> None:
    previous = [{"type": "MetricsAvailable", "status": "True", "lastTransitionTime": "t0"}]
    merged = merge_conditions(previous, [{"type": "Ready", "status": "True", "lastTransitionTime": "t1"}])
    assert [c["type"] for c in merged] == ["Ready", "MetricsAvailable"]


def test_router_state_tells_listed_somewhere_from_listed_everywhere() -> None:
    a, b = "http://127.1.0.1:30000", "http://127.1.0.2:30000"
    state = RouterState(lists={
        "http://127.2.0.1:30000": [worker("1", a), worker("2", b)],
        "http://127.2.0.2:30000": [worker("3", a)],  # b's removal already applied here
    })  # fmt: skip
    assert state.registered_urls() == {a, b}
    assert state.listed_everywhere() == {a}
    assert RouterState().listed_everywhere() == set()


def test_status_names_each_groups_role_and_the_fleets_shapes() -> None:
    spec = SGLangDeploymentSpec.model_validate({"model": {"path": "m"}, "disaggregation": {}, "workerGroups": [
        {"name": "p", "role": "prefill", "replicas": 1, "parallelism": {"tp": 2}},
        {"name": "d", "role": "decode", "replicas": 1, "parallelism": {}}]})  # fmt: skip
    router = RouterObservation(enabled=True, ready_pods=1, registered=2, synced=True)
    replicas = group_replicas([pod_dict("a", 0, 0, True)])
    groups = [GroupObservation(name=n, spec=spec, desired=1, revision="r1", replicas=replicas, role=role)
              for n, role in (("p", "prefill"), ("d", "decode"))]  # fmt: skip
    status = compute_status(name="d", namespace="ns", generation=1, spec=spec, groups=groups, router=router,
                            failed_replicas=0, previous={}, now="t")  # fmt: skip
    assert [(g["name"], g["role"]) for g in status["groups"]] == [("p", "prefill"), ("d", "decode")]
    assert status["shape"] == "p (prefill): tp2, d (decode): tp1"
    assert _status(replicas, {}, "t")["shape"] == "tp2"
