"""The Helm chart: it lints, renders objects a 1.34 API server accepts, grants exactly the permissions the
operator uses (no more, no wildcards), runs two replicas with leader election and exposes the operator's metrics
by default, and `manifests/install.yaml` is its default rendering.

`helm` is built from Go modules on first use (`localcluster.helm`, a few minutes cold, cached in e2e/.bin).
"""

from __future__ import annotations

import importlib.metadata
import subprocess
from collections import defaultdict
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from localcluster.helm import CHART_DIR, INSTALL_MANIFEST, ensure_helm, helm_template, install_manifest
from sglang_operator.api.constants import CRD_NAME
from sglang_operator.api.spec import EXTENDED_RESOURCE, RDMA_BACKENDS, DisaggregationSpec
from sglang_operator.cli import build_parser, leader_timing
from sglang_operator.runtime.leasetiming import Timing
from sglang_operator.settings import (
    ENV_OPERATOR_NAMESPACE,
    ENV_OPERATOR_POD_LABELS,
    ENV_PROMETHEUS_POD_LABELS,
    load_settings,
)

KUBE_VERSION = "1.34.0"
CRD_FILE = "sglang.ai_sglangdeployments.yaml"
REPO_ROOT = CHART_DIR.parent.parent

# Every (apiGroup, resource) the operator calls and the verbs it uses: runtime/writer.py and reconcile.py
# (pods list/create/patch/delete; services, deployments, the PodMonitor, the NetworkPolicy and the InferencePool
# get/create/patch and delete once no longer rendered; the Secrets a CR names get; events; the CR get and its status
# patch) and kopf (watches pods, services, deployments, PodMonitors, NetworkPolicies and InferencePools for the
# indexes reconcile reads, and the CR; patches the CR's finalizer and annotations, posts events, watches CRDs for its
# resource discovery).
NAMESPACED_PERMISSIONS: dict[tuple[str, str], set[str]] = {
    ("", "pods"): {"list", "watch", "create", "patch", "delete"},
    ("", "services"): {"list", "watch", "get", "create", "patch", "delete"},
    ("apps", "deployments"): {"list", "watch", "get", "create", "patch", "delete"},
    ("apps", "replicasets"): {"get"},  # a router pod's ReplicaSet: is it the slot Deployment's own (by uid)?
    ("", "secrets"): {"get"},
    ("", "events"): {"create"},
    ("sglang.ai", "sglangdeployments"): {"get", "list", "watch", "patch"},
    ("sglang.ai", "sglangdeployments/status"): {"patch"},
    ("sglang.ai", "sglangworkergroups"): {"get", "list", "watch"},
    ("sglang.ai", "sglangworkergroups/status"): {"patch"},
    ("monitoring.coreos.com", "podmonitors"): {"list", "watch", "get", "create", "patch", "delete"},
    ("networking.k8s.io", "networkpolicies"): {"list", "watch", "get", "create", "patch", "delete"},
    ("inference.networking.k8s.io", "inferencepools"): {"list", "watch", "get", "create", "patch", "delete"},
}
CLUSTER_PERMISSIONS: dict[tuple[str, str], set[str]] = {
    ("apiextensions.k8s.io", "customresourcedefinitions"): {"list", "watch"},
}
# kopf follows the namespaces it watches when it does not watch the whole cluster.
NAMESPACE_WATCH: dict[tuple[str, str], set[str]] = {("", "namespaces"): {"list", "watch"}}
# runtime/leader.py: read the Lease, create it once, replace it with the resourceVersion read; a standby watches it
# (runtime/leasewatch.py).
LEASE_PERMISSIONS: dict[tuple[str, str], set[str]] = {
    ("coordination.k8s.io", "leases"): {"get", "list", "watch", "create", "update"}
}
# Objects of CRDs that kubernetes-validate has no schema for.
NOT_BUILT_IN = ("monitoring.coreos.com/",)


@pytest.fixture(scope="module")
def helm() -> Path:
    return ensure_helm()


def render(helm: Path, *args: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(helm_template(helm, *args)) if doc]


def by_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [obj for obj in objects if obj["kind"] == kind]


def grants(role: dict[str, Any]) -> dict[tuple[str, str], set[str]]:
    granted: dict[tuple[str, str], set[str]] = defaultdict(set)
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                granted[(group, resource)] |= set(rule["verbs"])
    return dict(granted)


