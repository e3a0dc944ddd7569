"""Which pods carry the InferencePool membership label: registered, ready, serving rank-0 pods only; the label
leaves a replica that is chosen to leave before its drain starts. Pure functions first, then whole passes against
the in-memory API (fakekube)."""

from typing import Any

from sglang_operator.api.inferencepool import LABEL_INFERENCE_POOL
from sglang_operator.controller.inferencepool import is_member, membership_changes, membership_labels, pool_members
from sglang_operator.observed import group_replicas


def pod(name: str, replica: int, rank: int = 0, ready: bool = True, member: bool = False,
        annotations: dict[str, str] | None = None, nodes: int = 1) -> dict[str, Any]:  # fmt: skip
    labels = {"sglang.ai/replica": str(replica), "sglang.ai/node-rank": str(rank), "sglang.ai/revision": "r1"}
    if member:
        labels[LABEL_INFERENCE_POOL] = "member"
    return {
        "metadata": {"name": name, "labels": labels,
                     "annotations": {"sglang.ai/replica-nodes": str(nodes), **(annotations or {})}},
        "spec": {"containers": [{"ports": [{"name": "http", "containerPort": 30000}]}]},
        "status": {"phase": "Running", "podIP": f"127.1.{rank}.{replica + 1}",
                   "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }  # fmt: skip


def url(replica: int) -> str:
    return f"http://127.1.0.{replica + 1}:30000"


def test_members_are_registered_ready_serving_rank0_pods() -> None:
    pods = [
        pod("a-0", 0, nodes=2),  # replica 0 spans two nodes: only its rank 0 is a member
        pod("a-1", 0, rank=1, nodes=2),
        pod("b-0", 1),
        pod("c-0", 2, ready=False),
        pod("d-0", 3, annotations={"sglang.ai/draining-since": "2026-12-01T00:00:00Z"}),
        pod("e-0", 4, annotations={"sglang.ai/warm": "true"}),
        pod("f-0", 5),  # chosen to leave on this pass
        pod("g-0", 6),  # ready, not registered yet
    ]
    replicas = group_replicas(pods)
    registered = {url(i) for i in range(6)}
    assert pool_members(True, replicas, {5}, registered) == {"a-0", "b-0"}
    assert pool_members(False, replicas, {5}, registered) == set()
    # Without a router, ready serving replicas are members (warm ones are not serving).
    assert pool_members(True, replicas, {5}, None) == {"a-0", "b-0", "g-0"}


def test_changes_add_and_remove_only_what_differs() -> None:
    live = {"a": pod("a", 0), "b": pod("b", 1, member=True), "c": pod("c", 2, member=True), "d": pod("d", 3)}
    live["d"]["metadata"]["deletionTimestamp"] = "2026-12-01T00:00:00Z"
    assert membership_changes(live, {"a", "b", "d"}) == {"a": True, "c": False}
    assert membership_changes(live, set()) == {"b": False, "c": False}
    assert is_member(live["b"]) and not is_member(live["a"]) and not is_member(None)
    assert membership_labels(True) == {LABEL_INFERENCE_POOL: "member"}
    assert membership_labels(False) == {LABEL_INFERENCE_POOL: None}


# -- whole passes (fakekube) --------------------------------------------------------------------------------------
def _mark_ready(fake: Any) -> None:
    """What the kubelet would report: every worker pod running and Ready on an address nothing listens on."""
    for (kind, _), obj in fake.objects.items():
        if kind == "Pod":
            obj["status"] = {"phase": "Running", "podIP": f"127.255.255.{10 + len(obj['metadata']['name']) % 200}",
                             "conditions": [{"type": "Ready", "status": "True"}]}  # fmt: skip


def _members(fake: Any) -> list[str]:
    return sorted(name for (kind, name), obj in fake.objects.items()
                  if kind == "Pod" and is_member(obj))  # fmt: skip


def test_a_pass_labels_ready_workers_and_a_drain_drops_the_label_in_its_own_apply() -> None:
    from tests.unit.controller.test_reconcile_pass import NAME, NS, cluster, set_spec

    pool = {"enabled": True, "endpointPickerRef": {"name": "chat-epp"}}
    reconciler, fake = cluster({"replicas": 2, "router": {"enabled": False}, "inferencePool": pool})
    reconciler.reconcile(NS, NAME)
    assert ("InferencePool", "chat") in fake.objects and _members(fake) == []  # created, nothing ready yet
    _mark_ready(fake)
    reconciler.reconcile(NS, NAME)
    assert len(_members(fake)) == 2
    labelled = [c for c in fake.applies("Pod") if c.body["metadata"].get("labels")]
    assert len(labelled) == 2 and all(set(c.body["metadata"]["labels"]) == {LABEL_INFERENCE_POOL} for c in labelled)

    before = len(fake.writes())
    reconciler.reconcile(NS, NAME)
    assert fake.writes()[before:] == []  # nothing to change: nothing written

    set_spec(fake, replicas=1)
    before = len(fake.applies("Pod"))
    reconciler.reconcile(NS, NAME)
    (drain,) = fake.applies("Pod")[before:]
    assert "sglang.ai/draining-since" in drain.body["metadata"]["annotations"]
    assert "labels" not in drain.body["metadata"]  # the drain's own apply names no label: the label goes with it
    draining = fake.objects[("Pod", drain.name)]
    assert not is_member(draining) and _members(fake) == sorted(
        name for (kind, name) in fake.objects if kind == "Pod" and name != drain.name
    )

    set_spec(fake, inferencePool={"enabled": False})
    reconciler.reconcile(NS, NAME)
    assert _members(fake) == [] and ("InferencePool", "chat") not in fake.objects  # off: label and pool go


def test_without_the_crd_the_pool_is_a_problem_in_status_and_the_fleet_runs() -> None:
    from tests.unit.controller.test_reconcile_pass import NAME, NS, cluster, condition, pods

    pool = {"enabled": True, "endpointPickerRef": {"name": "chat-epp"}}
    reconciler, fake = cluster({"replicas": 1, "router": {"enabled": False}, "inferencePool": pool})
    fake.unserved_kinds.add("InferencePool")
    reconciler.reconcile(NS, NAME)
    degraded = condition(fake, "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "ChildKindUnavailable")
    assert "InferencePool chat not created" in degraded["message"]
    assert len(pods(fake)) == 1
