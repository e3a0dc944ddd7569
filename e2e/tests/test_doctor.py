"""The fleet doctor on the local cluster: each symptom produced on purpose by a simulator knob, read back from the
real Prometheus, routers and pods, is reported with the right replica and action, and clears once the knob is gone.

Two fleets, so each test runs one: `faults` (3 replicas behind a round-robin router, replica 1 slowed 4x, replica 2's
prefix cache disabled: SlowReplica and LoadImbalance on replica 1, CacheHitSpread on replica 2; then the knobs are
removed, the rollout replaces the pods, and `sglang-operator doctor` on the healthy fleet reports nothing), and
`startup` (a 25 s start-up, autoscaled: SlowStart on its replicas and SlowScaleUp on a raised minimum, both cleared
once starts are fast and a later scale-up is quick). The knobs reach one replica through the downward API: the
replica's label `sglang.ai/replica` as SGLANG_SIM_REPLICA, matched against SGLANG_SIM_SLOW_REPLICAS and
SGLANG_SIM_COLD_CACHE_REPLICAS. Windows, intervals and hysteresis are compressed to seconds.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import requests
from kubernetes import client

from localcluster.cluster import ClusterInfo
from localcluster.fleet import Fleet, steady_load
from localcluster.procs import wait_for

CLI = str(Path(sys.executable).parent / "sglang-operator")
REPLICA_ENV = {
    "name": "SGLANG_SIM_REPLICA",
    "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['sglang.ai/replica']"}},
}
FAULTS = [
    {"name": "SGLANG_SIM_SLOWDOWN", "value": "4"},
    {"name": "SGLANG_SIM_SLOW_REPLICAS", "value": "1"},
    {"name": "SGLANG_SIM_CACHE_DISABLED", "value": "1"},
    {"name": "SGLANG_SIM_COLD_CACHE_REPLICAS", "value": "2"},
]
DIAGNOSTICS = {"intervalSeconds": 5, "windowSeconds": 30, "appearAfter": 2, "clearAfter": 2}
SYSTEM_PROMPT = "You are a careful assistant for a fleet of inference servers; answer briefly. " * 3


def deployment(env: list[dict[str, Any]], diagnostics: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "sglang.ai/v1alpha1", "kind": "SGLangDeployment", "metadata": {"name": "x"},
        "spec": {"model": {"path": "meta-llama/Llama-3.1-8B-Instruct", "servedName": "llama"},
                 "engine": {"env": env}, "diagnostics": diagnostics, **spec},
    }  # fmt: skip


def findings(fleet: Fleet) -> list[dict[str, Any]]:
    return list((fleet.status().get("diagnostics") or {}).get("findings") or [])


def by_type(fleet: Fleet) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for f in findings(fleet):
        out.setdefault(f["type"], []).append(f)
    return out


def rank0_pod(fleet: Fleet, replica: str) -> str:
    names = [p.metadata.name for p in fleet.pods() if p.metadata.labels.get("sglang.ai/replica") == replica
             and p.metadata.labels.get("sglang.ai/node-rank") == "0" and not p.metadata.deletion_timestamp]  # fmt: skip
    assert len(names) == 1, names
    return names[0]


def warnings(fleet: Fleet) -> list[str]:
    events = fleet.core.list_namespaced_event(fleet.namespace, field_selector=f"involvedObject.name={fleet.name}")
    return [e.reason for e in events.items if e.type == "Warning" and e.reason.startswith("Diagnosis")]


def doctor(fleet: Fleet, cluster: ClusterInfo, output: str = "json") -> subprocess.CompletedProcess[str]:
    env = {"KUBECONFIG": str(cluster.kubeconfig), "PATH": "/usr/bin:/bin", "SGLANG_OPERATOR_PROMETHEUS_URL":
           str(cluster.prometheus_url)}  # fmt: skip
    return subprocess.run([CLI, "doctor", fleet.name, "-n", fleet.namespace, "-o", output], capture_output=True,
                          text=True, timeout=60, env=env)  # fmt: skip


def shared_prefix(url: str, index: int) -> requests.Response:
    body = {"text": f"{SYSTEM_PROMPT}Question {index}: how is the weather?", "sampling_params": {"max_new_tokens": 32}}
    return requests.post(f"{url}/generate", json=body, timeout=30)


def metric(url: str, kind: str, name: str) -> float | None:
    for line in requests.get(url, timeout=5).text.splitlines():
        if line.startswith("sglang_operator_diagnostic_findings{") and f'type="{kind}"' in line and \
                f'name="{name}"' in line:  # fmt: skip
            return float(line.rsplit(" ", 1)[1])
    return None


def test_slow_replica_uneven_load_and_cold_cache_are_reported_on_their_replica_and_clear(
    cluster: ClusterInfo, api_client: client.ApiClient, namespace: str, operator_with_prometheus: str
) -> None:
    fleet = Fleet(api_client, namespace, "faults")
    thresholds = {"minRequests": 10, "minLoad": 0.3, "loadImbalanceRatio": 2.0}
    env = [{"name": "SGLANG_SIM_STARTUP_SECONDS", "value": "1"}, REPLICA_ENV]
    fleet.apply(deployment(env + FAULTS, {**DIAGNOSTICS, "thresholds": thresholds}, replicas=3,
                           router={"policy": "round_robin"}))  # fmt: skip
    fleet.wait_ready(3, timeout=120)
    slow, cold = rank0_pod(fleet, "1"), rank0_pod(fleet, "2")
    router = fleet.router_urls()[0]
    # ~6 requests/s for at most 4 minutes: enough for each replica's window, bounded whatever happens.
    with steady_load(router, rate_per_s=6, max_requests=1500, max_seconds=240, send=shared_prefix) as load:

        def reported() -> bool:
            found = by_type(fleet)
            return (
                [f["pod"] for f in found.get("SlowReplica", [])] == [slow]
                and [f["pod"] for f in found.get("LoadImbalance", [])] == [slow]
                and [f["pod"] for f in found.get("CacheHitSpread", [])] == [cold]
            )

        wait_for(reported, 150, "SlowReplica and LoadImbalance on replica 1, CacheHitSpread on replica 2",
                 interval=1.0, on_timeout=lambda: f"; findings={findings(fleet)}; "
                 f"tracking={(fleet.status().get('diagnostics') or {}).get('tracking')}")  # fmt: skip
        found = by_type(fleet)
        slow_finding, cold_finding = found["SlowReplica"][0], found["CacheHitSpread"][0]
        assert slow_finding["replica"] == "1" and "inter-token latency" in slow_finding["evidence"]
        assert "GPU NVIDIA H200" in slow_finding["evidence"] and slow_finding["node"] in slow_finding["action"]
        assert "round_robin" in found["LoadImbalance"][0]["evidence"]
        assert "least_load" in found["LoadImbalance"][0]["action"]
        assert cold_finding["replica"] == "2" and "prefix-cache hit rate 0%" in cold_finding["evidence"]
        assert "--disable-radix-cache" in cold_finding["action"]
        wait_for(lambda: {"DiagnosisSlowReplica", "DiagnosisLoadImbalance", "DiagnosisCacheHitSpread"}
                 <= set(warnings(fleet)), 30, "one Warning event per finding")  # fmt: skip
        assert sorted(warnings(fleet)).count("DiagnosisSlowReplica") == 1
        assert metric(operator_with_prometheus, "SlowReplica", "faults") == 1.0
        assert metric(operator_with_prometheus, "SlowStart", "faults") == 0.0

        # The CLI reads the same cluster and Prometheus (one evaluation, no hysteresis): the same replicas.
        result = doctor(fleet, cluster)
        assert result.returncode == 1, result.stderr
        live = {(f["type"], f["pod"]) for f in json.loads(result.stdout)["findings"]}
        assert {("SlowReplica", slow), ("LoadImbalance", slow), ("CacheHitSpread", cold)} <= live

        # Knobs removed: a rollout replaces every pod, and every finding clears.
        fleet.patch_spec({"engine": {"env": env}})
        wait_for(lambda: not findings(fleet) and slow not in {p.metadata.name for p in fleet.pods()}, 180,
                 "findings cleared after the knobs were removed", interval=1.0,
                 on_timeout=lambda: f"; findings={findings(fleet)}")  # fmt: skip
        fleet.wait_ready(3, timeout=60)
        assert metric(operator_with_prometheus, "SlowReplica", "faults") == 0.0

        # A healthy fleet under the same load: `doctor` reports nothing, once the new pods fill the window.
        def healthy() -> bool:
            result = doctor(fleet, cluster)
            report = json.loads(result.stdout) if result.stdout else {}
            return result.returncode == 0 and report.get("findings") == [] and report.get("unknown") == {}

        wait_for(healthy, 60, "doctor reports nothing on the healthy fleet", interval=3.0,
                 on_timeout=lambda: f"; {doctor(fleet, cluster).stdout}")  # fmt: skip
        table = doctor(fleet, cluster, "table")
        assert table.returncode == 0 and table.stdout == f"No findings for sgld {namespace}/faults over 30s.\n"
    assert load.sent > 0 and load.failed == 0, load.errors[:5]


def test_slow_start_and_slow_scale_up_are_reported_and_clear_once_starts_are_fast(
    cluster: ClusterInfo, api_client: client.ApiClient, namespace: str, operator_with_prometheus: str
) -> None:
    fleet = Fleet(api_client, namespace, "startup")
    # A fast start here (2 s load, then the readiness probe's period) takes up to ~12 s on a busy 2-core machine.
    slow_env = [{"name": "SGLANG_SIM_STARTUP_SECONDS", "value": "25"}]
    thresholds = {"slowStartSeconds": 18, "slowScaleUpSeconds": 18}
    autoscaling = {"enabled": True, "minReplicas": 1, "maxReplicas": 3, "intervalSeconds": 2, "startupSeconds": 2}
    diagnostics = {**DIAGNOSTICS, "windowSeconds": 600, "thresholds": thresholds}
    fleet.apply(deployment(slow_env, diagnostics,
                           autoscaling=autoscaling))  # fmt: skip

    def has(kind: str, pod: str | None = None) -> bool:
        return any(f["type"] == kind and (pod is None or f["pod"] == pod) for f in findings(fleet))

    # Still starting after 18 s: reported while it starts, with the phases and the model cache in use.
    wait_for(lambda: has("SlowStart"), 90, "SlowStart on the first replica", interval=1.0)
    first = rank0_pod(fleet, "0")
    start = next(f for f in findings(fleet) if f["type"] == "SlowStart")
    assert start["pod"] == first and start["replica"] == "0"
    assert "weight load + warm-up" in start["evidence"] and "model cache emptyDir" in start["evidence"]
    assert "model.cache.type" in start["action"]
    fleet.wait_ready(1, timeout=60)

    # A scale-up (the autoscaler's minimum raised) that waits 25 s for its replica: slow.
    fleet.patch_spec({"autoscaling": {"minReplicas": 2}})
    wait_for(lambda: has("SlowScaleUp"), 90, "SlowScaleUp after minReplicas 1 -> 2", interval=1.0,
             on_timeout=lambda: f"; findings={findings(fleet)}; {fleet.status().get('autoscaler')}")  # fmt: skip
    scale_up = next(f for f in findings(fleet) if f["type"] == "SlowScaleUp")
    assert scale_up["pod"] == "" and "scale-up 1 -> 2 replicas" in scale_up["evidence"]
    assert "warmReplicas" in scale_up["action"]
    wait_for(lambda: has("SlowStart", rank0_pod(fleet, "1")), 60, "SlowStart on the scaled-up replica")
    assert "DiagnosisSlowScaleUp" in warnings(fleet)

    # The knob removed (default start-up, 2 s): the rollout's pods start fast, and a later scale-up is quick.
    fleet.patch_spec({"engine": {"env": []}})
    wait_for(lambda: not has("SlowStart") and first not in {p.metadata.name for p in fleet.pods()}, 150,
             "SlowStart cleared after the rollout", interval=1.0,
             on_timeout=lambda: f"; findings={findings(fleet)}")  # fmt: skip
    fleet.wait_ready(2, timeout=90)
    # The slow scale-up is still reported (its window is long): only the next, fast one clears it.
    assert [f["type"] for f in findings(fleet)] == ["SlowScaleUp"]
    fleet.patch_spec({"autoscaling": {"minReplicas": 3}})
    wait_for(lambda: not findings(fleet), 90, "SlowScaleUp cleared by a fast scale-up", interval=1.0,
             on_timeout=lambda: f"; findings={findings(fleet)}")  # fmt: skip
    fleet.wait_ready(3, timeout=60)
