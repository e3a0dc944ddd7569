"""One read path: the snapshot a one-off pass reads from the API is the one the loop takes from its watch caches,
built by the same function, for the same objects."""

from typing import Any

from kubernetes import client

from sglang_operator.controller.reconcile import Reconciler
from sglang_operator.runtime.readback import read_snapshot
from sglang_operator.runtime.state import take_snapshot, trim_child
from sglang_operator.runtime.writer import Writer, possible_children
from sglang_operator.settings import OperatorSettings
from tests.support.controller.fakekube import FakeKube, wire

NS, NAME, UID = "team-a", "chat", "cr-uid"
CHILD_KINDS = ("Service", "Deployment", "NetworkPolicy", "PodMonitor", "InferencePool")


def fleet() -> FakeKube:
    """A CR after its first passes: its children and pods as the operator wrote them, a scale target naming it, and
    objects of other fleets that neither path may pick up."""
    fake = FakeKube()
    fake.put({"apiVersion": "sglang.ai/v1alpha1", "kind": "SGLangDeployment",
              "metadata": {"name": NAME, "namespace": NS, "uid": UID, "generation": 1},
              "spec": {"model": {"path": "org/model"}, "replicas": 2, "monitoring": {"podMonitor": True},
                       "networkPolicy": {"enabled": True}}})  # fmt: skip
    reconciler = Reconciler(client.ApiClient(), OperatorSettings())
    wire(reconciler, fake)
    reconciler.reconcile(NS, NAME)
    fake.put({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "other-0", "namespace": NS,
              "labels": {"sglang.ai/deployment": "other"}}})  # fmt: skip
    fake.put({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "other-router", "namespace": NS}})
    for target, deployment in (("chat-small", NAME), ("other-small", "other")):
        fake.put(
            {
                "apiVersion": "sglang.ai/v1alpha1",
                "kind": "SGLangWorkerGroup",
                "metadata": {"name": target, "namespace": NS},
                "spec": {"deployment": deployment, "group": "a"},
            }
        )
    return fake


def indexed(fake: FakeKube) -> dict[str, Any]:
    """The fake's objects as kopf's indexes hold them (`runtime/watches.py`)."""
    labelled = [o for (k, _), o in fake.objects.items() if k == "Pod"]
    pods: dict[Any, list[dict[str, Any]]] = {}
    for pod in labelled:
        pods.setdefault((NS, pod["metadata"]["labels"]["sglang.ai/deployment"]), []).append(pod)
    children = {(NS, k, n): [trim_child(o)] for (k, n), o in fake.objects.items() if k in CHILD_KINDS}
    targets: dict[Any, list[dict[str, Any]]] = {}
    for (kind, _), obj in fake.objects.items():
        if kind == "SGLangWorkerGroup":
            targets.setdefault((NS, obj["spec"]["deployment"]), []).append(obj)
    return {"pods": pods, "children": children, "scale_targets": targets}


def test_the_snapshot_read_from_the_api_is_the_one_the_watches_give() -> None:
    fake = fleet()
    writer = Writer(client.ApiClient())
    wire(writer, fake)
    from_api = read_snapshot(writer, NS, NAME)
    index = indexed(fake)
    names = [(ref.kind, ref.name) for ref in possible_children(NAME)]
    from_watch = take_snapshot(fake.objects[("SGLangDeployment", NAME)], index["pods"], index["children"], names,
                               index["scale_targets"])  # fmt: skip
    assert from_api == from_watch
    assert from_api is not None and {k for k, _ in (from_api.children or {})} >= {"Service", "Deployment"}
    assert len(from_api.pods or []) == 2 and [t["metadata"]["name"] for t in from_api.scale_targets or []] == [
        "chat-small"
    ]


def test_a_cr_that_is_gone_has_no_snapshot() -> None:
    writer = Writer(client.ApiClient())
    wire(writer, FakeKube())
    assert read_snapshot(writer, NS, NAME) is None
