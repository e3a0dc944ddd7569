"""The smg router: a Deployment running `smg launch` and its Service.

No `--service-discovery`: the operator is the only source of membership and registers workers through the
router's REST API. Health checks are frequent so a dead worker leaves rotation within seconds even before the
operator deregisters it. The pod meets Pod Security "restricted": a fixed non-root user, read-only root, no
capabilities, seccomp RuntimeDefault, no service-account token (membership comes from the operator, not the API).

Routing defaults come from `bench/routing.py` (docs/routing.md): worker loads are polled every second instead of
smg's 10 s, because cache_aware (the default policy) sends each request without a cached prefix to the worker with
the least expected wait as of the last poll, and with 10 s polls a whole interval's misses pile onto one worker.
The cache-aware thresholds stay smg's own: no tuned value beat them. `router.args` come last and override both.
"""

from typing import Any

from .. import names
from ..api.constants import ANNOTATION_KV_EPOCH, ANNOTATION_KV_EPOCH_SINCE, COMPONENT_ROUTER, LABEL_KV_EPOCH
from ..api.reserved import ROUTER_API_KEY_ENV, kubelet_literal
from ..api.spec import SGLangDeploymentSpec
from ..kvepoch import Cutover
from .meta import Owner, child_labels, object_meta, scrape_annotations, selector_labels
from .podsecurity import harden_pod_spec, router_container_security_context, router_pod_security_context

CONTAINER_NAME = "smg"
API_KEY_ENV = ROUTER_API_KEY_ENV
TMP_VOLUME = "tmp"
TMP_SIZE_LIMIT = "64Mi"
LOAD_MONITOR_INTERVAL_S = 1  # smg takes whole seconds; its default, 10, herds cache misses (docs/routing.md)


def router_command(spec: SGLangDeploymentSpec) -> list[str]:
    router = spec.router
    command = [
        "smg", "launch",
        "--host", "0.0.0.0",
        "--port", str(router.port),
        "--policy", router.policy,
        "--prometheus-host", "0.0.0.0",
        "--prometheus-port", str(router.metrics_port),
        "--health-check-interval-secs", "5",
        "--health-failure-threshold", "2",
        "--health-success-threshold", "1",
        "--worker-startup-check-interval", "2",
        "--load-monitor-interval", str(LOAD_MONITOR_INTERVAL_S),
        "--log-level", "info",
    ]  # fmt: skip
    if spec.disaggregated:
        # Started with no worker: the operator registers each prefill (with its bootstrap port) and each decode.
        command.append("--pd-disaggregation")
        if router.prefill_policy is not None:
            command += ["--prefill-policy", router.prefill_policy]
        if router.decode_policy is not None:
            command += ["--decode-policy", router.decode_policy]
    if router.sticky_sessions.enabled:
        command += ["--sticky-sessions", "--routing-key-headers", *router.sticky_sessions.headers]
    if router.api_key_secret_ref is not None:
        # smg 1.13.0 takes the key only as `--api-key VALUE`: its launcher (smg/router_args.py, `auth_group.
        # add_argument(f"--{prefix}api-key", type=str, default=None, ...)`) has no environment fallback and no
        # file flag, the parser sets no `fromfile_prefix_chars`, and the Rust core reads no SMG_*API_KEY variable.
        # So the key comes from the Secret as an env var and the kubelet expands `$(SMG_API_KEY)` into argv: it is
        # not in the stored pod spec, but it is in the process's command line (`ps`, /proc/<pid>/cmdline on the
        # node) and in the container runtime's config. Move it to an env var or file flag when smg offers one.
        command += ["--api-key", f"$({API_KEY_ENV})"]
    # The operator's own `$(SMG_API_KEY)` is the one reference the kubelet may expand here: the tenant's args are
    # written as literals (defence in depth for CRs stored before `tenant_rules` refused `$(` in router.args).
    return command + [kubelet_literal(arg) for arg in router.args]


