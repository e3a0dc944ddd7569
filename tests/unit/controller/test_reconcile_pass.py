"""Whole reconcile passes against an in-memory API (fakekube): ownership, deletion of children no longer rendered,
bounded work per pass, and errors that become status with one event each."""

import json
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from sglang_operator.controller.reconcile import Reconciler
from sglang_operator.settings import OperatorSettings, PodPolicy
from tests.support.controller.fakekube import FakeKube, wire

NS, NAME, UID = "team-a", "chat", "cr-uid"


def cluster(spec: dict[str, Any], settings: OperatorSettings | None = None) -> tuple[Reconciler, FakeKube]:
    fake = FakeKube()
    fake.put({"apiVersion": "sglang.ai/v1alpha1", "kind": "SGLangDeployment",
              "metadata": {"name": NAME, "namespace": NS, "uid": UID, "generation": 1},
              "spec": {"model": {"path": "org/model"}, **spec}})  # fmt: skip
    reconciler = Reconciler(client.ApiClient(), settings or OperatorSettings())
    wire(reconciler, fake)
    return reconciler, fake


def set_spec(fake: FakeKube, **changes: Any) -> None:
    cr = fake.objects[("SGLangDeployment", NAME)]
    cr["spec"] = {**cr["spec"], **changes}
    cr["metadata"]["generation"] += 1


def condition(fake: FakeKube, type_: str) -> dict[str, Any]:
    status = fake.objects[("SGLangDeployment", NAME)].get("status") or {}
    return next(c for c in status.get("conditions") or [] if c["type"] == type_)


def pods(fake: FakeKube) -> list[str]:
    return sorted(name for kind, name in fake.objects if kind == "Pod")


def events(fake: FakeKube, reason: str) -> list[str]:
    return [c.body["message"] for c in fake.calls if c.verb == "create" and c.kind == "Event"
            and c.body["reason"] == reason]  # fmt: skip


def kinds(fake: FakeKube) -> set[tuple[str, str]]:
    return {key for key in fake.objects if key[0] not in ("Pod", "Event", "SGLangDeployment")}


def test_children_turned_off_are_deleted() -> None:
    reconciler, fake = cluster({"replicas": 1, "parallelism": {"tp": 2, "nnodes": 2},
                                "monitoring": {"podMonitor": True}, "networkPolicy": {"enabled": True}})  # fmt: skip
    reconciler.reconcile(NS, NAME)
    assert kinds(fake) == {("Service", "chat-workers"), ("Deployment", "chat-router"), ("Service", "chat-router"),
                           ("PodMonitor", "chat"), ("NetworkPolicy", "chat-workers")}  # fmt: skip

    set_spec(fake, router={"enabled": False}, monitoring={"podMonitor": False}, networkPolicy={"enabled": False},
             parallelism={"tp": 2, "nnodes": 1})  # fmt: skip
    reconciler.reconcile(NS, NAME)
    assert kinds(fake) == set()


