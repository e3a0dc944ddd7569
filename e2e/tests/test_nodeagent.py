"""The GPU node agent against the real control plane: nodes, scheduling, pods as processes, probes, faults.

Every test runs in its own namespace (`namespace` fixture) and waits for conditions with explicit timeouts.
"""

from __future__ import annotations

import ipaddress
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from localcluster.cluster import ClusterInfo
from localcluster.nodeagent import faults
from localcluster.nodeagent.layout import Layout
from localcluster.nodeagent.process import alive, load_record
from localcluster.nodeagent.testing import (
    MODEL,
    SIM_PORT,
    container_state,
    is_ready,
    pod_manifest,
    read_pod,
    sim_container,
    state_dir,
    wait_for,
    wait_pod,
    wait_ready,
)

READY_S = 60.0
GONE_S = 60.0
LOOPBACK = ipaddress.ip_network("127.0.0.0/8")


@pytest.fixture(scope="module")
def agent_dir(cluster: ClusterInfo) -> Path:
    if not cluster.agent:
        pytest.skip("the local cluster runs without the node agent")
    return state_dir(cluster.state_dir)


@pytest.fixture(scope="module")
def apps(api_client: client.ApiClient) -> client.AppsV1Api:
    return client.AppsV1Api(api_client)


def http_get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def live_pids(agent: Path, uid: str) -> list[int]:
    layout = Layout(agent)
    records = [load_record(p) for p in layout.pod(uid).glob("containers/*/pid.json")]
    return [r.pid for r in records if r is not None and alive(r)]


def pid_gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")


def events_for(core: client.CoreV1Api, namespace: str, name: str) -> list[client.CoreV1Event]:
    return list(core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}").items)


# ----- nodes ---------------------------------------------------------------------------------------------------


def test_gpu_nodes_are_registered_ready_and_heartbeating(
    core: client.CoreV1Api, cluster: ClusterInfo, agent_dir: Path
) -> None:
    nodes = [n for n in core.list_node(label_selector="localcluster.sglang.ai/node-agent=true").items]
    assert len(nodes) >= 1
    version = client.VersionApi(core.api_client).get_code().git_version
    coordination = client.CoordinationV1Api(core.api_client)
    for node in nodes:
        labels = node.metadata.labels
        assert labels["nvidia.com/gpu.product"] == "NVIDIA-H200"
        assert labels["kubernetes.io/hostname"] == node.metadata.name
        assert node.status.allocatable["nvidia.com/gpu"] == labels["nvidia.com/gpu.count"]
        assert node.status.node_info.kubelet_version == version
        assert is_ready(node)  # type: ignore[arg-type]
        assert node.status.addresses[0].address == "127.0.0.1"
        lease = coordination.read_namespaced_lease(node.metadata.name, "kube-node-lease")
        renewed = lease.spec.renew_time.timestamp()
        assert time.time() - renewed < 30, f"lease of {node.metadata.name} renewed {time.time() - renewed:.0f}s ago"


# ----- scheduling and running ----------------------------------------------------------------------------------


def test_deployment_pods_run_on_gpu_nodes_and_are_garbage_collected(
    core: client.CoreV1Api, apps: client.AppsV1Api, namespace: str, agent_dir: Path
) -> None:
    labels = {"app": "sim"}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "sim"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [sim_container()], "terminationGracePeriodSeconds": 5},
            },
        },
    }
    apps.create_namespaced_deployment(namespace, deployment)

    def ready_pods() -> list[client.V1Pod] | None:
        pods = core.list_namespaced_pod(namespace, label_selector="app=sim").items
        return pods if len(pods) == 2 and all(is_ready(p) for p in pods) else None

    pods = wait_for(ready_pods, READY_S, "2 Ready simulator pods of the Deployment")
    ips = {p.status.pod_ip for p in pods}
    assert len(ips) == 2
    for pod in pods:
        assert ipaddress.ip_address(pod.status.pod_ip) in LOOPBACK
        assert pod.spec.node_name.startswith("gpu-node-")
        assert pod.status.phase == "Running"
        assert pod.status.host_ip == "127.0.0.1"
        status = container_state(pod)
        assert status.ready and status.started and status.state.running is not None
        code, body = http_get(f"http://{pod.status.pod_ip}:{SIM_PORT}/v1/models")
        assert code == 200 and json.loads(body)["data"][0]["id"] == MODEL
    pids = {p.metadata.uid: live_pids(agent_dir, p.metadata.uid) for p in pods}
    assert all(pids.values()), pids

    apps.delete_namespaced_deployment("sim", namespace, propagation_policy="Background")
    wait_for(
        lambda: not core.list_namespaced_pod(namespace, label_selector="app=sim").items,
        GONE_S,
        "the Deployment's pods to be garbage-collected",
    )
    for uid, uid_pids in pids.items():
        wait_for(lambda uid_pids=uid_pids: all(pid_gone(p) for p in uid_pids), 10, f"processes of pod {uid} to exit")
        assert not Layout(agent_dir).pod(uid).exists()


