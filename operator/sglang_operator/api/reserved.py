"""What the operator owns inside a tenant's free-form lists: launch flags, env names, label and annotation keys.

A flag in `engine.args` that the operator also sets from a typed field (`--tp-size`, `--port`, `--model-path`) would
either contradict the field (argparse keeps the last value: the pod then serves another model or shape than status
says) or bypass its validation; `--api-key` would put a secret in the pod spec; `--config` could set any of them.
SGLang's and smg's parsers accept unique prefixes (argparse `allow_abbrev`), so an argument is refused when it is a
prefix of an owned flag, not only when it equals one. Env names the operator sets are refused the same way, and so
are the operator's `sglang.ai/` label and annotation keys, which drive drains and replica bookkeeping.

The kubelet expands `$(VAR)` in a container's command, args and env values with that container's environment, so a
tenant string that lands there could assemble an owned flag (`env X=--host`, `args: ["$(X)"]`) or copy a Secret the
operator put in the environment (`model.path: $(HF_TOKEN)`). `EXPANSION` is refused in every such string
(`tenant_rules`), and `kubelet_literal` escapes it in what the renderer writes, for CRs stored before that rule.
"""

import re
from collections.abc import Iterable

from .constants import GROUP

# flag -> the spec field that sets it (or why none may)
ENGINE_FLAGS: dict[str, str] = {
    "--model-path": "model.path",
    "--model": "model.path",
    "--served-model-name": "model.servedName",
    "--revision": "model.revision",
    "--trust-remote-code": "model.trustRemoteCode",
    "--host": "the operator (0.0.0.0)",
    "--port": "engine.port",
    "--tp-size": "parallelism.tp",
    "--tensor-parallel-size": "parallelism.tp",
    "--dp-size": "parallelism.dp",
    "--data-parallel-size": "parallelism.dp",
    "--attn-dp-size": "parallelism.attentionDP",
    "--attention-data-parallel-size": "parallelism.attentionDP",
    "--enable-dp-attention": "parallelism.attentionDP",
    "--ep-size": "parallelism.ep",
    "--expert-parallel-size": "parallelism.ep",
    "--pp-size": "nothing (pipeline parallelism is not supported)",
    "--pipeline-parallel-size": "nothing (pipeline parallelism is not supported)",
    "--moe-a2a-backend": "parallelism.moeA2ABackend",
    "--enable-dp-lm-head": "parallelism.dpLmHead",
    "--nnodes": "parallelism.nnodes",
    "--node-rank": "parallelism.nnodes",
    "--dist-init-addr": "parallelism.nnodes",
    "--nccl-init-addr": "parallelism.nnodes",
    "--max-running-requests": "engine.maxRunningRequests",
    "--mem-fraction-static": "engine.memFractionStatic",
    "--context-length": "engine.contextLength",
    "--enable-metrics": "the operator (always on)",
    "--api-key": "engine.apiKeySecretRef (a key in args is visible in the pod spec)",
    "--admin-api-key": "nothing yet (a key in args is visible in the pod spec)",
    "--config": "nothing (a config file could set every other owned flag)",
    "--disaggregation-mode": "workerGroups[].role",
    "--disaggregation-transfer-backend": "disaggregation.transferBackend",
    "--disaggregation-bootstrap-port": "disaggregation.bootstrapPort",
    "--disaggregation-ib-device": "disaggregation.ibDevice",
    "--disaggregation-decode-allocation-policy": "disaggregation.decodeAllocationPolicy",
    "--disaggregation-decode-tp": "the decode groups' parallelism (SGLang 0.5.9)",
    "--disaggregation-decode-dp": "the decode groups' parallelism (SGLang 0.5.9)",
    "--disaggregation-prefill-pp": "nothing (pipeline parallelism is not supported)",
}

ROUTER_FLAGS: dict[str, str] = {
    "--host": "the operator (0.0.0.0)",
    "--port": "router.port",
    "--policy": "router.policy",
    "--prometheus-host": "the operator (0.0.0.0)",
    "--prometheus-port": "router.metricsPort",
    "--api-key": "router.apiKeySecretRef",
    "--worker-urls": "the operator (it registers every ready worker)",
    "--service-discovery": "the operator (it registers every ready worker)",
    "--service-discovery-namespace": "the operator (it registers every ready worker)",
    "--service-discovery-port": "the operator (it registers every ready worker)",
    "--discovery-provider": "the operator (it registers every ready worker)",
    "--discovery-file": "the operator (it registers every ready worker)",
    "--selector": "the operator (it registers every ready worker)",
    "--router-selector": "the operator (it registers every ready worker)",
    "--prefill-selector": "the operator (it registers every ready worker)",
    "--decode-selector": "the operator (it registers every ready worker)",
    "--encode-selector": "the operator (it registers every ready worker)",
    "--control-plane-api-keys": "the operator (it registers workers through the control plane)",
    "--sticky-sessions": "router.stickySessions.enabled",
    "--routing-key-headers": "router.stickySessions.headers",
    "--health-check-interval-secs": "the operator",
    "--health-failure-threshold": "the operator",
    "--health-success-threshold": "the operator",
    "--worker-startup-check-interval": "the operator",
    "--pd-disaggregation": "disaggregation",
    "--prefill": "the operator (it registers every ready prefill worker)",
    "--decode": "the operator (it registers every ready decode worker)",
    "--prefill-policy": "router.prefillPolicy",
    "--decode-policy": "router.decodePolicy",
}

