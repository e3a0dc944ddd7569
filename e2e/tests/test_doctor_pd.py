"""The fleet doctor's prefill/decode findings on the local cluster (issue 31): examples/pd-small.yaml behind the real
smg 1.13.0 in PD mode, read back from the real Prometheus, routers and pods, each finding asserted on its pod with its
action and then cleared. One fleet, one test (the `namespace` and `operator` fixtures are per test), its steps
overlapped where the findings are independent; interval, window and hysteresis compressed to seconds.

The fleet runs two prefill replicas; replica 1's bootstrap server is never started (`SGLANG_SIM_BOOTSTRAP_DOWN`,
matched against `SGLANG_SIM_REPLICA` from the downward API like the DP doctor test's knobs: its bootstrap port
refuses connections, everything else behaves as SGLang does).

- `BootstrapUnreachable` on that prefill's pod, with "delete pod ..." as its action; `sglang-operator doctor` reports
  it too. The operator registers a prefill only once its bootstrap server answers, so no router lists it, and smg,
  which probes a bootstrap port only when a prefill is registered, never probes it: the operator's own
  registrations never produce `RendezvousFailures` (smg's counter stays absent). Registered by hand on the router
  pod (as smg's own service discovery or an admin would, past the operator's gate), smg's probe is refused and
  counted (`{leg="prefill", phase="probe"}`): `RendezvousFailures` on that router pod with the probe phase's action,
  and `BootstrapUnreachable` names the router pod that lists it (the operator keeps routing a prefill a router
  lists). The prefill group scaled 2 -> 1 takes the replica away and `BootstrapUnreachable` clears;
  `RendezvousFailures` clears once the refused probe has left the window.
- `RoleSkew`: of the four attributes compared, only the SGLang version can differ between pods a router lists
  together. The operator renders the page size, KV dtype and transfer backend of both roles from one
  `spec.disaggregation`, a pod's command cannot be edited, and a change of any of them (or of the image) cuts the
  fleet over between KV epochs whose routers never list another epoch's pods: flag skew stays with the unit tests
  (tests/unit/doctor/test_pd_findings.py). A pod's image can be edited (`kubectl set image pod/...`): one decode pod set
  to SGLang 0.5.22 restarts as that release and is listed again beside the 0.5.23 prefills. Reported with that pod
  as the one to delete; cleared once it is deleted and the operator re-creates it from the spec.
- `RoleUnavailable`: the prefill group scaled to 0 leaves both decodes without a prefill (smg answers 503), reported
  with "the spec asks for 0" and its action; cleared once a prefill is back (scaled to 1) and no finding is left.

Not shown: `HandoffStuck` (a decode's prealloc queue growing while every prefill idles). A prefill that receives a
request holds it in its bootstrap queue until the decode's metadata arrives, and a decode keeps a request in its
prealloc queue only while it cannot reach that prefill's bootstrap server (SGLang, and the simulator): through the
router, whose every request reaches one prefill and one decode, the prefill of a stuck handoff is never idle, and
`BootstrapUnreachable` is the finding. Only decode legs sent without their prefill leg (to a decode by hand,
bypassing the router) would show it, which manufactures the symptom rather than produces it; it stays with the
unit tests.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import requests
from kubernetes import client

from localcluster.cluster import ClusterInfo
from localcluster.fleet import FAST_SIM_ENV, Fleet, generate, load_example
from localcluster.procs import wait_for
from sglang_operator.api.constants import DEFAULT_ROUTER_METRICS_PORT, DEFAULT_SGLANG_VERSION

CLI = str(Path(sys.executable).parent / "sglang-operator")
BOOTSTRAP_PORT = 8998  # examples/pd-small.yaml leaves the default
BROKEN = "1"  # the prefill replica whose bootstrap server is down
OTHER_VERSION = "0.5.22"  # a decode pod's image set to this release: RoleSkew
ENV = [
    *FAST_SIM_ENV,
    {"name": "SGLANG_SIM_REPLICA", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['sglang.ai/replica']"}}},
    {"name": "SGLANG_SIM_BOOTSTRAP_DOWN", "value": "1"},
    {"name": "SGLANG_SIM_BOOTSTRAP_DOWN_REPLICAS", "value": BROKEN},
]
WINDOW_SECONDS = 20  # Prometheus scrapes every 5 s: a rendezvous failure stays in the window for 4 evaluations
DIAGNOSTICS = {"intervalSeconds": 5, "windowSeconds": WINDOW_SECONDS, "appearAfter": 2, "clearAfter": 2}
FINDING_S = 45.0  # appear or clear: 2 evaluations 5 s apart, a 5 s scrape, a busy machine


# -- reading the fleet -------------------------------------------------------------------------------------------------
def findings(fleet: Fleet) -> list[dict[str, Any]]:
    return list((fleet.status().get("diagnostics") or {}).get("findings") or [])


def of_type(fleet: Fleet, kind: str) -> list[dict[str, Any]]:
    return [f for f in findings(fleet) if f["type"] == kind]


def wait_finding(fleet: Fleet, kind: str, check: Callable[[dict[str, Any]], bool], what: str) -> dict[str, Any]:
    """The first finding of `kind` that passes `check` (its evidence and action as the latest evaluation wrote them)."""

    def found() -> dict[str, Any] | None:
        return next((f for f in of_type(fleet, kind) if check(f)), None)

    return wait_for(found, FINDING_S, what, interval=1.0, on_timeout=lambda: f"; findings={findings(fleet)}")


def wait_cleared(fleet: Fleet, kind: str, what: str) -> None:
    wait_for(lambda: not of_type(fleet, kind), FINDING_S, what, interval=1.0,
             on_timeout=lambda: f"; findings={findings(fleet)}")  # fmt: skip


def live(pods: list[Any]) -> list[Any]:
    return [p for p in pods if not p.metadata.deletion_timestamp]


def serving(pods: list[Any]) -> list[Any]:
    """Neither deleted nor draining (the operator annotates a replica it drains before deleting it)."""
    return [p for p in live(pods) if "sglang.ai/draining-since" not in (p.metadata.annotations or {})]


def role_pods(fleet: Fleet, role: str) -> list[Any]:
    """The role's serving pods (the example names each group after its role; every replica has one pod)."""
    return serving([p for p in fleet.pods() if p.metadata.labels["sglang.ai/group"] == role])