def test_killed_simulator_is_restarted(core: client.CoreV1Api, namespace: str, agent_dir: Path) -> None:
    core.create_namespaced_pod(namespace, pod_manifest("victim", [sim_container()]))
    before = wait_ready(core, namespace, "victim", READY_S)
    killed = faults.kill_pod(agent_dir, namespace, "victim")
    assert killed

    def restarted(pod: client.V1Pod) -> bool:
        status = container_state(pod)
        return bool(status and status.restart_count >= 1 and is_ready(pod))

    after = wait_pod(core, namespace, "victim", restarted, READY_S, "restartCount >= 1 and Ready again")
    status = container_state(after)
    assert status.last_state.terminated.exit_code == 137
    assert status.container_id != container_state(before).container_id
    assert after.status.pod_ip == before.status.pod_ip
    assert all(pid_gone(pid) for pid in killed)
    # `kubectl logs [--previous]` reaches the agent's log endpoint through the apiserver.
    assert "fired up" in core.read_namespaced_pod_log("victim", namespace, previous=True)
    assert "fired up" in core.read_namespaced_pod_log("victim", namespace)


def test_liveness_failure_restarts_the_container(core: client.CoreV1Api, namespace: str, agent_dir: Path) -> None:
    container = sim_container()
    container["livenessProbe"] = {
        "httpGet": {"path": "/no-such-path", "port": SIM_PORT},
        "initialDelaySeconds": 2,
        "periodSeconds": 1,
        "failureThreshold": 2,
    }
    core.create_namespaced_pod(namespace, pod_manifest("unhealthy", [container]))
    wait_pod(
        core,
        namespace,
        "unhealthy",
        lambda p: bool(container_state(p) and container_state(p).restart_count >= 1),
        READY_S,
        "a restart after failed liveness probes",
    )
    reasons = {e.reason for e in events_for(core, namespace, "unhealthy")}
    assert {"Unhealthy", "Killing"} <= reasons


def test_crashing_server_goes_into_crash_loop_back_off(core: client.CoreV1Api, namespace: str, agent_dir: Path) -> None:
    container = sim_container(env={"SGLANG_SIM_FAIL_STARTUP": "oom"})
    core.create_namespaced_pod(namespace, pod_manifest("crasher", [container]))

    def backing_off(pod: client.V1Pod) -> bool:
        status = container_state(pod)
        waiting = status.state.waiting if status and status.state else None
        return bool(waiting and waiting.reason == "CrashLoopBackOff" and status.last_state.terminated)

    pod = wait_pod(core, namespace, "crasher", backing_off, READY_S, "CrashLoopBackOff")
    status = container_state(pod)
    assert status.last_state.terminated.exit_code != 0
    assert "back-off" in status.state.waiting.message
    assert pod.status.phase == "Running"  # restartPolicy Always: the pod keeps running while restarting