WORKER_API_KEY_ENV = "SGLANG_OPERATOR_API_KEY"
"""Carries engine.apiKeySecretRef into the worker's launcher (`render.workers`), which moves it into SGLang's argv."""
ROUTER_API_KEY_ENV = "SMG_API_KEY"
"""Carries router.apiKeySecretRef into the router's `--api-key $(SMG_API_KEY)`. The router container has no tenant
env (no `router.env`, and the template applies to workers only), so nothing can shadow it."""

ENGINE_ENV: dict[str, str] = {
    "POD_NAME": "the operator",
    "POD_NAMESPACE": "the operator",
    "POD_IP": "the operator",
    "HF_HOME": "model.cache.mountPath",
    "HF_TOKEN": "model.tokenSecretRef",
    "HUGGING_FACE_HUB_TOKEN": "model.tokenSecretRef",
    # A duplicate later in the list wins: the workers would run without the Secret's key, or with one the tenant
    # knows, while the operator and the routers send the Secret's.
    WORKER_API_KEY_ENV: "engine.apiKeySecretRef",
}

RESERVED_KEY_PREFIX = f"{GROUP}/"
# Annotations that loosen a pod's confinement (AppArmor is still honoured from annotations; Pod Security baseline
# forbids "unconfined"); the operator sets the pod's security itself.
SECURITY_ANNOTATION_PREFIXES = (
    "container.apparmor.security.beta.kubernetes.io/",
    "seccomp.security.alpha.kubernetes.io/",
    "container.seccomp.security.alpha.kubernetes.io/",
)
# Volumes and containers the renderer owns in every worker pod; a template entry of the same name would merge into
# or replace them.
RESERVED_VOLUMES = ("dshm", "model-cache")
MAIN_CONTAINER = "sglang"
# What a template may add to the main container; its image, command and ports come from the engine section.
MAIN_CONTAINER_FIELDS = ("name", "env", "envFrom", "volumeMounts", "resources")


def owned_flag(arg: str, owned: Iterable[str]) -> str | None:
    """The owned flag `arg` names, exactly or as an argparse prefix (`--tp` for `--tp-size`); None if none."""
    flag = arg.split("=", 1)[0]
    if not flag.startswith("--") or len(flag) < 3:
        return None
    return next((name for name in owned if name.startswith(flag)), None)


def owned_flag_cel(path: str, owned: Iterable[str]) -> str:
    """CEL twin of `owned_flag` over the list at `path`: no element names an owned flag. An empty list has no CRD
    default, so the field may be absent."""
    names = ", ".join(f"'{name}'" for name in sorted(owned))
    return (
        f"!has({path}) || {path}.all(a, !a.startsWith('--') || size(a.split('=')[0]) < 3 || "
        f"![{names}].exists(f, f.startsWith(a.split('=')[0])))"
    )


def describe(owned: dict[str, str]) -> str:
    """`--port: engine.port; ...`, grouped by field, for the rule's message."""
    by_field: dict[str, list[str]] = {}
    for flag, field in owned.items():
        by_field.setdefault(field, []).append(flag)
    return "; ".join(f"{'/'.join(flags)}: {field}" for field, flags in by_field.items())


EXPANSION = "$("
"""What starts a variable reference the kubelet expands (`$(NAME)`) in command, args and env values."""
_EXPANSION_RUN = re.compile(r"(\$+)\(")


def kubelet_literal(text: str) -> str:
    """`text` written so that the kubelet's expansion gives `text` back: each run of `$` before a `(` is doubled
    (the kubelet turns `$$` into `$` and expands `$(NAME)`). A string without `$(` is returned unchanged, so no
    rendered object of a spec without one changes, and its `$$`, which the kubelet reads as `$`, keeps meaning what
    it meant."""
    return _EXPANSION_RUN.sub(lambda match: match.group(1) * 2 + "(", text)