def pod_of(fleet: Fleet, role: str, replica: str) -> Any:
    pods = [p for p in role_pods(fleet, role) if p.metadata.labels["sglang.ai/replica"] == replica]
    assert len(pods) == 1, [p.metadata.name for p in pods]
    return pods[0]


def url(pod: Any) -> str:
    return f"http://{pod.status.pod_ip}:{pod.spec.containers[0].ports[0].container_port}"


def ready(pod: Any) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def router_pods(fleet: Fleet) -> list[Any]:
    return [p for p in live(fleet.pods("router")) if ready(p)]


def listed(router_ip: str) -> list[tuple[str, str, int | None]]:
    """(url, worker_type, bootstrap_port) of each worker the router pod routes to."""
    answer = requests.get(f"http://{router_ip}:30000/workers", timeout=5).json()
    return sorted((w["url"], w.get("worker_type"), w.get("bootstrap_port")) for w in answer.get("workers", [])
                  if w.get("status") != "draining")  # fmt: skip


def every_router_lists(fleet: Fleet, prefills: list[Any], decodes: list[Any]) -> bool:
    """Every router pod lists exactly these Ready pods, each with its role's type (and a prefill's port)."""
    if not all(ready(p) for p in prefills + decodes):
        return False
    want = sorted([(url(p), "prefill", BOOTSTRAP_PORT) for p in prefills] + [(url(p), "decode", None) for p in decodes])
    routers = router_pods(fleet)
    return bool(routers) and all(listed(r.status.pod_ip) == want for r in routers)


def rendezvous_failures(router_ip: str) -> dict[tuple[str, str], float]:
    """smg's `smg_pd_rendezvous_failures_total` on one router pod, by (leg, phase)."""
    text = requests.get(f"http://{router_ip}:{DEFAULT_ROUTER_METRICS_PORT}/metrics", timeout=5).text
    out = {}
    for labels, value in re.findall(r"^smg_pd_rendezvous_failures_total\{([^}]*)\} (\S+)$", text, re.M):
        pairs = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        out[(pairs.get("leg", ""), pairs.get("phase", ""))] = float(value)
    return out


def doctor(fleet: Fleet, cluster: ClusterInfo) -> tuple[int, dict[str, Any]]:
    """`sglang-operator doctor -o json`: one evaluation, as the operator reads, without hysteresis."""
    env = {"KUBECONFIG": str(cluster.kubeconfig), "PATH": "/usr/bin:/bin",
           "SGLANG_OPERATOR_PROMETHEUS_URL": str(cluster.prometheus_url)}  # fmt: skip
    result = subprocess.run([CLI, "doctor", fleet.name, "-n", fleet.namespace, "-o", "json"], capture_output=True,
                            text=True, timeout=60, env=env)  # fmt: skip
    return result.returncode, json.loads(result.stdout) if result.stdout else {"stderr": result.stderr}


def groups(fleet: Fleet, prefills: int) -> list[dict[str, Any]]:
    prefill, decode = fleet.get()["spec"]["workerGroups"]
    return [{**prefill, "replicas": prefills}, decode]