def test_a_foreign_object_with_a_child_name_is_reported_never_patched_or_deleted() -> None:
    reconciler, fake = cluster({"replicas": 0})
    meta = {"name": "chat-router", "namespace": NS, "labels": {"team": "b"}}
    theirs = fake.put({"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": {}})
    snapshot = json.dumps(theirs, sort_keys=True)
    for _ in range(3):
        reconciler.reconcile(NS, NAME)
    degraded = condition(fake, "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "NameCollision")
    assert "Service chat-router" in degraded["message"]
    assert len(events(fake, "NameCollision")) == 1  # one event, not one per pass
    assert json.dumps(fake.objects[("Service", "chat-router")], sort_keys=True) == snapshot
    assert not [c for c in fake.writes("Service") if c.name == "chat-router" and c.verb != "create"]

    set_spec(fake, router={"enabled": False})  # no longer rendered: still not ours to delete
    reconciler.reconcile(NS, NAME)
    assert ("Service", "chat-router") in fake.objects
    assert condition(fake, "Degraded")["status"] == "False"  # cleared by the next good pass


def test_pods_the_cr_does_not_own_are_ignored() -> None:
    reconciler, fake = cluster({"replicas": 0, "router": {"enabled": False}})
    labels = {"sglang.ai/deployment": NAME, "sglang.ai/component": "worker", "sglang.ai/replica": "0",
              "sglang.ai/node-rank": "0", "sglang.ai/revision": "old"}  # fmt: skip
    fake.put({"kind": "Pod", "metadata": {"name": "lookalike", "namespace": NS, "labels": labels},
              "status": {"phase": "Running", "podIP": "10.0.0.9"}})  # fmt: skip
    for _ in range(2):
        reconciler.reconcile(NS, NAME)
    assert pods(fake) == ["lookalike"]
    assert fake.writes("Pod") == []
    assert fake.objects[("SGLangDeployment", NAME)]["status"]["replicas"] == 0


def test_a_huge_replica_count_creates_a_bounded_number_of_pods_per_pass() -> None:
    reconciler, fake = cluster({"replicas": 500, "router": {"enabled": False}})
    reconciler.reconcile(NS, NAME)
    assert len(pods(fake)) == 32
    reconciler.reconcile(NS, NAME)
    assert len(pods(fake)) == 64  # the next pass continues

    reconciler, fake = cluster({"replicas": 500, "router": {"enabled": False}, "parallelism": {"tp": 4, "nnodes": 4}})
    reconciler.reconcile(NS, NAME)
    assert len(pods(fake)) == 32  # 8 replicas of 4 pods


def test_an_unserved_pod_monitor_kind_is_status_not_a_failed_pass() -> None:
    reconciler, fake = cluster({"replicas": 1, "router": {"enabled": False}, "monitoring": {"podMonitor": True}})
    fake.unserved_kinds.add("PodMonitor")
    reconciler.reconcile(NS, NAME)
    degraded = condition(fake, "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "ChildKindUnavailable")
    assert "PodMonitor chat not created" in degraded["message"]
    assert len(pods(fake)) == 1  # the rest of the pass went on


def test_a_failing_step_becomes_one_condition_and_one_event_then_clears() -> None:
    reconciler, fake = cluster({"replicas": 2, "router": {"enabled": False}})
    fake.failures[("create", "Pod")] = ApiException(status=403, reason="Forbidden")
    for _ in range(3):
        reconciler.reconcile(NS, NAME)  # never raises
    degraded = condition(fake, "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "ReconcileError")
    assert degraded["message"] == "applying the replica plan: the API server answered 403 Forbidden"
    assert len(events(fake, "ReconcileError")) == 1

    del fake.failures[("create", "Pod")]
    reconciler.reconcile(NS, NAME)
    assert condition(fake, "Degraded")["status"] == "False"
    assert len(pods(fake)) == 2


def test_a_failure_before_anything_is_observed_keeps_the_last_counts() -> None:
    """The children step comes before the workers are observed: its failure stops the chain there."""
    reconciler, fake = cluster({"replicas": 1, "router": {"enabled": False}})
    reconciler.reconcile(NS, NAME)
    before = dict(fake.objects[("SGLangDeployment", NAME)]["status"])
    set_spec(fake, networkPolicy={"enabled": True})
    fake.failures[("apply", "NetworkPolicy")] = ApiException(status=500, reason="Internal Server Error")
    reconciler.reconcile(NS, NAME)
    after = fake.objects[("SGLangDeployment", NAME)]["status"]
    assert condition(fake, "Degraded")["message"] == (
        "applying NetworkPolicy chat-workers: the API server answered 500 Internal Server Error"
    )
    assert {k: v for k, v in after.items() if k not in ("conditions", "observedGeneration")} == {
        k: v for k, v in before.items() if k not in ("conditions", "observedGeneration")
    }


def test_a_spec_against_the_pod_policy_writes_no_child() -> None:
    spec = {"replicas": 1, "model": {"path": "org/model", "cache": {"type": "hostPath", "hostPath": "/"}}}
    reconciler, fake = cluster(spec, OperatorSettings(pod_policy=PodPolicy(allowed_host_paths=("/models",))))
    for _ in range(2):
        reconciler.reconcile(NS, NAME)
    ready = condition(fake, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "PolicyViolation")
    assert "spec.model.cache.hostPath" in ready["message"] and "--allow-host-path" in ready["message"]
    assert [c for c in fake.writes() if c.kind not in ("Event", "SGLangDeployment")] == []
    assert len(events(fake, "PolicyViolation")) == 1


def test_operator_annotations_and_labels_that_do_not_parse_never_raise() -> None:
    reconciler, fake = cluster({"replicas": 1, "router": {"enabled": False}})
    reconciler.reconcile(NS, NAME)
    pod = fake.objects[("Pod", pods(fake)[0])]
    pod["metadata"]["annotations"].update({"sglang.ai/replica-nodes": "abc", "sglang.ai/draining-since": "soon"})
    twin = json.loads(json.dumps(pod))
    twin["metadata"].update(name="twin", uid="twin-uid")
    twin["metadata"]["labels"]["sglang.ai/replica"] = "x"
    fake.put(twin)
    result = reconciler.reconcile(NS, NAME)
    assert result.plan is not None and result.plan.empty  # the replica is kept; the unparsable twin is ignored
    assert condition(fake, "Degraded")["status"] == "False"


def test_a_kv_contract_change_starts_a_cut_over_beside_the_serving_generation() -> None:
    """Whole passes of a prefill/decode fleet (tests/integration/controller/test_cutover.py has each decision): the
    page size changes, so the new epoch's routers start in the second slot and its replicas are created in full,
    while the serving slot, the Service's selector and the serving replicas stay exactly as they were."""
    groups = [{"name": "p", "role": "prefill", "replicas": 1, "parallelism": {"tp": 2}},
              {"name": "d", "role": "decode", "replicas": 2, "parallelism": {}}]  # fmt: skip
    reconciler, fake = cluster({"disaggregation": {"transferBackend": "mooncake_tcp"}, "workerGroups": groups})
    reconciler.reconcile(NS, NAME)
    serving = fake.objects[("Service", "chat-router")]["spec"]["selector"]["sglang.ai/kv-epoch"]
    first = {name: fake.objects[("Pod", name)]["metadata"]["labels"]["sglang.ai/kv-epoch"] for name in pods(fake)}
    assert len(first) == 3 and set(first.values()) == {serving}
    slot_a = json.dumps(fake.objects[("Deployment", "chat-router")], sort_keys=True)

    set_spec(fake, disaggregation={"transferBackend": "mooncake_tcp", "pageSize": 32})
    before = len(fake.writes())
    reconciler.reconcile(NS, NAME)
    new_slot = fake.objects[("Deployment", "chat-router-b")]
    epoch = new_slot["spec"]["template"]["metadata"]["labels"]["sglang.ai/kv-epoch"]
    assert epoch != serving
    assert json.dumps(fake.objects[("Deployment", "chat-router")], sort_keys=True) == slot_a  # kept as it was
    assert fake.objects[("Service", "chat-router")]["spec"]["selector"]["sglang.ai/kv-epoch"] == serving
    now = {name: fake.objects[("Pod", name)]["metadata"]["labels"]["sglang.ai/kv-epoch"] for name in pods(fake)}
    assert {n: e for n, e in now.items() if n in first} == first  # the serving replicas are all still there
    assert sorted(e for n, e in now.items() if n not in first) == [epoch] * 3  # the new ones, in full at once
    assert not [c for c in fake.writes()[before:] if c.kind == "Pod" and c.verb != "create"]  # none drained
    progressing = condition(fake, "Progressing")
    assert progressing["reason"] == "CuttingOver" and f"stays on epoch {serving}" in progressing["message"]
