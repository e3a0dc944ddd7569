"""The pass's pure steps (`controller/steps.py`): which workers the routers should list."""

from sglang_operator.api.groups import worker_groups
from sglang_operator.api.spec import SGLangDeploymentSpec
from sglang_operator.controller.fleet import GroupPass
from sglang_operator.controller.loads import Loads
from sglang_operator.controller.routers import RouterState
from sglang_operator.controller.steps import Seen, decide
from sglang_operator.observed import PodView, ReplicaView
from sglang_operator.router.client import RouterWorker
from sglang_operator.router.membership import DesiredWorker, plan_membership

SPEC = SGLangDeploymentSpec.model_validate({"model": {"path": "org/model"}, "replicas": 3})
READY, STARTING, UNREADY = "http://10.0.0.1:30000", "http://10.0.0.2:30000", "http://10.0.0.3:30000"
ROUTER = "http://10.9.0.1:30000"


def replica(index: int, url: str, ready: bool) -> ReplicaView:
    ip, port = url.removeprefix("http://").split(":")
    pod = PodView(name=f"chat-{index}-0", rank=0, phase="Running", ready=ready, ip=ip, port=int(port),
                  deleting=False, restarts=0, replica_nodes=1, draining_since=None, warm=False)  # fmt: skip
    return ReplicaView(index=index, revision="r", pods={0: pod})


def test_a_worker_is_routed_only_while_its_pod_is_ready() -> None:
    """A pod has its address before it is Ready (the server still loads the model): it is not registered yet; one
    that stops being Ready (its process died and restarts in place, same address) is taken off the router."""
    [group] = worker_groups(SPEC)
    replicas = [replica(0, READY, True), replica(1, STARTING, False), replica(2, UNREADY, False)]
    listed = [RouterWorker("a", READY, "ready", True), RouterWorker("c", UNREADY, "ready", True)]
    seen = Seen(groups=[GroupPass(group, "r", 3, 0, replicas)], loads={"": Loads()},
                routers=RouterState(lists={ROUTER: listed}), verdicts=[])  # fmt: skip
    decided = decide(SPEC, seen, now=0.0)
    assert decided.routed == [DesiredWorker(READY)]
    plan = plan_membership(decided.routed, listed)
    assert plan.add == () and [w.url for w in plan.remove] == [UNREADY]