def warnings(fleet: Fleet) -> set[str]:
    events = fleet.core.list_namespaced_event(fleet.namespace, field_selector=f"involvedObject.name={fleet.name}")
    return {e.reason for e in events.items if e.type == "Warning" and e.reason.startswith("Diagnosis")}


# -- the test ----------------------------------------------------------------------------------------------------------
def test_pd_findings_are_reported_with_their_pod_and_action_and_clear(
    cluster: ClusterInfo, api_client: client.ApiClient, core: client.CoreV1Api, namespace: str,
    operator_with_prometheus: str,
) -> None:  # fmt: skip
    doc = load_example("pd-small.yaml")
    doc["spec"]["engine"] = {"env": ENV}
    doc["spec"]["diagnostics"] = DIAGNOSTICS
    doc["spec"]["workerGroups"][0]["replicas"] = 2
    fleet = Fleet(api_client, namespace, "pd-small")
    fleet.apply(doc)

    def up() -> bool:
        prefills, decodes = role_pods(fleet, "prefill"), role_pods(fleet, "decode")
        if len(prefills) != 2 or len(decodes) != 2 or not all(ready(p) and p.status.pod_ip for p in prefills):
            return False
        healthy = [p for p in prefills if p.metadata.labels["sglang.ai/replica"] != BROKEN]
        return every_router_lists(fleet, healthy, decodes)

    wait_for(up, 180, "2 prefills and 2 decodes Ready, every router listing all but the broken prefill", interval=0.5,
             on_timeout=lambda: f"; status={fleet.status()}")  # fmt: skip
    broken, healthy = pod_of(fleet, "prefill", BROKEN), pod_of(fleet, "prefill", "0")
    broken_name, broken_url = broken.metadata.name, url(broken)
    skewed, other_decode = pod_of(fleet, "decode", "0"), pod_of(fleet, "decode", "1").metadata.name
    skewed_name = skewed.metadata.name
    router = router_pods(fleet)[0]
    router_name, router_ip = router.metadata.name, router.status.pod_ip

    # RoleSkew, started first (the pod restarts as another release while the bootstrap findings are read): one
    # decode pod's image set to 0.5.22, the one field of the four a pod lets you edit.
    image = f"lmsysorg/sglang:v{OTHER_VERSION}"
    core.patch_namespaced_pod(skewed_name, namespace, {"spec": {"containers": [{"name": "sglang", "image": image}]}})

    # BootstrapUnreachable: the ready prefill whose bootstrap port refuses, on its own replica; never registered.
    unreachable = wait_finding(fleet, "BootstrapUnreachable", lambda f: f["pod"] == broken_name,
                               f"BootstrapUnreachable on {broken_name}")  # fmt: skip
    assert unreachable["replica"] == BROKEN and unreachable["node"] == broken.spec.node_name
    assert f"{broken.status.pod_ip}:{BOOTSTRAP_PORT}/health" in unreachable["evidence"]
    assert "the replica is Ready and no router lists it" in unreachable["evidence"]
    assert f"--disaggregation-bootstrap-port {BOOTSTRAP_PORT}" in unreachable["action"]
    assert "mooncake_tcp transfer backend" in unreachable["action"]
    assert unreachable["action"].endswith(f"delete pod {broken_name} to restart it")
    assert [f["pod"] for f in of_type(fleet, "BootstrapUnreachable")] == [broken_name]  # not the healthy prefill
    # smg probes a bootstrap port only when a prefill is registered; the operator never registered this one.
    assert rendezvous_failures(router_ip) == {} and not of_type(fleet, "RendezvousFailures")

    # Registered by hand past the operator's gate: smg's registration probe is refused, and counted.
    body = {"url": broken_url, "runtime": "sglang", "worker_type": "prefill", "bootstrap_port": BOOTSTRAP_PORT}
    assert requests.post(f"http://{router_ip}:30000/workers", json=body, timeout=5).status_code == 202
    code, report = doctor(fleet, cluster)  # the CLI, meanwhile: one evaluation, the same prefill
    assert code == 1, report
    assert ("BootstrapUnreachable", broken_name) in {(f["type"], f["pod"]) for f in report["findings"]}
    wait_for(lambda: rendezvous_failures(router_ip).get(("prefill", "probe"), 0) >= 1, 30,
             "smg counting the refused bootstrap probe",
             on_timeout=lambda: f"; {rendezvous_failures(router_ip)}")  # fmt: skip
    failed_at = time.monotonic()
    failures = wait_finding(fleet, "RendezvousFailures", lambda f: f["pod"] == router_name,
                            f"RendezvousFailures on router pod {router_name}")  # fmt: skip
    assert re.search(rf"rose by 1 over {WINDOW_SECONDS}s on router pod {router_name}: 1 in phase probe \(prefill "
                     r"leg\)", failures["evidence"]), failures["evidence"]  # fmt: skip
    assert failures["action"].startswith("phase probe: a prefill's bootstrap port refused smg's registration probe")
    assert "see BootstrapUnreachable" in failures["action"]
    # The operator keeps routing a prefill a router lists: the finding now names the router pod that pairs it.
    wait_finding(fleet, "BootstrapUnreachable",
                 lambda f: f["pod"] == broken_name and f"router pod(s) {router_name} list it" in f["evidence"],
                 "BootstrapUnreachable naming the router pod that lists the broken prefill")  # fmt: skip

    # RoleSkew: the restarted decode, listed again beside the 0.5.23 prefills, is named with its action.
    skew = wait_finding(fleet, "RoleSkew", lambda f: OTHER_VERSION in f["evidence"],
                        f"RoleSkew naming the {OTHER_VERSION} decode")  # fmt: skip
    assert skew["pod"] == "" and skew["replica"] == ""  # a fleet finding
    assert f"SGLang version (image): prefill {DEFAULT_SGLANG_VERSION} (" in skew["evidence"]
    assert (f"; decode {OTHER_VERSION} ({skewed_name}), {DEFAULT_SGLANG_VERSION} ({other_decode}); listed together "
            f"by router pod(s) {router_name}") in skew["evidence"]  # fmt: skip
    assert (f"the pods not launched as the spec says now (SGLang version {DEFAULT_SGLANG_VERSION}) are {skewed_name};"
            in skew["action"])  # fmt: skip
    assert "delete them so the operator re-creates them from the spec" in skew["action"]

    # Both acted on at once: the broken replica scaled away (prefill 2 -> 1), the edited pod deleted (re-created from
    # the spec). Each finding clears; the refused probe leaves the window, and RendezvousFailures clears too.
    fleet.patch_spec({"workerGroups": groups(fleet, 1)})
    core.delete_namespaced_pod(skewed_name, namespace, grace_period_seconds=0)
    wait_cleared(fleet, "BootstrapUnreachable", "BootstrapUnreachable cleared once the replica is gone")
    assert broken_name not in {p.metadata.name for p in serving(fleet.pods())}  # draining or gone
    assert [p.metadata.name for p in role_pods(fleet, "prefill")] == [healthy.metadata.name]
    wait_cleared(fleet, "RoleSkew", "RoleSkew cleared once the edited pod was re-created")
    recreated = [p for p in fleet.pods() if p.metadata.name == skewed_name]  # a replica's pod keeps its name
    assert all(p.metadata.uid != skewed.metadata.uid and p.spec.containers[0].image != image for p in recreated)

    # RoleUnavailable: no prefill (the group scaled to 0) while both decodes are Ready, so smg answers 503. Started
    # while the refused probe leaves the window: RendezvousFailures clears meanwhile.
    wait_for(lambda: len(role_pods(fleet, "decode")) == 2 and every_router_lists(
        fleet, role_pods(fleet, "prefill"), role_pods(fleet, "decode")), 60, "the re-created decode registered",
        interval=0.5)  # fmt: skip
    fleet.patch_spec({"workerGroups": groups(fleet, 0)})
    wait_cleared(fleet, "RendezvousFailures", "RendezvousFailures cleared once the failure left the window")
    assert time.monotonic() - failed_at > WINDOW_SECONDS
    missing = wait_finding(fleet, "RoleUnavailable", lambda f: "prefill replicas now: none" in f["evidence"],
                           "RoleUnavailable once the last prefill is gone")  # fmt: skip
    assert missing["pod"] == "" and "no Ready prefill replica while 2 decode replica(s) are" in missing["evidence"]
    assert "the router answers 503 to every request" in missing["evidence"]
    assert missing["evidence"].endswith("the spec asks for 0")
    assert missing["action"].startswith("the spec asks for no prefill replica")
    assert generate(fleet.router_urls()[0], "nobody to prefill").status_code == 503
    fleet.patch_spec({"workerGroups": groups(fleet, 1)})
    wait_for(lambda: len(role_pods(fleet, "prefill")) == 1 and every_router_lists(
        fleet, role_pods(fleet, "prefill"), role_pods(fleet, "decode")), 90, "a prefill back and registered",
        interval=0.5)  # fmt: skip
    wait_cleared(fleet, "RoleUnavailable", "RoleUnavailable cleared once a prefill is back")
    assert generate(fleet.router_urls()[0], "back").status_code == 200
    assert findings(fleet) == []
    assert {"DiagnosisBootstrapUnreachable", "DiagnosisRendezvousFailures", "DiagnosisRoleSkew",
            "DiagnosisRoleUnavailable"} <= warnings(fleet)  # fmt: skip
