"""Rendered children: golden files per example, schema validity, labels, probes and overrides.
Pod security and the NetworkPolicy: tests/unit/render/.

Regenerate the golden files after an intended change with `UPDATE_GOLDEN=1 pytest tests/unit/render/test_render.py`.
"""

import os
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from sglang_operator.api.spec import SGLangDeploymentSpec
from sglang_operator.render import Owner, render_all, revision_hash
from sglang_operator.render.workers import worker_pod
from tests.conftest import EXAMPLES, REPO

GOLDEN = REPO / "tests" / "golden"
K8S_VERSION = "1.34.0"
OWNER = Owner(name="demo", namespace="team-a", uid="7f0c2a4e-0000-4000-8000-000000000001")


def spec_of(raw: dict[str, Any]) -> SGLangDeploymentSpec:
    return SGLangDeploymentSpec.model_validate(raw)


def render_example(path: Path) -> list[dict[str, Any]]:
    doc = yaml.safe_load(path.read_text())
    owner = Owner(doc["metadata"]["name"], "default", "7f0c2a4e-0000-4000-8000-000000000001")
    return render_all(spec_of(doc["spec"]), owner)


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_golden(example: Path) -> None:
    rendered = yaml.safe_dump_all(render_example(example), sort_keys=False, width=120)
    golden = GOLDEN / example.name
    if os.environ.get("UPDATE_GOLDEN"):
        golden.parent.mkdir(exist_ok=True)
        golden.write_text(rendered)
    assert rendered == golden.read_text()


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_every_object_passes_kubernetes_validate(example: Path) -> None:
    for obj in render_example(example):
        if obj["apiVersion"].startswith("monitoring.coreos.com"):
            continue  # a CRD kubernetes-validate has no schema for
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_pod_monitor_is_rendered_on_request() -> None:
    objects = render_all(spec_of({"model": {"path": "m"}, "monitoring": {"podMonitor": True}}), OWNER)
    monitor = next(o for o in objects if o["kind"] == "PodMonitor")
    assert monitor["spec"]["selector"] == {"matchLabels": {"sglang.ai/deployment": "demo"}}
    targets = {r["targetLabel"] for r in monitor["spec"]["podMetricsEndpoints"][0]["relabelings"]}
    assert {"sglang_deployment", "sglang_replica", "sglang_node_rank"} <= targets


def test_worker_pod_labels_owner_gpus_probes() -> None:
    spec = spec_of({"model": {"path": "m"}, "parallelism": {"tp": 4}, "resources": {"sharedMemory": "32Gi"}})
    pod = worker_pod(spec, OWNER, "abc", replica=3, rank=0)
    labels = pod["metadata"]["labels"]
    assert pod["metadata"]["name"] == "demo-abc-3-0"
    assert {k: labels[k] for k in ("sglang.ai/deployment", "sglang.ai/replica", "sglang.ai/node-rank",
                                   "sglang.ai/revision")} == {"sglang.ai/deployment": "demo",
                                                              "sglang.ai/replica": "3", "sglang.ai/node-rank": "0",
                                                              "sglang.ai/revision": "abc"}  # fmt: skip
    assert labels["app.kubernetes.io/managed-by"] == "sglang-operator"
    assert pod["metadata"]["ownerReferences"][0]["uid"] == OWNER.uid
    container = pod["spec"]["containers"][0]
    assert container["resources"]["requests"] == container["resources"]["limits"] == {"nvidia.com/gpu": "4"}
    assert container["readinessProbe"]["httpGet"]["path"] == "/ready"
    assert container["readinessProbe"]["timeoutSeconds"] >= 25
    assert container["startupProbe"]["failureThreshold"] * container["startupProbe"]["periodSeconds"] >= 1800
    dshm = next(v for v in pod["spec"]["volumes"] if v["name"] == "dshm")
    assert dshm["emptyDir"] == {"medium": "Memory", "sizeLimit": "32Gi"}
    assert pod["spec"]["restartPolicy"] == "Always"


def test_hf_token_comes_from_the_secret() -> None:
    spec = spec_of({"model": {"path": "m", "tokenSecretRef": {"name": "hf", "key": "tok"}}})
    env = worker_pod(spec, OWNER, "r", 0, 0)["spec"]["containers"][0]["env"]
    assert {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "tok"}}} in env


