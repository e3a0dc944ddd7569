"""What the doctor reads of a disaggregated fleet: each pod's role and launch flags (from pods the operator renders),
the bootstrap servers to probe and the probe itself against scripted servers, the PD PromQL against a scripted
Prometheus, and one whole evaluation of a PD fleet."""

import copy
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml
from kubernetes import client

from sglang_operator.api.spec import SGLangDeploymentSpec
from sglang_operator.doctor.doctor_pass import evaluate
from sglang_operator.doctor.model import LaunchFacts
from sglang_operator.doctor.observe import fleet_facts, pod_facts, probe_bootstrap, read_metrics
from sglang_operator.doctor.pd_observe import bootstrap_targets, launch_facts, pd_promql, spec_launch
from sglang_operator.prometheus.client import connect
from sglang_operator.render import Owner, render_all
from sglang_operator.settings import OperatorSettings
from tests.integration.prometheus.test_client import Answer, FakePrometheus, prometheus  # noqa: F401  (fixture)
from tests.support.router.fakehttp import Reply, serving

REPO = Path(__file__).resolve().parents[3]
OWNER = Owner("pd-small", "team-a", "7f0c2a4e-0000-4000-8000-000000000001")
BODY = {"metadata": {"namespace": "team-a", "name": "pd-small", "uid": OWNER.uid}, "status": {}}
READY = [{"type": "Ready", "status": "True", "lastTransitionTime": "2027-01-15T08:01:40Z"}]


def pd_spec(**patch: Any) -> SGLangDeploymentSpec:
    """examples/pd-small.yaml: 1 prefill (tp 2) and 2 decode replicas, mooncake_tcp, page size 64."""
    spec = yaml.safe_load((REPO / "examples" / "pd-small.yaml").read_text())["spec"]
    return SGLangDeploymentSpec.model_validate({**spec, **patch})


def rendered(spec: SGLangDeploymentSpec, ready: bool = True) -> dict[str, dict[str, Any]]:
    """The fleet's worker pods as the operator renders them, by group and replica ("prefill-0"), each with an IP."""
    pods = {}
    for i, pod in enumerate(o for o in render_all(spec, OWNER) if o["kind"] == "Pod"):
        labels = pod["metadata"]["labels"]
        pod = copy.deepcopy(pod)
        pod["metadata"]["creationTimestamp"] = "2027-01-15T08:00:00Z"
        pod["status"] = {"podIP": f"10.0.0.{i + 1}", "conditions": READY if ready else []}
        pods[f"{labels['sglang.ai/group']}-{labels['sglang.ai/replica']}"] = pod
    return pods


def name(pod: dict[str, Any]) -> str:
    return str(pod["metadata"]["name"])


def command(pod: dict[str, Any]) -> list[str]:
    return list(pod["spec"]["containers"][0]["command"])


# -- roles and launch flags ------------------------------------------------------------------------------------------
def test_each_pods_role_and_kv_contract_are_read_from_its_command_and_image() -> None:
    spec = pd_spec()
    pods = rendered(spec)
    expected = LaunchFacts(page_size="64", kv_cache_dtype="", transfer_backend="mooncake_tcp", version="0.5.23")
    assert spec_launch(spec) == expected
    for key, role in (("prefill-0", "prefill"), ("decode-0", "decode"), ("decode-1", "decode")):
        facts = pod_facts(pods[key])
        assert (facts.role, facts.launch, facts.group) == (role, expected, role)


def test_flags_in_either_form_the_last_one_winning_and_an_untagged_image_are_read_as_they_are() -> None:
    pod = rendered(pd_spec())["decode-0"]
    main = pod["spec"]["containers"][0]
    main["command"] += ["--page-size=16", "--kv-cache-dtype", "fp8_e5m2", "--page-size", "32"]
    main["image"] = "registry.local/sglang:custom"
    assert launch_facts(pod) == LaunchFacts("32", "fp8_e5m2", "mooncake_tcp", "registry.local/sglang:custom")
    sidecar_first = {"spec": {"containers": [{"name": "proxy", "command": ["envoy"]}, main]}}
    assert pod_facts(sidecar_first).role == "decode"  # the sglang container, wherever it is
    assert pod_facts({"spec": {"containers": [{"name": "sglang", "command": ["python3"]}]}}).role == ""


def test_a_pd_fleets_facts_carry_roles_counts_and_the_specs_launch_values() -> None:
    spec = pd_spec()
    pods = rendered(spec)
    modeless = pods["decode-1"]
    modeless["spec"]["containers"][0]["command"] = [w for w in command(modeless) if w not in ("--disaggregation-mode",
                                                                                              "decode")]  # fmt: skip
    facts = fleet_facts(BODY, spec, list(pods.values()), [], now=0.0)
    assert facts.disaggregated and facts.role_replicas == {"prefill": 1, "decode": 2}
    assert facts.launch == spec_launch(spec)
    assert {p.name: p.role for p in facts.pods} == {
        name(pods["prefill-0"]): "prefill", name(pods["decode-0"]): "decode", name(modeless): "decode"
    }  # a pod launched without a mode takes its group's role  # fmt: skip
    plain = SGLangDeploymentSpec.model_validate({"model": {"path": "m"}})
    colocated = fleet_facts(BODY, plain, [], [], now=0.0)
    assert not colocated.disaggregated and colocated.role_replicas == {}