def operator_container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    (deployment,) = by_kind(objects, "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return dict(container)


VARIANTS = {
    "defaults": [],
    "everything-set": [
        "--set-json", 'watchNamespaces=["team-a","team-b"]',
        "--set", "prometheusURL=http://prometheus.monitoring.svc:9090",
        "--set", "prometheusBearerTokenFile=/var/run/secrets/kubernetes.io/serviceaccount/token",
        "--set", "prometheusCAFile=/etc/prometheus-ca/ca.crt",
        "--set", "allowPrometheusHeadersToDefault=true",
        "--set", "verbose=true",
        "--set", "health.enabled=true",
        "--set", "priorityClassName=system-cluster-critical",
        "--set-json", 'nodeSelector={"node-role.kubernetes.io/control-plane":""}',
        "--set-json", 'tolerations=[{"key":"dedicated","operator":"Exists","effect":"NoSchedule"}]',
        "--set-json", 'affinity={"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":'
        '[{"matchExpressions":[{"key":"kubernetes.io/os","operator":"In","values":["linux"]}]}]}}}',
        "--set-json", 'imagePullSecrets=[{"name":"registry"}]',
        "--set-json", 'extraEnv=[{"name":"TZ","value":"UTC"}]',
        "--set", "image.tag=0.2.0",
        "--set-json", 'podPolicy.allowedHostPaths=["/models","/mnt/hf cache"]',
        "--set", "podPolicy.rdmaResource=rdma/rdma_shared_device_a",
        "--set-json", 'allowedPrometheusURLs=["http://prometheus.monitoring.svc:9090","https://thanos.example:9091/"]',
        "--set-json", 'networkPolicy.prometheus.namespaceLabels={"kubernetes.io/metadata.name":"monitoring"}',
        "--set-json", 'networkPolicy.prometheus.podLabels={"app.kubernetes.io/name":"prometheus","team":"obs"}',
        "--set", "metrics.port=9100",
        "--set", "metrics.serviceMonitor.enabled=true",
        "--set-json", 'metrics.serviceMonitor.labels={"release":"kube-prometheus"}',
        "--set", "replicas=3",
        "--set", "leaderElection.leaseDurationSeconds=20",
        "--set", "leaderElection.renewDeadlineSeconds=15.5",
        "--set", "leaderElection.renewIntervalSeconds=5",
        "--set", "leaderElection.retryPeriodSeconds=2",
    ],
    "single-no-election-no-metrics": ["--set", "replicas=1", "--set", "leaderElection.enabled=false",
                                      "--set", "metrics.enabled=false"],
    "bring-your-own-account": ["--set", "serviceAccount.create=false", "--set", "serviceAccount.name=ops",
                               "--set", "rbac.create=false"],
}  # fmt: skip


def test_chart_lints(helm: Path) -> None:
    proc = subprocess.run([str(helm), "lint", "--strict", str(CHART_DIR)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_chart_versions_follow_the_package() -> None:
    chart = yaml.safe_load((CHART_DIR / "Chart.yaml").read_text())
    package = importlib.metadata.version("sglang-operator")
    assert (chart["apiVersion"], chart["version"], chart["appVersion"]) == ("v2", package, package)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_rendered_objects_are_valid_kubernetes(helm: Path, variant: str) -> None:
    objects = render(helm, "--include-crds", *VARIANTS[variant])
    assert by_kind(objects, "Deployment") and by_kind(objects, "CustomResourceDefinition")
    for obj in objects:
        if not obj["apiVersion"].startswith(NOT_BUILT_IN):
            kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)


def test_default_deployment_runs_the_operator_image_locked_down(helm: Path) -> None:
    objects = render(helm)
    (deployment,) = by_kind(objects, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    container = operator_container(objects)
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    assert container["image"] == "ghcr.io/sglang-operator/sglang-operator:0.1.0"
    assert (container["command"], container["args"]) == (
        ["sglang-operator"],
        [
            "run",
            "--operator-namespace=sglang-operator",
            "--operator-pod-labels=app.kubernetes.io/instance=sglang-operator,app.kubernetes.io/name=sglang-operator",
            "--liveness=http://0.0.0.0:8080/healthz",
            "--leader-elect",
            "--leader-election-namespace=sglang-operator",
            "--leader-election-name=sglang-operator-leader",
            "--leader-election-lease-duration=13",
            "--leader-election-renew-deadline=11",
            "--leader-election-renew-interval=7",
            "--leader-election-retry-period=1",
            "--metrics-port=8081",
            "--metrics-address=0.0.0.0",
        ],
    )
    assert pod["serviceAccountName"] == "sglang-operator"
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}


def test_values_reach_the_command_line(helm: Path) -> None:
    container = operator_container(render(helm, *VARIANTS["everything-set"]))
    assert container["image"] == "ghcr.io/sglang-operator/sglang-operator:0.2.0"
    assert container["args"] == [
        "run",
        "--namespace=team-a",
        "--namespace=team-b",
        "--prometheus-url=http://prometheus.monitoring.svc:9090",
        "--prometheus-bearer-token-file=/var/run/secrets/kubernetes.io/serviceaccount/token",
        "--prometheus-ca-file=/etc/prometheus-ca/ca.crt",
        "--allow-prometheus-headers-to-default",
        "--rdma-resource=rdma/rdma_shared_device_a",
        "--allow-host-path=/models",
        "--allow-host-path=/mnt/hf cache",
        "--allow-prometheus-url=http://prometheus.monitoring.svc:9090",
        "--allow-prometheus-url=https://thanos.example:9091/",
        "--operator-namespace=sglang-operator",
        "--operator-pod-labels=app.kubernetes.io/instance=sglang-operator,app.kubernetes.io/name=sglang-operator",
        "--prometheus-namespace-labels=kubernetes.io/metadata.name=monitoring",
        "--prometheus-pod-labels=app.kubernetes.io/name=prometheus,team=obs",
        "--verbose",
        "--liveness=http://0.0.0.0:8080/healthz",
        "--leader-elect",
        "--leader-election-namespace=sglang-operator",
        "--leader-election-name=sglang-operator-leader",
        "--leader-election-lease-duration=20",
        "--leader-election-renew-deadline=15.5",
        "--leader-election-renew-interval=5",
        "--leader-election-retry-period=2",
        "--metrics-port=9100",
        "--metrics-address=0.0.0.0",
    ]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}


def test_network_policy_peers_name_the_operators_own_pods(helm: Path) -> None:
    """The operator's namespace and pod labels the chart passes select exactly its pod, as settings parse them."""
    objects = render(helm, *VARIANTS["everything-set"])
    (deployment,) = by_kind(objects, "Deployment")
    flags = dict(
        arg.split("=", 1) for arg in operator_container(objects)["args"] if arg.startswith("--") and "=" in arg
    )
    settings = load_settings({
        ENV_OPERATOR_NAMESPACE: flags["--operator-namespace"],
        ENV_OPERATOR_POD_LABELS: flags["--operator-pod-labels"],
        ENV_PROMETHEUS_POD_LABELS: flags["--prometheus-pod-labels"],
    })  # fmt: skip
    assert settings.network.operator_namespace == deployment["metadata"]["namespace"]
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert dict(settings.network.operator_pod_labels) == deployment["spec"]["selector"]["matchLabels"]
    assert settings.network.operator_pod_labels.items() <= pod_labels.items()
    assert dict(settings.network.prometheus_pod_labels) == {"app.kubernetes.io/name": "prometheus", "team": "obs"}


def test_clusterwide_rbac_grants_exactly_what_the_operator_uses(helm: Path) -> None:
    objects = render(helm)
    roles = {role["metadata"]["name"]: grants(role) for role in by_kind(objects, "ClusterRole")}
    assert roles == {"sglang-operator": NAMESPACED_PERMISSIONS, "sglang-operator-cluster": CLUSTER_PERMISSIONS}
    bound = {b["roleRef"]["name"]: b["subjects"] for b in by_kind(objects, "ClusterRoleBinding")}
    subject = [{"kind": "ServiceAccount", "name": "sglang-operator", "namespace": "sglang-operator"}]
    assert bound == {"sglang-operator": subject, "sglang-operator-cluster": subject}
    assert [b["roleRef"]["name"] for b in by_kind(objects, "RoleBinding")] == ["sglang-operator-leader-election"]


def test_rbac_has_no_wildcards_in_any_variant(helm: Path) -> None:
    for args in VARIANTS.values():
        objects = render(helm, *args)
        for role in by_kind(objects, "ClusterRole") + by_kind(objects, "Role"):
            for rule in role["rules"]:
                for key in ("apiGroups", "resources", "verbs"):
                    assert "*" not in rule[key], (role["metadata"]["name"], rule)
                assert "resourceNames" not in rule and "nonResourceURLs" not in rule


def test_watch_namespaces_grant_namespaced_permissions_only_there(helm: Path) -> None:
    objects = render(helm, *VARIANTS["everything-set"])
    roles = {role["metadata"]["name"]: grants(role) for role in by_kind(objects, "ClusterRole")}
    assert roles["sglang-operator-cluster"] == {**CLUSTER_PERMISSIONS, **NAMESPACE_WATCH}
    assert [b["roleRef"]["name"] for b in by_kind(objects, "ClusterRoleBinding")] == ["sglang-operator-cluster"]
    role_bindings = [b for b in by_kind(objects, "RoleBinding") if b["roleRef"]["kind"] == "ClusterRole"]
    assert sorted(b["metadata"]["namespace"] for b in role_bindings) == ["team-a", "team-b"]
    assert {b["roleRef"]["name"] for b in role_bindings} == {"sglang-operator"}


def test_without_rbac_and_service_account_no_account_or_permission_renders(helm: Path) -> None:
    objects = render(helm, *VARIANTS["bring-your-own-account"])
    admission = ("ConfigMap", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")  # no permission
    kinds = sorted(obj["kind"] for obj in objects if obj["kind"] not in admission)
    assert kinds == ["Deployment", "PodDisruptionBudget", "Service"]
    assert by_kind(objects, "Deployment")[0]["spec"]["template"]["spec"]["serviceAccountName"] == "ops"


def test_leader_election_lease_rbac_is_namespaced_to_the_release(helm: Path) -> None:
    """The Lease permissions are a Role in the release namespace (never a ClusterRole: no other namespace's
    Leases, kube-node-lease's included), bound to the operator's account, with exactly the verbs leader.py uses."""
    for variant in ("defaults", "everything-set"):
        objects = render(helm, *VARIANTS[variant])
        (role,) = by_kind(objects, "Role")
        assert (role["metadata"]["name"], role["metadata"]["namespace"]) == (
            "sglang-operator-leader-election",
            "sglang-operator",
        )
        assert grants(role) == LEASE_PERMISSIONS
        for cluster_role in by_kind(objects, "ClusterRole"):
            assert ("coordination.k8s.io", "leases") not in grants(cluster_role)
        (binding,) = [b for b in by_kind(objects, "RoleBinding") if b["roleRef"]["kind"] == "Role"]
        assert binding["metadata"]["namespace"] == "sglang-operator"
        assert binding["roleRef"]["name"] == "sglang-operator-leader-election"
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "sglang-operator", "namespace": "sglang-operator"}
        ]
    assert not by_kind(render(helm, *VARIANTS["single-no-election-no-metrics"]), "Role")