def test_never_restarting_pod_fails(core: client.CoreV1Api, namespace: str, agent_dir: Path) -> None:
    container = sim_container(env={"SGLANG_SIM_FAIL_STARTUP": "nccl"})
    core.create_namespaced_pod(namespace, pod_manifest("once", [container], restartPolicy="Never"))
    pod = wait_pod(core, namespace, "once", lambda p: p.status.phase == "Failed", READY_S, "phase Failed")
    status = container_state(pod)
    assert status.restart_count == 0
    assert status.state.terminated.exit_code != 0 and status.state.terminated.reason == "Error"


# ----- pods that cannot run ------------------------------------------------------------------------------------


def test_pod_asking_for_16_gpus_stays_pending(core: client.CoreV1Api, namespace: str, agent_dir: Path) -> None:
    core.create_namespaced_pod(namespace, pod_manifest("too-big", [sim_container(gpus=16)]))

    def failed_scheduling() -> list[client.CoreV1Event]:
        return [e for e in events_for(core, namespace, "too-big") if e.reason == "FailedScheduling"]

    events = wait_for(failed_scheduling, READY_S, "a FailedScheduling event")
    assert "nvidia.com/gpu" in events[0].message
    pod = read_pod(core, namespace, "too-big")
    assert pod is not None and pod.status.phase == "Pending" and not pod.spec.node_name


def test_unknown_image_waits_with_a_clear_reason(core: client.CoreV1Api, namespace: str, agent_dir: Path) -> None:
    container = {"name": "shell", "image": "busybox:1.36", "command": ["sleep", "3600"]}
    core.create_namespaced_pod(namespace, pod_manifest("busybox", [container]))

    def waiting(pod: client.V1Pod) -> bool:
        status = container_state(pod)
        return bool(status and status.state.waiting and status.state.waiting.reason == "ImageNotRunnableLocally")

    pod = wait_pod(core, namespace, "busybox", waiting, READY_S, "waiting reason ImageNotRunnableLocally")
    assert "busybox:1.36" in container_state(pod).state.waiting.message
    assert pod.status.phase == "Pending"
    assert pod.status.pod_ip  # the sandbox exists; only the container cannot start


# ----- what a pod's process sees -------------------------------------------------------------------------------

CHECK_SCRIPT = """
import json, os, ssl, sys, urllib.request
sa = "/var/run/secrets/kubernetes.io/serviceaccount"
token = open(f"{sa}/token").read()
assert open(f"{sa}/namespace").read() == os.environ["NS"], "namespace file"
assert open("/etc/sim-secret/api-key").read() == os.environ["API_KEY"] == "s3cret", "secret volume and env"
assert os.environ["GREETING"] == "hello from " + os.environ["POD_NAME"], "configMap env and $(VAR) expansion"
assert os.environ["NODE"].startswith("gpu-node-"), "spec.nodeName"
hosts = open("/etc/hosts").read()
assert f"{os.environ['POD_IP']}\\t" in hosts and os.environ["POD_NAME"] in hosts, "/etc/hosts names the pod"
open("/dev/shm/only-in-this-pod", "w").write(os.environ["POD_NAME"])
url = "https://{}:{}/apis/authentication.k8s.io/v1/selfsubjectreviews".format(
    os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"])
body = json.dumps({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}).encode()
request = urllib.request.Request(url, data=body, headers={"Authorization": "Bearer " + token,
                                                          "Content-Type": "application/json"})
context = ssl.create_default_context(cafile=f"{sa}/ca.crt")
user = json.load(urllib.request.urlopen(request, context=context, timeout=5))["status"]["userInfo"]["username"]
assert user == os.environ["EXPECT_USER"], user
"""


def checked_pod(name: str, account: str) -> dict[str, Any]:
    container = sim_container(gpus=0)
    container["env"] += [
        {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "API_KEY", "valueFrom": {"secretKeyRef": {"name": "sim-secret", "key": "api-key"}}},
        {"name": "GREETING", "value": "$(HELLO) from $(POD_NAME)"},
        {"name": "EXPECT_USER", "value": f"system:serviceaccount:$(NS):{account}"},
    ]
    container["envFrom"] = [{"configMapRef": {"name": "check"}}]
    container["volumeMounts"] = [
        {"name": "check", "mountPath": "/opt/check"},
        {"name": "secret", "mountPath": "/etc/sim-secret", "readOnly": True},
        {"name": "shm", "mountPath": "/dev/shm"},
    ]
    container["readinessProbe"] = {
        "exec": {"command": ["python3", "/opt/check/check.py"]},
        "periodSeconds": 2,
        "timeoutSeconds": 10,
    }
    return pod_manifest(
        name,
        [container],
        serviceAccountName=account,
        volumes=[
            {"name": "check", "configMap": {"name": "check"}},
            {"name": "secret", "secret": {"secretName": "sim-secret"}},
            {"name": "shm", "emptyDir": {"medium": "Memory"}},
        ],
    )