# -- the bootstrap probe ---------------------------------------------------------------------------------------------
def test_bootstrap_targets_are_the_ready_serving_prefill_rank0_pods_on_their_declared_port() -> None:
    groups = [
        {"name": "prefill", "role": "prefill", "replicas": 4, "parallelism": {"tp": 2}},
        {"name": "decode", "role": "decode", "replicas": 1, "parallelism": {"tp": 1}},
    ]
    spec = pd_spec(workerGroups=groups)
    pods = rendered(spec)
    moved = pods["prefill-1"]["spec"]["containers"][0]["ports"]
    next(p for p in moved if p["name"] == "bootstrap")["containerPort"] = 9100  # started under an older spec
    pods["prefill-2"]["status"]["conditions"] = []  # not Ready
    pods["prefill-3"]["metadata"]["annotations"]["sglang.ai/draining-since"] = "2027-01-15T09:00:00Z"
    ipv6 = copy.deepcopy(pods["prefill-0"])
    ipv6["metadata"]["name"], ipv6["status"]["podIP"] = "pd-small-prefill-x-9-0", "fd00::7"
    every = [*pods.values(), ipv6]
    facts = fleet_facts(BODY, spec, every, [], now=0.0)
    assert bootstrap_targets(every, facts, 8998, OWNER.uid) == [
        (name(pods["prefill-0"]), "http://10.0.0.1:8998/health"),
        (name(pods["prefill-1"]), "http://10.0.0.2:9100/health"),
        ("pd-small-prefill-x-9-0", "http://[fd00::7]:8998/health"),
    ]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_bootstrap_server_answers_only_with_200_within_the_deadline() -> None:
    refused = f"http://127.0.0.1:{_closed_port()}/health"
    with (
        serving({("GET", "/health"): Reply(200, b"OK", "text/plain")}) as good,
        serving({("GET", "/health"): Reply(503, b"{}")}) as starting,
        serving({("GET", "/health"): Reply.redirect(307, "http://169.254.169.254/")}) as moved,
    ):
        targets = [("good", f"{good.url}/health"), ("starting", f"{starting.url}/health"),
                   ("moved", f"{moved.url}/health"), ("refused", refused)]  # fmt: skip
        probes = probe_bootstrap(targets, time.monotonic() + 10)
    assert probes is not None
    why = {p.pod: p.why for p in probes}
    assert why["good"] == "" and [p.pod for p in probes if p.answered] == ["good"]
    assert why["starting"] == f"GET {starting.url}/health: HTTP 503"
    assert "redirect, not followed" in why["moved"]
    assert why["refused"] == f"GET {refused}: connection refused"
    assert [(r.method, r.path) for r in good.requests] == [("GET", "/health")]


def test_a_hanging_bootstrap_server_times_out_and_probes_left_at_the_deadline_are_unknown() -> None:
    with serving({("GET", "/health"): Reply(hang=True)}) as hanging, serving({("GET", "*"): Reply(200)}) as good:
        started = time.monotonic()
        probes = probe_bootstrap([("hangs", f"{hanging.url}/health")], started + 5)
        assert probes is not None and "no answer within 2s" in probes[0].why
        assert time.monotonic() - started < 4
        assert probe_bootstrap([("hangs", f"{hanging.url}/health"), ("good", good.url)], time.monotonic() + 1) is None
        assert good.requests == []
    assert probe_bootstrap([], time.monotonic()) == ()


# -- the PD PromQL ---------------------------------------------------------------------------------------------------
def test_pd_promql_reads_the_routers_failures_and_each_roles_queues_over_the_window() -> None:
    queries = pd_promql("team-a", "chat", 600)
    routers = 'namespace="team-a",sglang_deployment="chat",sglang_component="router"'
    failures = f"smg_pd_rendezvous_failures_total{{{routers}}}"
    assert queries["rendezvous_failures"] == (
        f"sum by (pod, leg, phase) ((increase({failures}[600s]) > 0) or ({failures} unless {failures} offset 600s))"
    )
    workers = 'namespace="team-a",sglang_deployment="chat",sglang_component="worker"'
    assert (
        queries["prealloc_growth"] == f"sum by (pod) (delta(sglang:num_decode_prealloc_queue_reqs{{{workers}}}[600s]))"
    )
    assert queries["bootstrap_queue_mean"] == (
        f"sum by (pod) (avg_over_time(sglang:num_prefill_bootstrap_queue_reqs{{{workers}}}[600s])) or "
        f"sum by (pod) (avg_over_time(sglang:num_prefill_prealloc_queue_reqs{{{workers}}}[600s]))"
    )


def vector(*series: tuple[dict[str, str], float | str]) -> Answer:
    result = [{"metric": labels, "value": [1.0, str(value)]} for labels, value in series]
    return 200, {"status": "success", "data": {"resultType": "vector", "result": result}}