def router_deployment(spec: SGLangDeploymentSpec, owner: Owner, cutover: Cutover | None = None) -> dict[str, Any]:
    """The router Deployment; a prefill/decode fleet's (`cutover`) in its slot, its pods labelled with the spec's KV
    epoch (the routers list only that epoch's workers)."""
    router = spec.router
    labels = child_labels(owner, COMPONENT_ROUTER)
    name, annotations = names.router(owner.name), None
    if cutover is not None:
        name, annotations = cutover.slot, {ANNOTATION_KV_EPOCH: cutover.desired}
        labels[LABEL_KV_EPOCH] = cutover.desired
    env: list[dict[str, Any]] = []
    if router.api_key_secret_ref is not None:
        ref = router.api_key_secret_ref
        env.append({"name": API_KEY_ENV, "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.key}}})
    container: dict[str, Any] = {
        "name": CONTAINER_NAME,
        "image": router.image,
        "command": router_command(spec),
        "ports": [
            {"name": "http", "containerPort": router.port, "protocol": "TCP"},
            {"name": "metrics", "containerPort": router.metrics_port, "protocol": "TCP"},
        ],
        # /health answers 200 with zero workers: the router is ready to be given workers, which is our job.
        "readinessProbe": {"httpGet": {"path": "/health", "port": router.port}, "periodSeconds": 2,
                           "timeoutSeconds": 5, "failureThreshold": 3},
        "livenessProbe": {"httpGet": {"path": "/liveness", "port": router.port}, "periodSeconds": 10,
                          "timeoutSeconds": 5, "failureThreshold": 3},
    }  # fmt: skip
    if env:
        container["env"] = env
    container["securityContext"] = router_container_security_context()
    # The root filesystem is read-only: smg 1.13.0 logs to stdout (no --log-dir) and, traced (strace) running as
    # 65532, writes only a probe file in /dev/shm (the container's own tmpfs, writable under a read-only root).
    # A small writable /tmp is there for anything a library puts there.
    container["volumeMounts"] = [{"name": TMP_VOLUME, "mountPath": "/tmp"}]
    pod_spec: dict[str, Any] = {
        "containers": [container],
        "terminationGracePeriodSeconds": 30,
        "securityContext": router_pod_security_context(),
        "volumes": [{"name": TMP_VOLUME, "emptyDir": {"sizeLimit": TMP_SIZE_LIMIT}}],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": object_meta(owner, name, labels, annotations),
        "spec": {
            "replicas": router.replicas,
            "selector": {"matchLabels": selector_labels(owner, COMPONENT_ROUTER)},
            "template": {
                "metadata": {"labels": labels, "annotations": scrape_annotations(router.metrics_port)},
                "spec": harden_pod_spec(pod_spec),
            },
        },
    }


def router_service(spec: SGLangDeploymentSpec, owner: Owner, cutover: Cutover | None = None) -> dict[str, Any]:
    """The fleet's endpoint; a prefill/decode fleet's (`cutover`) selects only the routers of the serving KV epoch,
    whichever slot runs them, so no client reaches a router of a generation that is not serving yet."""
    router = spec.router
    selector = selector_labels(owner, COMPONENT_ROUTER)
    annotations = None
    if cutover is not None:
        selector[LABEL_KV_EPOCH] = cutover.serving
        annotations = {ANNOTATION_KV_EPOCH: cutover.serving}
        if cutover.since is not None:
            annotations[ANNOTATION_KV_EPOCH_SINCE] = cutover.since
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": object_meta(owner, names.router(owner.name), child_labels(owner, COMPONENT_ROUTER), annotations),
        "spec": {
            "type": "ClusterIP",
            "selector": selector,
            "ports": [
                {"name": "http", "port": router.port, "targetPort": "http", "protocol": "TCP"},
                {"name": "metrics", "port": router.metrics_port, "targetPort": "metrics", "protocol": "TCP"},
            ],
        },
    }
