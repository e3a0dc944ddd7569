"""The executor against an in-memory API: children are server-side applied (a dropped field goes, another manager's
field stays), unchanged children are not written, objects the CR does not own are never written or deleted, pod
bookkeeping applies only the operator's annotations, and every call carries a deadline."""

import json
from typing import Any

import pytest
from kubernetes import client

from sglang_operator import names
from sglang_operator.api.spec import SGLangDeploymentSpec
from sglang_operator.kvepoch import Cutover
from sglang_operator.render import Owner, shared_children
from sglang_operator.runtime.writer import ChildRef, Outcome, Writer, possible_children, stale_children
from sglang_operator.settings import OperatorSettings
from tests.support.api.pd_cases import pd
from tests.support.controller.fakekube import FakeKube, wire

OWNER = Owner(name="chat", namespace="team-a", uid="cr-uid")


def everything_on() -> SGLangDeploymentSpec:
    return SGLangDeploymentSpec.model_validate({
        "model": {"path": "org/model"}, "parallelism": {"nnodes": 2},
        "router": {"enabled": True}, "monitoring": {"podMonitor": True}, "networkPolicy": {"enabled": True},
        "inferencePool": {"enabled": True, "endpointPickerRef": {"name": "chat-epp"}},
    })  # fmt: skip


def writer() -> tuple[Writer, FakeKube]:
    fake = FakeKube()
    w = Writer(client.ApiClient())
    wire(w, fake)
    return w, fake


def router_service() -> dict[str, Any]:
    return next(c for c in shared_children(everything_on(), OWNER) if c["kind"] == "Service" and "router" in
                c["metadata"]["name"])  # fmt: skip


