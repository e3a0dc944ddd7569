"""Issue 37, ownership of pods in whole reconcile passes (fakekube): a pod name another owner holds is a name
collision reported like a child's, never taken for the CR's pod; a pod is deleted only if it is the very pod the pass
observed (its uid is the delete's precondition)."""

from typing import Any

from kubernetes import client

from sglang_operator.runtime.readback import read_snapshot
from tests.unit.controller.test_reconcile_pass import NAME, NS, cluster, condition, events, pods


def foreign_pod(name: str, uid: str) -> dict[str, Any]:
    owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "theirs", "uid": "rs-uid", "controller": True}
    return {"apiVersion": "v1", "kind": "Pod", "status": {"phase": "Running"},
            "metadata": {"name": name, "namespace": NS, "uid": uid, "labels": {"app": "theirs"},
                         "ownerReferences": [owner]}}  # fmt: skip


def test_a_pod_name_another_owner_holds_is_a_name_collision() -> None:
    reconciler, fake = cluster({"replicas": 1, "router": {"enabled": False}})
    reconciler.reconcile(NS, NAME)
    [name] = pods(fake)
    del fake.objects[("Pod", name)]
    theirs = fake.put(foreign_pod(name, "their-pod"))
    for _ in range(3):
        reconciler.reconcile(NS, NAME)
    degraded = condition(fake, "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "NameCollision")
    assert f"Pod {name} exists and is not owned by this SGLangDeployment" in degraded["message"]
    assert len(events(fake, "NameCollision")) == 1  # one event, not one per pass
    assert fake.objects[("Pod", name)] == theirs  # never written
    assert fake.objects[("SGLangDeployment", NAME)]["status"]["readyReplicas"] == 0  # not taken for the replica

    del fake.objects[("Pod", name)]  # the name is free again: the replica is created and the problem clears
    reconciler.reconcile(NS, NAME)
    assert pods(fake) == [name] and condition(fake, "Degraded")["status"] == "False"


def test_a_pod_replaced_under_its_name_since_the_snapshot_is_not_deleted() -> None:
    reconciler, fake = cluster({"replicas": 1, "router": {"enabled": False}})
    reconciler.reconcile(NS, NAME)
    [name] = pods(fake)
    observed_uid = fake.objects[("Pod", name)]["metadata"]["uid"]
    fake.objects[("Pod", name)]["status"] = {"phase": "Failed"}  # the pass deletes (and later recreates) it
    snapshot = read_snapshot(reconciler.writer, NS, NAME)
    assert snapshot is not None
    fake.objects[("Pod", name)] = foreign_pod(name, "their-pod")  # meanwhile: gone, and someone else's made
    reconciler.run(snapshot)
    [delete] = [c for c in fake.calls if c.verb == "delete" and c.kind == "Pod"]
    assert isinstance(delete.body, client.V1DeleteOptions)
    assert delete.body.preconditions == client.V1Preconditions(uid=observed_uid)
    assert fake.objects[("Pod", name)]["metadata"]["uid"] == "their-pod"  # left alone
    assert name not in reconciler.writer.expected.deleted