def test_processes_see_their_own_token_env_and_volumes(core: client.CoreV1Api, namespace: str, agent_dir: Path) -> None:
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "reader"}})
    core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "check"}, "data": {"check.py": CHECK_SCRIPT, "HELLO": "hello"}}
    )
    core.create_namespaced_secret(namespace, {"metadata": {"name": "sim-secret"}, "stringData": {"api-key": "s3cret"}})
    core.create_namespaced_pod(namespace, checked_pod("as-default", "default"))
    core.create_namespaced_pod(namespace, checked_pod("as-reader", "reader"))
    for name in ("as-default", "as-reader"):
        try:
            wait_ready(core, namespace, name, READY_S)
        except TimeoutError:
            unhealthy = [e.message for e in events_for(core, namespace, name) if e.reason == "Unhealthy"]
            raise AssertionError(f"{name} never passed its in-pod checks: {unhealthy[-3:]}") from None
    assert not Path("/dev/shm/only-in-this-pod").exists()  # each pod's /dev/shm is its own


# ----- faults --------------------------------------------------------------------------------------------------


def test_node_not_ready_fault_and_recovery(core: client.CoreV1Api, agent_dir: Path) -> None:
    node = core.list_node(label_selector="localcluster.sglang.ai/node-agent=true").items[-1].metadata.name

    def ready_status() -> str:
        conditions = core.read_node(node).status.conditions or []
        return next(c.status for c in conditions if c.type == "Ready")

    faults.node_not_ready(agent_dir, node)
    try:
        wait_for(lambda: ready_status() != "True", 15, f"{node} to report Ready=False")
    finally:
        faults.node_ready(agent_dir, node)
    wait_for(lambda: ready_status() == "True", 15, f"{node} to be Ready again")


def test_partitioned_node_keeps_its_pods_until_it_reconnects(
    core: client.CoreV1Api, namespace: str, agent_dir: Path
) -> None:
    node = core.list_node(label_selector="localcluster.sglang.ai/node-agent=true").items[-1].metadata.name
    manifest = pod_manifest("islander", [sim_container()], nodeSelector={"kubernetes.io/hostname": node})
    core.create_namespaced_pod(namespace, manifest)
    pod = wait_ready(core, namespace, "islander", READY_S)
    pids = live_pids(agent_dir, pod.metadata.uid)
    faults.node_not_ready(agent_dir, node)
    try:
        wait_for(lambda: not is_ready(core.read_node(node)), 15, f"{node} to report Ready=False")  # type: ignore[arg-type]
        core.delete_namespaced_pod("islander", namespace)
        # A partitioned kubelet never hears of the deletion: the pod stays Terminating, its process runs on.
        terminating = wait_pod(
            core, namespace, "islander", lambda p: p.metadata.deletion_timestamp is not None, 10, "Terminating"
        )
        assert terminating.status.phase == "Running"
        assert live_pids(agent_dir, pod.metadata.uid) == pids
        code, _ = http_get(f"http://{pod.status.pod_ip}:{SIM_PORT}/v1/models")
        assert code == 200
    finally:
        faults.node_ready(agent_dir, node)
    wait_for(lambda: read_pod(core, namespace, "islander") is None, GONE_S, "the deletion to finish after reconnecting")
    wait_for(lambda: all(pid_gone(pid) for pid in pids), 10, "the process to be stopped")