def foreign(obj: dict[str, Any]) -> dict[str, Any]:
    """The same kind and name, owned by someone else."""
    reference = {"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "someone-else", "controller": True}
    return {**obj, "metadata": {"name": obj["metadata"]["name"], "namespace": "team-a", "ownerReferences": [reference]}}


def test_every_rendered_child_is_one_the_operator_may_own() -> None:
    """`possible_children` is what stale-child deletion looks at: a child it misses would never be cleaned up. A
    prefill/decode fleet's cut-over renders its routers in the second slot (`kvepoch.Cutover`)."""
    rendered = {ChildRef.of(c) for c in shared_children(everything_on(), OWNER, OperatorSettings())}
    pd_spec = SGLangDeploymentSpec.model_validate({"model": {"path": "org/model"}, **pd()})
    cutover = Cutover("new", "old", None, names.router_b(OWNER.name), kept=(names.router(OWNER.name),))
    rendered |= {ChildRef.of(c) for c in shared_children(pd_spec, OWNER, OperatorSettings(), cutover)}
    assert rendered == set(possible_children(OWNER.name))


def test_create_then_unchanged_then_patched_on_change() -> None:
    w, fake = writer()
    desired = router_service()
    assert w.ensure(desired, None, OWNER.uid) is Outcome.CREATED
    stored = fake.objects[("Service", "chat-router")]
    assert w.ensure(desired, stored, OWNER.uid) is Outcome.UNCHANGED
    assert [c.verb for c in fake.writes()] == ["apply"]  # nothing written for an unchanged child
    assert "uid" not in fake.calls[-1].body["metadata"]  # a create has no object to name
    changed = {**desired, "spec": {**desired["spec"], "ports": []}}
    assert w.ensure(changed, stored, OWNER.uid) is Outcome.PATCHED
    assert [c.verb for c in fake.writes()] == ["apply", "apply"]
    assert fake.calls[-1].body["metadata"]["uid"] == stored["metadata"]["uid"]  # that very object


def test_an_apply_removes_a_dropped_field_and_keeps_fields_others_set() -> None:
    w, fake = writer()
    desired = router_service()
    desired["metadata"]["labels"]["dropped-later"] = "yes"
    w.ensure(desired, None, OWNER.uid)
    stored = fake.objects[("Service", "chat-router")]
    stored["metadata"]["labels"]["policy.example.com/team"] = "a"  # another manager's label
    stored["metadata"]["annotations"]["sidecar.example.com/injected"] = "true"
    del desired["metadata"]["labels"]["dropped-later"]
    assert w.ensure(desired, stored, OWNER.uid) is Outcome.PATCHED
    labels, annotations = stored["metadata"]["labels"], stored["metadata"]["annotations"]
    assert "dropped-later" not in labels
    assert labels["policy.example.com/team"] == "a" and annotations["sidecar.example.com/injected"] == "true"
    assert fake.calls[-1].body["metadata"]["labels"] == desired["metadata"]["labels"]  # the render, whole


def test_an_update_of_an_object_replaced_since_it_was_observed_writes_nothing() -> None:
    """The uid in the apply is a precondition: an object deleted and created again under the name (by anyone)
    is not the one observed, and the apply is refused instead of changing it."""
    w, fake = writer()
    desired = router_service()
    w.ensure(desired, None, OWNER.uid)
    observed = json.loads(json.dumps(fake.objects[("Service", "chat-router")]))
    fake.objects[("Service", "chat-router")]["metadata"]["uid"] = "a-new-object"
    changed = {**desired, "spec": {**desired["spec"], "ports": []}}
    assert w.ensure(changed, observed, OWNER.uid) is Outcome.UNCHANGED
    assert fake.objects[("Service", "chat-router")]["spec"] == desired["spec"]


def test_an_object_the_cr_does_not_own_is_never_patched() -> None:
    w, fake = writer()
    desired = router_service()
    theirs = fake.put(foreign(desired))
    assert w.ensure(desired, theirs, OWNER.uid) is Outcome.COLLISION
    assert fake.writes() == []
    assert fake.objects[("Service", "chat-router")]["metadata"]["ownerReferences"][0]["uid"] == "someone-else"


def test_pod_bookkeeping_applies_only_the_operators_annotations() -> None:
    w, fake = writer()
    annotations = {"sglang.ai/warm": "true", "istio.io/rev": "1"}
    meta = {"name": "p", "namespace": "team-a", "annotations": annotations}
    pod = fake.put({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"containers": []}})
    uid = pod["metadata"]["uid"]
    w.annotate_pod("team-a", "p", uid, {"sglang.ai/warm": "false", "sglang.ai/draining-since": "2026-12-01T00:00:00Z"})
    assert pod["metadata"]["annotations"] == {
        "sglang.ai/warm": "false", "sglang.ai/draining-since": "2026-12-01T00:00:00Z", "istio.io/rev": "1"}  # fmt: skip
    w.annotate_pod("team-a", "p", uid, {"sglang.ai/warm": "false"})  # removal: applied without the key
    assert pod["metadata"]["annotations"] == {"sglang.ai/warm": "false", "istio.io/rev": "1"}
    assert pod["spec"] == {"containers": []}  # the apply names metadata only
    call = fake.applies("Pod")[-1]
    assert set(call.body["metadata"]) == {"name", "namespace", "uid", "annotations"}
    w.annotate_pod("team-a", "p", "another-pod", {})  # a pod of that name that is not the observed one: untouched
    assert pod["metadata"]["annotations"]["sglang.ai/warm"] == "false"
    w.annotate_pod("team-a", "gone", "uid-x", {"sglang.ai/warm": "false"})  # deleted meanwhile: nothing to do
    assert ("Pod", "gone") not in fake.objects
    assert w.expected.annotated["p"] == {"sglang.ai/warm": "false"} and "gone" not in w.expected.annotated


def test_stale_children_are_the_owned_ones_no_longer_rendered() -> None:
    everything = shared_children(everything_on(), OWNER)
    observed = {ChildRef.of(c): c for c in everything}  # rendered children carry the CR's ownerReference
    router_off = [c for c in everything if "router" not in c["metadata"]["name"]]
    assert stale_children(OWNER.name, router_off, observed, OWNER.uid) == sorted(
        [ChildRef("apps/v1", "Deployment", "chat-router"), ChildRef("v1", "Service", "chat-router")]
    )
    theirs = {ref: foreign(obj) for ref, obj in observed.items()}
    assert stale_children(OWNER.name, router_off, theirs, OWNER.uid) == []  # never delete what is not ours
    assert stale_children(OWNER.name, everything, observed, OWNER.uid) == []