def test_read_metrics_reads_the_pd_signals_only_in_a_disaggregated_fleet(
    prometheus: Callable[..., FakePrometheus],  # noqa: F811
) -> None:
    fake = prometheus({
        "smg_pd_rendezvous_failures_total": vector(({"pod": "r-1", "leg": "prefill", "phase": "probe"}, 3),
                                                   ({"pod": "r-1", "leg": "decode", "phase": "transfer"}, "NaN")),
        "delta(sglang:num_decode_prealloc": vector(({"pod": "d-0"}, 12)),
        "min_over_time(sglang:num_decode_prealloc": vector(({"pod": "d-0"}, 0)),
        "num_decode_prealloc_queue_reqs": vector(({"pod": "d-0"}, 14)),
        "avg_over_time(sglang:num_running_reqs": vector(({"pod": "p-0"}, 0), ({"pod": "d-0"}, 5)),
        "bootstrap_queue_reqs": (500, {"status": "error", "error": "boom"}),
    })  # fmt: skip
    got = read_metrics(connect(fake.url), "team-a", "chat", 600, time.monotonic() + 10, disaggregated=True)
    assert got.rendezvous_failures == {("r-1", "prefill", "probe"): 3.0}
    assert (got.prealloc_queue, got.prealloc_growth, got.prealloc_lowest) == ({"d-0": 14}, {"d-0": 12}, {"d-0": 0})
    assert got.running_mean == {"p-0": 0.0, "d-0": 5.0}
    assert got.bootstrap_queue_mean is None and "bootstrap_queue_mean: HTTP 500" in got.errors
    before = len(fake.queries)
    colocated = read_metrics(connect(fake.url), "team-a", "chat", 600, time.monotonic() + 10)
    assert colocated.rendezvous_failures is None and colocated.prealloc_queue is None
    assert not any("prealloc" in q or "rendezvous" in q for q in fake.queries[before:])


# -- one evaluation --------------------------------------------------------------------------------------------------
def test_one_evaluation_of_a_pd_fleet_probes_the_prefill_and_finds_what_it_can_without_prometheus() -> None:
    spec = pd_spec()
    pods = rendered(spec)
    for key in ("decode-0", "decode-1"):
        pods[key]["status"]["conditions"] = []  # decode not Ready: the router answers 503
    body = BODY
    with serving({("GET", "/health"): Reply(503, b"{}")}) as bootstrap:
        prefill = pods["prefill-0"]
        prefill["status"]["podIP"] = "127.0.0.1"
        port = urlsplit(bootstrap.url).port
        next(p for p in prefill["spec"]["containers"][0]["ports"] if p["name"] == "bootstrap")["containerPort"] = port
        evaluation = evaluate(client.ApiClient(), body, spec, list(pods.values()), OperatorSettings(), now=1.8e9,
                              prometheus_url="http://127.0.0.1:9", as_user=True, deadline_seconds=8)  # fmt: skip
    assert [(r.method, r.path) for r in bootstrap.requests] == [("GET", "/health")]
    found = {(c.type, c.subject) for c in evaluation.diagnosis.candidates}
    assert ("BootstrapUnreachable", name(prefill)) in found and ("RoleUnavailable", "") in found
    unknown = evaluation.diagnosis.unknown
    assert {"RendezvousFailures", "HandoffStuck", "RoleSkew"} <= set(unknown) and "BootstrapUnreachable" not in unknown


def test_a_pod_labelled_as_a_prefill_but_not_the_crs_is_never_probed() -> None:
    """Issue 37: the doctor probes only the bootstrap port of a pod the CR controls; a tenant's pod with the labels
    and a prefill's command, declaring a port of its choice, receives nothing."""
    spec = pd_spec()
    pods = rendered(spec)
    for pod in pods.values():
        pod["status"]["conditions"] = []  # only the impostor is Ready
    with serving({("GET", "/health"): Reply(200, b"OK")}) as target:
        impostors = []
        for i, owners in enumerate(([], [{**pods["prefill-0"]["metadata"]["ownerReferences"][0], "uid": "other"}])):
            impostor = copy.deepcopy(pods["prefill-0"])
            impostor["metadata"]["name"], impostor["metadata"]["ownerReferences"] = f"pd-small-prefill-x-{i}-0", owners
            impostor["status"] = {"podIP": "127.0.0.1", "conditions": READY}
            port = next(p for p in impostor["spec"]["containers"][0]["ports"] if p["name"] == "bootstrap")
            port["containerPort"] = urlsplit(target.url).port
            impostors.append(impostor)
        every = [*pods.values(), *impostors]
        facts = fleet_facts(BODY, spec, every, [], now=0.0)
        assert {p.name for p in facts.pods} == {name(p) for p in pods.values()}
        assert bootstrap_targets(every, facts, 8998, OWNER.uid) == []
        evaluate(client.ApiClient(), BODY, spec, every, OperatorSettings(), now=1.8e9,
                 prometheus_url="http://127.0.0.1:9", as_user=True, deadline_seconds=5)  # fmt: skip
    assert target.requests == []