def test_multinode_ranks_and_headless_service() -> None:
    spec = spec_of({"model": {"path": "m"}, "parallelism": {"tp": 16, "nnodes": 2}})
    objects = render_all(spec, OWNER)
    pods = [o for o in objects if o["kind"] == "Pod"]
    assert [p["metadata"]["labels"]["sglang.ai/node-rank"] for p in pods] == ["0", "1"]
    rank1 = pods[1]["spec"]
    assert rank1["restartPolicy"] == "Never"  # the operator restarts the whole replica
    assert rank1["subdomain"] == "demo-workers"
    assert rank1["containers"][0]["readinessProbe"]["httpGet"]["path"] == "/health"
    command = " ".join(rank1["containers"][0]["command"])
    assert f"--dist-init-addr {pods[0]['metadata']['name']}.demo-workers.team-a.svc:20000" in command
    service = next(o for o in objects if o["kind"] == "Service" and o["metadata"]["name"] == "demo-workers")
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"]


def test_router_command_has_policy_metrics_and_no_discovery() -> None:
    spec = spec_of({"model": {"path": "m"}, "router": {
        "policy": "least_load", "stickySessions": {"enabled": True, "headers": ["x-user"]},
        "apiKeySecretRef": {"name": "router-key"}}})  # fmt: skip
    deployment = next(o for o in render_all(spec, OWNER) if o["kind"] == "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    command = container["command"]
    assert command[:2] == ["smg", "launch"]
    assert command[command.index("--policy") + 1] == "least_load"
    assert command[command.index("--prometheus-port") + 1] == "29000"
    assert "--sticky-sessions" in command and command[command.index("--routing-key-headers") + 1] == "x-user"
    assert command[command.index("--api-key") + 1] == "$(SMG_API_KEY)"
    assert not any("discovery" in arg for arg in command)
    assert container["env"][0]["valueFrom"]["secretKeyRef"] == {"name": "router-key", "key": "token"}


def test_smg_takes_the_api_key_only_on_its_command_line() -> None:
    """Why `--api-key $(SMG_API_KEY)` stays in argv: the pinned smg reads the key from no variable and no file.
    When a release adds either, this fails: render that instead (render/router.py) and drop the key from argv."""
    import argparse

    from smg.router_args import RouterArgs

    parser = argparse.ArgumentParser()
    RouterArgs.add_cli_args(parser, use_router_prefix=False)
    options = {option: action for action in parser._actions for option in action.option_strings}
    assert options["--api-key"].default is None and parser.fromfile_prefix_chars is None
    assert not [o for o in options if "api-key" in o and ("file" in o or "env" in o or "path" in o)]


def test_router_disabled_renders_no_router() -> None:
    objects = render_all(spec_of({"model": {"path": "m"}, "router": {"enabled": False}}), OWNER)
    assert [o["kind"] for o in objects] == ["Pod"]


def test_template_overrides_merge() -> None:
    spec = spec_of({"model": {"path": "m"}, "template": {
        "metadata": {"labels": {"team": "a"}, "annotations": {"note": "x"}},
        "spec": {"nodeSelector": {"pool": "h200"}, "tolerations": [{"operator": "Exists"}],
                 "containers": [{"name": "sglang", "env": [{"name": "NCCL_DEBUG", "value": "INFO"}]}]}}})  # fmt: skip
    pod = worker_pod(spec, OWNER, "r", 0, 0)
    assert pod["metadata"]["labels"]["team"] == "a" and pod["metadata"]["annotations"]["note"] == "x"
    assert pod["spec"]["nodeSelector"] == {"pool": "h200"}
    env_names = [e["name"] for e in pod["spec"]["containers"][0]["env"]]
    assert env_names[0] == "POD_NAME" and env_names[-1] == "NCCL_DEBUG"
    assert pod["spec"]["containers"][0]["command"][2] == "sglang.launch_server"


def test_revision_changes_only_with_pod_shaping_fields() -> None:
    base = {"model": {"path": "m"}}
    reference = revision_hash(spec_of(base))
    assert revision_hash(spec_of({**base, "replicas": 7, "router": {"policy": "random"}})) == reference
    assert revision_hash(spec_of({**base, "engine": {"args": ["--x"]}})) != reference
    assert revision_hash(spec_of({**base, "parallelism": {"tp": 2}})) != reference