def test_delete_child_is_guarded_by_the_objects_uid() -> None:
    w, fake = writer()
    stored = fake.put(router_service())
    w.delete_child(ChildRef.of(stored), "team-a", stored)
    assert ("Service", "chat-router") not in fake.objects
    assert fake.calls[-1].body == {
        "preconditions": {"uid": stored["metadata"]["uid"]},
        "propagationPolicy": "Background",
    }


@pytest.mark.parametrize("kind", ["Service", "Deployment", "PodMonitor", "NetworkPolicy", "InferencePool"])
def test_every_child_kind_is_written_with_a_deadline(kind: str) -> None:
    w, fake = writer()  # the fake fails any call without _request_timeout
    child = next(c for c in shared_children(everything_on(), OWNER) if c["kind"] == kind)
    assert w.ensure(child, None, OWNER.uid) is Outcome.CREATED
    assert w.read(ChildRef.of(child), "team-a") is not None
    w.delete_child(ChildRef.of(child), "team-a", fake.objects[(kind, child["metadata"]["name"])])
    assert w.read(ChildRef.of(child), "team-a") is None


def pod_named(name: str, owner_uid: str = OWNER.uid) -> dict[str, Any]:
    reference = {"apiVersion": "sglang.ai/v1alpha1", "kind": "SGLangDeployment", "name": OWNER.name,
                 "uid": owner_uid, "controller": True}  # fmt: skip
    return {"apiVersion": "v1", "kind": "Pod", "spec": {"containers": []},
            "metadata": {"name": name, "namespace": "team-a", "ownerReferences": [reference]}}  # fmt: skip


def test_a_pod_is_deleted_only_if_it_is_the_one_observed() -> None:
    """Issue 37: a pod is deleted with its uid as the precondition, so a pod created under the same name since it
    was observed (someone else's) is never deleted, and no deletion of it is expected."""
    w, fake = writer()
    observed = fake.put(pod_named("chat-0-0"))
    w.delete_pod("team-a", "chat-0-0", observed["metadata"]["uid"])
    assert ("Pod", "chat-0-0") not in fake.objects
    options = fake.calls[-1].body
    assert isinstance(options, client.V1DeleteOptions)
    assert options.preconditions == client.V1Preconditions(uid=observed["metadata"]["uid"])
    assert w.expected.deleted == {"chat-0-0"}

    w, fake = writer()
    replaced = pod_named("chat-0-0", owner_uid="someone-else")  # recreated under that name by someone else
    fake.put({**replaced, "metadata": {**replaced["metadata"], "uid": "their-pod"}})
    w.delete_pod("team-a", "chat-0-0", observed["metadata"]["uid"])
    assert ("Pod", "chat-0-0") in fake.objects
    assert w.expected.deleted == set()
    w.delete_pod("team-a", "gone", "uid-x")  # deleted meanwhile: nothing to do
    assert w.expected.deleted == {"gone"}


def test_a_pod_name_held_by_another_owner_is_a_collision_not_a_create() -> None:
    """Issue 37: a 409 on create is read back: a pod the pod's own CR controls (an interrupted pass made it) is
    fine; a pod another owner holds is a name collision, never taken for the CR's."""
    w, fake = writer()
    assert w.create_pod(pod_named("chat-0-0")) is Outcome.CREATED
    assert w.create_pod(pod_named("chat-0-0")) is Outcome.UNCHANGED  # ours already
    assert w.expected.created == {"chat-0-0"}

    w, fake = writer()
    theirs = fake.put(pod_named("chat-1-0", owner_uid="someone-else"))
    snapshot = json.dumps(theirs, sort_keys=True)
    assert w.create_pod(pod_named("chat-1-0")) is Outcome.COLLISION
    unowned = fake.put({**pod_named("chat-2-0"), "metadata": {"name": "chat-2-0", "namespace": "team-a"}})
    assert w.create_pod(pod_named("chat-2-0")) is Outcome.COLLISION  # no owner at all: not ours either
    assert json.dumps(fake.objects[("Pod", "chat-1-0")], sort_keys=True) == snapshot
    assert fake.objects[("Pod", "chat-2-0")] == unowned
    assert w.expected.created == set()  # nothing of ours to wait for
    assert [c.verb for c in fake.writes("Pod")] == ["create", "create"]  # read back, never written