def test_paused_pod_turns_unready_and_recovers(core: client.CoreV1Api, namespace: str, agent_dir: Path) -> None:
    container = sim_container()
    container["readinessProbe"] = {
        "httpGet": {"path": "/v1/models", "port": SIM_PORT},
        "periodSeconds": 1,
        "timeoutSeconds": 2,
        "failureThreshold": 2,
    }
    core.create_namespaced_pod(namespace, pod_manifest("sleepy", [container]))
    wait_ready(core, namespace, "sleepy", READY_S)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "localcluster.nodeagent.faults",
            f"--state-dir={agent_dir}",
            "pause-pod",
            f"{namespace}/sleepy",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "signalled pids" in result.stdout
    try:
        wait_pod(core, namespace, "sleepy", lambda p: not is_ready(p), 30, "NotReady while SIGSTOPped")
    finally:
        faults.resume_pod(agent_dir, namespace, "sleepy")
    pod = wait_ready(core, namespace, "sleepy", 30)
    assert container_state(pod).restart_count == 0  # readiness failures never restart


# ----- agent restarts ------------------------------------------------------------------------------------------


class SpareAgent:
    """A second agent with one node of its own, which a test may crash and restart."""

    def __init__(self, kubeconfig: Path, state: Path, prefix: str, log: Path) -> None:
        self.state = state
        self.node = f"{prefix}-0"
        self.argv = [
            sys.executable,
            "-m",
            "localcluster.nodeagent",
            f"--kubeconfig={kubeconfig}",
            f"--state-dir={state}",
            "--nodes=1",
            f"--node-prefix={prefix}",
        ]
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def crash(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=30)


def lease_renewed_after(core: client.CoreV1Api, node: str, since: float) -> bool:
    try:
        lease = client.CoordinationV1Api(core.api_client).read_namespaced_lease(node, "kube-node-lease")
    except client.exceptions.ApiException:
        return False
    return bool(lease.spec.renew_time and lease.spec.renew_time.timestamp() > since)


@pytest.fixture
def spare_agent(cluster: ClusterInfo, tmp_path: Path, core: client.CoreV1Api) -> Iterator[SpareAgent]:
    agent = SpareAgent(cluster.kubeconfig, tmp_path / "agent", f"spare-{os.getpid()}", tmp_path / "agent.log")
    began = time.time()
    agent.start()
    try:
        wait_for(lambda: lease_renewed_after(core, agent.node, began - 1), 60, f"node {agent.node} to heartbeat")
        yield agent
    finally:
        agent.stop()
        core.delete_node(agent.node)


def test_agent_crash_keeps_pods_running_and_adopts_them(
    core: client.CoreV1Api, namespace: str, spare_agent: SpareAgent
) -> None:
    manifest = pod_manifest("survivor", [sim_container()], nodeSelector={"kubernetes.io/hostname": spare_agent.node})
    core.create_namespaced_pod(namespace, manifest)
    pod = wait_ready(core, namespace, "survivor", READY_S)
    pids = live_pids(spare_agent.state, pod.metadata.uid)
    assert pids

    spare_agent.crash()  # SIGKILL: the agent cleans nothing up
    assert not any(pid_gone(pid) for pid in pids)
    restarted = time.time()
    spare_agent.start()
    wait_for(lambda: lease_renewed_after(core, spare_agent.node, restarted), 60, "the new agent's first heartbeat")

    # The new agent adopts the running process: same pid, no restart, still serving.
    code, _ = http_get(f"http://{pod.status.pod_ip}:{SIM_PORT}/v1/models")
    assert code == 200
    assert live_pids(spare_agent.state, pod.metadata.uid) == pids
    after = read_pod(core, namespace, "survivor")
    assert after is not None and is_ready(after) and container_state(after).restart_count == 0

    # Only the new agent can finish the deletion, and it stops exactly the adopted process.
    core.delete_namespaced_pod("survivor", namespace)
    wait_for(lambda: read_pod(core, namespace, "survivor") is None, GONE_S, "the pod to be deleted by the new agent")
    wait_for(lambda: all(pid_gone(pid) for pid in pids), 10, "the adopted process to be stopped")
