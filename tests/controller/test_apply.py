"""The executor against an in-memory API: unchanged children are not written, objects the CR does not own are
never patched or deleted, and every call carries a deadline."""

from typing import Any

import pytest
from kubernetes import client

from sglang_operator.api.spec import SGLangDeploymentSpec
from sglang_operator.controller.apply import ChildRef, Outcome, Writer, possible_children, stale_children
from sglang_operator.render import Owner, shared_children
from sglang_operator.settings import OperatorSettings

from .fakekube import FakeKube, wire

OWNER = Owner(name="chat", namespace="team-a", uid="cr-uid")


def everything_on() -> SGLangDeploymentSpec:
    return SGLangDeploymentSpec.model_validate({
        "model": {"path": "org/model"}, "parallelism": {"nnodes": 2},
        "router": {"enabled": True}, "monitoring": {"podMonitor": True}, "networkPolicy": {"enabled": True},
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
    """`possible_children` is what stale-child deletion looks at: a child it misses would never be cleaned up."""
    rendered = {ChildRef.of(c) for c in shared_children(everything_on(), OWNER, OperatorSettings())}
    assert rendered == set(possible_children(OWNER.name))


def test_create_then_unchanged_then_patched_on_change() -> None:
    w, fake = writer()
    desired = router_service()
    assert w.ensure(desired, None, OWNER.uid) is Outcome.CREATED
    stored = fake.objects[("Service", "chat-router")]
    assert w.ensure(desired, stored, OWNER.uid) is Outcome.UNCHANGED
    assert [c.verb for c in fake.writes()] == ["create"]  # nothing written for an unchanged child
    changed = {**desired, "spec": {**desired["spec"], "ports": []}}
    assert w.ensure(changed, stored, OWNER.uid) is Outcome.PATCHED
    assert [c.verb for c in fake.writes()] == ["create", "patch"]


def test_an_object_the_cr_does_not_own_is_never_patched() -> None:
    w, fake = writer()
    desired = router_service()
    theirs = fake.put(foreign(desired))
    assert w.ensure(desired, theirs, OWNER.uid) is Outcome.COLLISION
    assert fake.writes() == []
    assert fake.objects[("Service", "chat-router")]["metadata"]["ownerReferences"][0]["uid"] == "someone-else"


def test_a_create_that_finds_a_foreign_object_reports_a_collision() -> None:
    """The object appeared after the read (or the read missed it): 409, read again, and still not ours."""
    w, fake = writer()
    desired = router_service()
    fake.put(foreign(desired))
    assert w.ensure(desired, None, OWNER.uid) is Outcome.COLLISION
    assert [c.verb for c in fake.writes()] == ["create"]  # the refused create; no patch


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


@pytest.mark.parametrize("kind", ["Service", "Deployment", "PodMonitor", "NetworkPolicy"])
def test_every_child_kind_is_written_with_a_deadline(kind: str) -> None:
    w, fake = writer()  # the fake fails any call without _request_timeout
    child = next(c for c in shared_children(everything_on(), OWNER) if c["kind"] == kind)
    assert w.ensure(child, None, OWNER.uid) is Outcome.CREATED
    assert w.read(ChildRef.of(child), "team-a") is not None
    w.delete_child(ChildRef.of(child), "team-a", fake.objects[(kind, child["metadata"]["name"])])
    assert w.read(ChildRef.of(child), "team-a") is None