def test_two_replicas_spread_over_nodes_with_a_disruption_budget(helm: Path) -> None:
    objects = render(helm)
    (deployment,) = by_kind(objects, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    selector = deployment["spec"]["selector"]["matchLabels"]
    (preferred,) = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert preferred["podAffinityTerm"] == {
        "topologyKey": "kubernetes.io/hostname",
        "labelSelector": {"matchLabels": selector},
    }
    (pdb,) = by_kind(objects, "PodDisruptionBudget")
    assert pdb["spec"] == {"minAvailable": 1, "selector": {"matchLabels": selector}}
    env = {
        e["name"]: e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
        for e in operator_container(objects)["env"]
    }
    assert (env["POD_NAME"], env["POD_NAMESPACE"]) == ("metadata.name", "metadata.namespace")
    # The user's own affinity is kept, and the spread is added beside it unless they set a podAntiAffinity.
    affinity = by_kind(render(helm, *VARIANTS["everything-set"]), "Deployment")[0]["spec"]["template"]["spec"][
        "affinity"
    ]
    assert set(affinity) == {"nodeAffinity", "podAntiAffinity"}
    own = '{"podAntiAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":[{"topologyKey":"zone"}]}}'
    mine = by_kind(render(helm, "--set-json", f"affinity={own}"), "Deployment")[0]["spec"]["template"]["spec"]
    assert list(mine["affinity"]["podAntiAffinity"]) == ["requiredDuringSchedulingIgnoredDuringExecution"]


def test_one_replica_needs_no_budget_or_spread_and_more_need_leader_election(helm: Path) -> None:
    objects = render(helm, "--set", "replicas=1")
    assert not by_kind(objects, "PodDisruptionBudget")
    assert "affinity" not in by_kind(objects, "Deployment")[0]["spec"]["template"]["spec"]
    assert "--leader-elect" in operator_container(objects)["args"]
    single = render(helm, *VARIANTS["single-no-election-no-metrics"])
    assert by_kind(single, "Deployment")[0]["spec"]["strategy"] == {"type": "Recreate"}
    assert not [a for a in operator_container(single)["args"] if a.startswith(("--leader", "--metrics"))]
    with pytest.raises(RuntimeError, match=r"replicas > 1 needs leaderElection\.enabled"):
        render(helm, "--set", "replicas=2", "--set", "leaderElection.enabled=false")


@pytest.mark.parametrize(
    "bad",
    [
        ["leaderElection.renewDeadlineSeconds=13"],  # the deadline must end before the Lease does
        ["leaderElection.renewIntervalSeconds=11"],  # a renewal must come before the deadline
        ["leaderElection.retryPeriodSeconds=0"],
        ["leaderElection.retryPeriodSeconds=8"],  # a retry slower than the renewal
    ],
)
def test_leader_election_timing_that_allows_two_leaders_fails_the_render(helm: Path, bad: list[str]) -> None:
    with pytest.raises(RuntimeError, match=r"leaderElection needs 0 < retryPeriodSeconds <= renewIntervalSeconds"):
        render(helm, *[arg for value in bad for arg in ("--set", value)])


@pytest.mark.parametrize("variant", ["default", "everything-set"])
def test_the_command_line_accepts_the_rendered_arguments(helm: Path, variant: str) -> None:
    """The chart's values reach the same Timing the operator builds (and checks) from its flags."""
    args = operator_container(render(helm, *VARIANTS.get(variant, [])))["args"]
    expected = Timing() if variant == "default" else Timing(20, 15.5, 5.0, 2.0)
    assert leader_timing(build_parser().parse_args(args)) == expected


def test_metrics_service_scrape_annotations_and_service_monitor(helm: Path) -> None:
    objects = render(helm, "--set-json", 'podAnnotations={"team":"ml"}')
    (deployment,) = by_kind(objects, "Deployment")
    template = deployment["spec"]["template"]
    assert template["metadata"]["annotations"] == {
        "team": "ml",
        "prometheus.io/scrape": "true",
        "prometheus.io/port": "8081",
        "prometheus.io/path": "/metrics",
    }
    container = operator_container(objects)
    assert {"name": "metrics", "containerPort": 8081, "protocol": "TCP"} in container["ports"]
    (service,) = by_kind(objects, "Service")
    assert service["metadata"]["name"] == "sglang-operator-metrics"
    assert service["spec"]["ports"] == [{"name": "metrics", "port": 8081, "targetPort": "metrics", "protocol": "TCP"}]
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert not by_kind(objects, "ServiceMonitor")  # off by default: the CRD may not exist

    objects = render(helm, *VARIANTS["everything-set"])
    (service,) = by_kind(objects, "Service")
    (monitor,) = by_kind(objects, "ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus"
    assert monitor["spec"]["endpoints"] == [{"port": "metrics", "path": "/metrics", "interval": "30s"}]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["sglang-operator"]}

    off = render(helm, *VARIANTS["single-no-election-no-metrics"])
    assert not by_kind(off, "Service") and not by_kind(off, "ServiceMonitor")
    assert "annotations" not in by_kind(off, "Deployment")[0]["spec"]["template"]["metadata"]
    assert "ports" in operator_container(off)  # health only
    assert [p["name"] for p in operator_container(off)["ports"]] == ["health"]
    assert not by_kind(
        render(helm, "--set", "metrics.enabled=false", "--set", "metrics.serviceMonitor.enabled=true"), "ServiceMonitor"
    )


def test_install_manifest_is_the_default_rendering(helm: Path) -> None:
    assert INSTALL_MANIFEST.read_text() == install_manifest(helm), "manifests/install.yaml is stale: make manifests"
    documents = [doc for doc in yaml.safe_load_all(INSTALL_MANIFEST.read_text()) if doc]
    for doc in documents:
        kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)
    kinds = [doc["kind"] for doc in documents]
    assert kinds[:2] == ["Namespace", "CustomResourceDefinition"]
    assert {
        "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Deployment", "Service",
        "PodDisruptionBudget",
    } <= set(kinds)  # fmt: skip


