"""Pod phase, conditions and container statuses as the kubelet reports them."""

from __future__ import annotations

from typing import Any

import pytest

from localcluster.nodeagent.container import Container
from localcluster.nodeagent.status import ContainerView, container_status, pod_phase, pod_status, rfc3339

T0 = 1_800_000_000.0


def view(name: str = "c", state: str = "running", **kw: Any) -> ContainerView:
    return ContainerView(name=name, image="lmsysorg/sglang:1", state=state, container_id="nodeagent://x", **kw)


def pod(**status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u", "generation": 1},
        "spec": {"restartPolicy": "Always", "containers": [{"name": "c"}]},
        "status": status,
    }


@pytest.mark.parametrize(
    ("policy", "views", "phase"),
    [
        ("Always", [view(state="waiting", reason="ContainerCreating")], "Pending"),
        ("Always", [view(), view("d", state="waiting", reason="ImageNotRunnableLocally")], "Pending"),
        ("Always", [view()], "Running"),
        ("Always", [view(state="terminated", exit_code=0)], "Running"),
        ("Always", [view(state="waiting", reason="CrashLoopBackOff", last_terminated={"exitCode": 1})], "Running"),
        ("OnFailure", [view(state="terminated", exit_code=0)], "Succeeded"),
        ("OnFailure", [view(state="terminated", exit_code=2)], "Running"),
        ("Never", [view(state="terminated", exit_code=2), view("d", state="terminated", exit_code=0)], "Failed"),
        ("Never", [view(state="terminated", exit_code=0)], "Succeeded"),
    ],
)
def test_phase(policy: str, views: list[ContainerView], phase: str) -> None:
    assert pod_phase(policy, [], views, "") == phase


def test_init_containers_gate_the_phase() -> None:
    running_init = [view("init", state="running")]
    assert pod_phase("Always", running_init, [view(state="waiting")], "") == "Pending"
    failed_init = [view("init", state="terminated", exit_code=1)]
    assert pod_phase("Never", failed_init, [view(state="waiting")], "") == "Failed"
    assert pod_phase("Always", failed_init, [view(state="waiting")], "") == "Pending"


def test_terminal_phase_sticks() -> None:
    assert pod_phase("Always", [], [view()], "Succeeded") == "Succeeded"


def test_container_status_shapes() -> None:
    running = container_status(view(started_at=T0, ready=True, started=True, restart_count=2))
    assert running["state"] == {"running": {"startedAt": rfc3339(T0)}}
    assert running["ready"] and running["started"] and running["restartCount"] == 2
    assert running["imageID"].startswith("lmsysorg/sglang@sha256:")
    waiting = container_status(
        ContainerView(name="c", image="busybox", state="waiting", reason="ImageNotRunnableLocally", message="m")
    )
    assert waiting["state"] == {"waiting": {"reason": "ImageNotRunnableLocally", "message": "m"}}
    assert waiting["imageID"] == "" and "containerID" not in waiting and not waiting["ready"]
    done = container_status(view(state="terminated", exit_code=137, started_at=T0, finished_at=T0 + 5, signal=9))
    assert done["state"]["terminated"]["reason"] == "Error"
    assert done["state"]["terminated"]["exitCode"] == 137


def conditions(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in status["conditions"]}


def test_ready_pod_status_and_transition_times() -> None:
    scheduled = {"type": "PodScheduled", "status": "True", "lastTransitionTime": rfc3339(T0 - 10)}
    p = pod(conditions=[scheduled])
    args: dict[str, Any] = {
        "sandbox_ready": True,
        "init_views": [],
        "pod_ip": "127.1.0.3",
        "host_ip": "127.0.0.1",
        "start_time": T0,
    }
    first = pod_status(p, views=[view(started_at=T0)], now=T0 + 1, **args)
    assert first["phase"] == "Running"
    assert first["podIP"] == "127.1.0.3" and first["podIPs"] == [{"ip": "127.1.0.3"}]
    c = conditions(first)
    assert c["PodScheduled"] == scheduled
    assert c["Ready"]["status"] == "False" and c["Ready"]["reason"] == "ContainersNotReady"
    assert c["ContainersReady"]["message"] == "containers with unready status: [c]"
    assert c["Initialized"]["status"] == "True" and c["PodReadyToStartContainers"]["status"] == "True"
    second = pod_status(p, views=[view(started_at=T0, ready=True, started=True)], now=T0 + 9, reported=first, **args)
    c2 = conditions(second)
    assert c2["Ready"]["status"] == "True" and c2["Ready"]["lastTransitionTime"] == rfc3339(T0 + 9)
    assert c2["Initialized"]["lastTransitionTime"] == rfc3339(T0 + 1)  # unchanged status keeps its time
    assert c2["Ready"]["observedGeneration"] == 1


def test_readiness_gates_hold_ready() -> None:
    p = pod()
    p["spec"]["readinessGates"] = [{"conditionType": "example.com/registered"}]
    status = pod_status(
        p,
        sandbox_ready=True,
        init_views=[],
        views=[view(ready=True, started=True)],
        pod_ip="127.1.0.3",
        host_ip="127.0.0.1",
        start_time=T0,
        now=T0,
    )
    ready = conditions(status)["Ready"]
    assert ready["status"] == "False" and ready["reason"] == "ReadinessGatesNotReady"
    assert conditions(status)["ContainersReady"]["status"] == "True"


def test_restore_after_agent_restart() -> None:
    crashed = Container({"name": "c", "image": "i"})
    crashed.restore(
        {
            "restartCount": 3,
            "state": {"waiting": {"reason": "CrashLoopBackOff"}},
            "lastState": {"terminated": {"exitCode": 1, "reason": "Error", "finishedAt": rfc3339(T0)}},
        },
        T0 + 5,
        10.0,
    )
    assert (crashed.state, crashed.exit_code, crashed.restart_count, crashed.ever_ran) == ("terminated", 1, 3, True)
    assert crashed.finished_at == T0
    lost = Container({"name": "c", "image": "i"})
    lost.restore({"restartCount": 1, "state": {"running": {"startedAt": rfc3339(T0)}}}, T0 + 5, 10.0)
    assert lost.state == "terminated" and lost.reason == "ContainerStatusUnknown" and lost.exit_code == 137
    assert lost.next_start == T0 + 5  # restarts at once
    fresh = Container({"name": "c", "image": "i"})
    fresh.restore({}, T0, 10.0)
    assert fresh.state == "waiting" and not fresh.ever_ran