def test_chart_crd_is_the_generated_crd() -> None:
    chart_crd = CHART_DIR / "crds" / CRD_FILE
    assert chart_crd.read_bytes() == (REPO_ROOT / "crds" / CRD_FILE).read_bytes()
    assert yaml.safe_load(chart_crd.read_text())["metadata"]["name"] == CRD_NAME


def _admission_policy(objects: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(the parameter ConfigMap, the ValidatingAdmissionPolicy, its binding) of a rendering."""
    [params] = [cm for cm in by_kind(objects, "ConfigMap") if cm["metadata"]["name"].endswith("-tenant-policy")]
    [policy] = by_kind(objects, "ValidatingAdmissionPolicy")
    [binding] = by_kind(objects, "ValidatingAdmissionPolicyBinding")
    return params, policy, binding


def test_admission_policy_parameters_are_the_operators_own_flags(helm: Path) -> None:
    """The policy judges with the very values the operator gets as `--allow-host-path` / `--allow-prometheus-url` /
    `--rdma-resource`, and in namespaced mode only where the operator watches."""
    objects = render(helm, *VARIANTS["everything-set"])
    params, policy, binding = _admission_policy(objects)
    args = operator_container(objects)["args"]

    def flag(name: str) -> list[str]:
        return [arg.split("=", 1)[1] for arg in args if arg.startswith(f"--{name}=")]

    assert params["data"]["allowedHostPaths"].split(",") == flag("allow-host-path") == ["/models", "/mnt/hf cache"]
    assert params["data"]["allowedPrometheusURLs"].split(",") == flag("allow-prometheus-url")
    assert [params["data"]["rdmaResource"]] == flag("rdma-resource") == ["rdma/rdma_shared_device_a"]
    assert policy["spec"]["paramKind"] == {"apiVersion": "v1", "kind": "ConfigMap"}
    assert policy["spec"]["failurePolicy"] == "Fail"
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert binding["spec"]["paramRef"] == {
        "name": params["metadata"]["name"], "namespace": params["metadata"]["namespace"],
        "parameterNotFoundAction": "Deny",
    }  # fmt: skip
    assert binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"] == [
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["team-a", "team-b"]}
    ]


def test_admission_policy_by_default_refuses_every_host_path_and_prometheus_url_cluster_wide(helm: Path) -> None:
    params, policy, binding = _admission_policy(render(helm))
    assert params["data"] == {"allowedHostPaths": "", "allowedPrometheusURLs": "", "rdmaResource": ""}
    assert not [arg for arg in operator_container(render(helm))["args"] if arg.startswith("--rdma-resource")]
    assert "matchResources" not in binding["spec"]
    [rule] = policy["spec"]["matchConstraints"]["resourceRules"]
    assert (rule["apiGroups"], rule["resources"], rule["operations"]) == (
        ["sglang.ai"], ["sglangdeployments"], ["CREATE", "UPDATE"],
    )  # fmt: skip
    # metadata-only writes (the operator's finalizers) on a CR stored before the policy are never refused
    assert [c["expression"] for c in policy["spec"]["matchConditions"]] == [
        "request.operation == 'CREATE' || oldObject.spec != object.spec"
    ]
    messages = [v["messageExpression"] for v in policy["spec"]["validations"]]
    assert messages[0].startswith("'spec.model.cache.hostPath: ' + variables.hostPath + ' is not under a node")
    assert messages[1].startswith("'spec.autoscaling.prometheusURL: is not a Prometheus the operator allows")
    assert messages[2].startswith("'spec.disaggregation.transferBackend: ' + variables.transferBackend + ' moves KV")


def test_admission_policy_rdma_rule_reads_the_operators_backends_and_resource_names(helm: Path) -> None:
    """The RDMA rule's CEL spells out what `check_pod_policy` imports: the RDMA backends, the CRD's default backend
    and the extended resource name `settings.py` accepts as `--rdma-resource` (anything else is none to it)."""
    _, policy, _ = _admission_policy(render(helm))
    variables = {v["name"]: v["expression"] for v in policy["spec"]["variables"]}
    default = DisaggregationSpec.model_fields["transfer_backend"].default
    assert f": '{default}') : ''" in variables["transferBackend"]
    assert f".matches('{EXTENDED_RESOURCE}')" in variables["rdmaAllowed"]
    assert policy["spec"]["validations"][2]["expression"] == (
        f"!(variables.transferBackend in {sorted(RDMA_BACKENDS)!r}) || variables.rdmaAllowed"
    )


def test_admission_policy_can_be_left_out(helm: Path) -> None:
    objects = render(helm, "--set", "admissionPolicy.enabled=false")
    assert not [o for o in objects if o["kind"].startswith("ValidatingAdmissionPolicy")]
    assert not [o for o in by_kind(objects, "ConfigMap") if o["metadata"]["name"].endswith("-tenant-policy")]
