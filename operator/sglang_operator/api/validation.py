"""Every rule a spec must satisfy, each written once with its Python check and its CEL twin.

`sglang-operator validate`, the operator (before touching any GPU) and the API server (through the CEL rules that
`crdgen` copies into the CRD) all enforce this one list, with the same field and the same message. A rule's CEL
expression is evaluated with `self` = `.spec` after the API server applied the CRD's defaults, so defaulted fields
can be read directly and optional ones are guarded with `has()`.
"""

import difflib
import re
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from ..settings import PodPolicy
from .autoscaling_pd_rules import AUTOSCALING_PD_RULES
from .disaggregation_rules import DISAGGREGATION_RULES
from .groups import FLEET_RULES, GroupRule, group_variants
from .limits import UPPER_BOUNDS
from .placement_rules import PLACEMENT_RULES
from .pod_rules import POD_RULES
from .release_rules import RELEASE_RULES
from .resource_rules import RESOURCE_RULES
from .rule import FieldError, Rule
from .spec import (
    EP_SPANNING_BACKENDS,
    PROMETHEUS_DURATION,
    RDMA_BACKENDS,
    PrometheusAuth,
    SGLangDeploymentSpec,
    duration_ms,
)
from .tenant_rules import TENANT_RULES


def _at_least(field: str, minimum: int, get: Callable[[SGLangDeploymentSpec], int | float | None], why: str) -> Rule:
    """`minimum <= value <= UPPER_BOUNDS[field]`: every number a CR gives is bounded, so no spec can make one pass
    create a million pods or sleep for 2**33 seconds."""
    cel_path, guard = _cel_path(field)
    maximum = UPPER_BOUNDS[field]
    return Rule(
        field=field,
        message=f"must be at least {minimum} and at most {maximum}: {why}",
        cel=f"{guard}({cel_path} >= {minimum} && {cel_path} <= {maximum})",
        holds=lambda s: (value := get(s)) is None or minimum <= value <= maximum,
    )


def _between(
    field: str, low: float, high: float | None, get: Callable[[SGLangDeploymentSpec], float | None], why: str
) -> Rule:
    """A float bound: low <= value and value < high when given, else value <= UPPER_BOUNDS[field]; optional fields
    may be absent."""
    cel_path, guard = _cel_path(field)
    if high is not None:
        message, upper = f"must be at least {low:g} and below {high:g}: {why}", f"{cel_path} < {high:.1f}"
    else:
        cap = UPPER_BOUNDS[field]
        message, upper = f"must be at least {low:g} and at most {cap:g}: {why}", f"{cel_path} <= {cap:.1f}"
    return Rule(
        field=field,
        message=message,
        cel=f"{guard}({cel_path} >= {low:.1f} && {upper})",
        holds=lambda s: (
            (value := get(s)) is None
            or (low <= value and (value < high if high is not None else value <= UPPER_BOUNDS[field]))
        ),
    )


def _cel_path(field: str) -> tuple[str, str]:
    """The field as CEL under `self` (= .spec), and the `!has(...) || ` guard an optional field needs."""
    cel_path = "self" + field.removeprefix("spec")
    parent, _, leaf = cel_path.rpartition(".")
    return cel_path, (f"!has({parent}.{leaf}) || " if _optional(field) else "")


def _optional(field: str) -> bool:
    return field in _OPTIONAL_FIELDS


_OPTIONAL_FIELDS = {
    "spec.engine.maxRunningRequests",
    "spec.engine.contextLength",
    "spec.autoscaling.maxGPUs",
    "spec.autoscaling.targets.concurrencyPerReplica",
    "spec.autoscaling.targets.gpuUtilization",
    "spec.autoscaling.scaleDownTolerance",
}


_AUTH = "self.autoscaling.prometheusAuth"


def _auth_not_both(field: str, other: str, why: str, both_cel: str, both: Callable[[PrometheusAuth], bool]) -> Rule:
    """`prometheusAuth.<field>` may not be set together with `<other>`. prometheusAuth defaults to {}, but a CR
    written before the field existed has none until it is next written: the CEL guards it."""
    return Rule(
        field=f"spec.autoscaling.prometheusAuth.{field}",
        message=f"cannot be combined with {other}: {why}",
        cel=f"!has({_AUTH}) || !({both_cel})",
        holds=lambda s: not both(s.autoscaling.prometheus_auth),
    )


def _port(field: str, get: Callable[[SGLangDeploymentSpec], int]) -> Rule:
    cel_path = "self" + field.removeprefix("spec")
    return Rule(
        field=field,
        message="must be a TCP port between 1 and 65535; pick a free port for the container.",
        cel=f"{cel_path} >= 1 && {cel_path} <= 65535",
        holds=lambda s: 1 <= get(s) <= 65535,
    )


# (field, attribute, minimum, why) of each autoscaling window; rate windows shorter than two scrapes read as no data
# (the autoscaler then holds), so 1 s is only the floor of what parses as a PromQL range.
_WINDOW_BOUNDS: tuple[tuple[str, str, int, str], ...] = (
    ("rateSeconds", "rate_seconds", 1, "it is a PromQL range; keep it at least two scrape intervals."),
    ("slotTimeSeconds", "slot_time_seconds", 1, "it is a PromQL range; keep it at least two scrape intervals."),
    ("burstSeconds", "burst_seconds", 1, "it is a PromQL range; keep it at least two scrape intervals."),
    ("peakLookbackSeconds", "peak_lookback_seconds", 1, "it is a PromQL subquery range."),
    ("scaleUpStabilizationSeconds", "scale_up_stabilization_seconds", 0, "0 scales up at once."),
    ("scaleDownStabilizationSeconds", "scale_down_stabilization_seconds", 0, "0 scales down at once."),
    ("quietScaleDownSeconds", "quiet_scale_down_seconds", 0, "0 scales a fleet that never queued down at once."),
    ("quietLookbackSeconds", "quiet_lookback_seconds", 1, "it is a PromQL subquery range."),
    ("metricsMaxAgeSeconds", "metrics_max_age_seconds", 1, "older samples count as missing."),
)


# The bursty-traffic rule's own windows, with the same bounds as their namesakes above.
_BURSTY_WINDOWS = ("rateSeconds", "burstSeconds", "peakLookbackSeconds", "scaleDownStabilizationSeconds")


def _window(section: str, name: str, attr: str, minimum: int, why: str) -> Rule:
    """The lower bound of window `name` under `spec.autoscaling.<section>` (`windows` or `burstyTraffic`)."""
    parent = "bursty_traffic" if section == "burstyTraffic" else section

    def get(spec: SGLangDeploymentSpec) -> int:
        value: int = getattr(getattr(spec.autoscaling, parent), attr)
        return value

    return _at_least(f"spec.autoscaling.{section}.{name}", minimum, get, why)


_INTERVAL = "self.monitoring.interval"
MIN_SCRAPE_INTERVAL = "5s"
MAX_SCRAPE_INTERVAL = "10m"


def _interval_in_bounds(interval: str) -> bool:
    """Within the scrape bounds, or not a duration at all (the schema's pattern refuses that, naming the pattern)."""
    ms = duration_ms(interval)
    return ms is None or (duration_ms(MIN_SCRAPE_INTERVAL) or 0) <= ms <= (duration_ms(MAX_SCRAPE_INTERVAL) or 0)


_SPANNING = sorted(EP_SPANNING_BACKENDS)
_SPANNING_CEL = "[" + ", ".join(f"'{b}'" for b in _SPANNING) + "]"

PROMETHEUS_URL_PLAIN = Rule(
    field="spec.autoscaling.prometheusURL",
    message="must be a Prometheus base URL without a query (?), a fragment (#), user info (@) or a backslash: the "
    "operator appends its own API path and query (a query or fragment would steer or cut them off), and credentials "
    "belong in prometheusAuth.",
    cel="!has(self.autoscaling.prometheusURL) || !self.autoscaling.prometheusURL.matches('[?#@\\\\\\\\]')",
    holds=lambda s: s.autoscaling.prometheus_url is None or re.search(r"[?#@\\]", s.autoscaling.prometheus_url) is None,
)
"""Issue 29, gap 2: no Prometheus base URL needs these, and each lets a tenant's URL under an allowed prefix reach
another query or host; the operator's settings compare the rest (`settings.parse_base_url`)."""

RULES: tuple[Rule, ...] = (
    PROMETHEUS_URL_PLAIN,
    _at_least(
        "spec.parallelism.tp",
        1,
        lambda s: s.parallelism.tp,
        "it is the number of GPUs each model shard spans.",
    ),
    _at_least("spec.parallelism.dp", 1, lambda s: s.parallelism.dp, "it counts in-process data-parallel groups."),
    _at_least(
        "spec.parallelism.attentionDP",
        1,
        lambda s: s.parallelism.attention_dp,
        "1 disables attention data parallelism.",
    ),
    _at_least("spec.parallelism.ep", 1, lambda s: s.parallelism.ep, "1 disables expert parallelism."),
    _at_least("spec.parallelism.nnodes", 1, lambda s: s.parallelism.nnodes, "a replica runs on at least one node."),
    _at_least("spec.resources.gpusPerNode", 1, lambda s: s.resources.gpus_per_node, "set the GPUs one node offers."),
    _at_least("spec.replicas", 0, lambda s: s.replicas, "use 0 to stop all replicas."),
    _at_least(
        "spec.router.replicas",
        1,
        lambda s: s.router.replicas,
        "set router.enabled: false to run without a router.",
    ),
    _at_least(
        "spec.engine.maxRunningRequests",
        1,
        lambda s: s.engine.max_running_requests,
        "a replica must be allowed to run a request; omit the field to let SGLang size it.",
    ),
    _at_least(
        "spec.engine.contextLength",
        1,
        lambda s: s.engine.context_length,
        "omit the field to use the model's own context length.",
    ),
    _at_least(
        "spec.engine.startupTimeoutSeconds",
        60,
        lambda s: s.engine.startup_timeout_seconds,
        "weight loading and CUDA graph capture take minutes.",
    ),
    _at_least("spec.updateStrategy.maxSurge", 0, lambda s: s.update_strategy.max_surge, "it is a replica count."),
    _at_least(
        "spec.updateStrategy.maxUnavailable",
        0,
        lambda s: s.update_strategy.max_unavailable,
        "it is a replica count.",
    ),
    _at_least(
        "spec.updateStrategy.drainTimeoutSeconds",
        0,
        lambda s: s.update_strategy.drain_timeout_seconds,
        "0 deletes replicas without waiting for in-flight requests.",
    ),
    _at_least(
        "spec.autoscaling.minReplicas",
        0,
        lambda s: s.autoscaling.min_replicas,
        "use 0 to allow scale to zero.",
    ),
    _at_least(
        "spec.autoscaling.maxReplicas",
        1,
        lambda s: s.autoscaling.max_replicas,
        "the autoscaler needs room for one replica.",
    ),
    _at_least("spec.autoscaling.warmReplicas", 0, lambda s: s.autoscaling.warm_replicas, "0 disables warm replicas."),
    _at_least(
        "spec.autoscaling.intervalSeconds",
        1,
        lambda s: s.autoscaling.interval_seconds,
        "the autoscaler queries Prometheus once per interval.",
    ),
    _at_least("spec.autoscaling.maxGPUs", 1, lambda s: s.autoscaling.max_gpus, "omit the field for no GPU budget."),
    _at_least(
        "spec.autoscaling.targets.concurrencyPerReplica",
        1,
        lambda s: s.autoscaling.targets.concurrency_per_replica,
        "omit it to derive C from maxRunningRequests.",
    ),
    _at_least(
        "spec.autoscaling.maxScaleUpStep",
        1,
        lambda s: s.autoscaling.max_scale_up_step,
        "it is the replicas one interval may add outside panic mode.",
    ),
    _at_least(
        "spec.autoscaling.startupSeconds",
        1,
        lambda s: s.autoscaling.startup_seconds,
        "the policy plans backlogs over the time a new replica takes to become ready.",
    ),
    _between(
        "spec.autoscaling.panicThreshold",
        1.0,
        None,
        lambda s: s.autoscaling.panic_threshold,
        "panic starts when burst demand reaches this multiple of the ready capacity; a large value disables it.",
    ),
    _between(
        "spec.autoscaling.scaleDownTolerance",
        0.0,
        1.0,
        lambda s: s.autoscaling.scale_down_tolerance,
        "it is the fraction below the count that demand may fall before a scale-down; omit it to use tolerance.",
    ),
    _between(
        "spec.autoscaling.targets.burstHeadroom",
        0.0,
        10.0,
        lambda s: s.autoscaling.targets.burst_headroom,
        "it is the spare capacity fraction above the peak burst rate (0.15 = 15 %).",
    ),
    _between(
        "spec.autoscaling.targets.queuePerReplica",
        0.0,
        None,
        lambda s: s.autoscaling.targets.queue_per_replica,
        "it is the queued requests per ready replica tolerated before the queue adds replicas.",
    ),
    *(_window("windows", *bound) for bound in _WINDOW_BOUNDS),
    _between(
        "spec.autoscaling.windows.quietMaxRise",
        0.0,
        None,
        lambda s: s.autoscaling.windows.quiet_max_rise,
        "it is the rise of the stable rate within the quiet lookback (0.5 = 50 %) beyond which the fleet keeps "
        "the full scale-down window; a large value disables the test.",
    ),
    _between(
        "spec.autoscaling.burstyTraffic.threshold",
        1.0,
        None,
        lambda s: s.autoscaling.bursty_traffic.threshold,
        "it is the busiest short-window rate as a multiple of the mean rate; a large value (or enabled: false) "
        "keeps the steady rule.",
    ),
    _between(
        "spec.autoscaling.burstyTraffic.tolerance",
        0.0,
        1.0,
        lambda s: s.autoscaling.bursty_traffic.tolerance,
        "it is the fraction above the count that bursty demand may reach before a scale-up.",
    ),
    *(_window("burstyTraffic", *bound) for bound in _WINDOW_BOUNDS if bound[0] in _BURSTY_WINDOWS),
    _at_least(
        "spec.autoscaling.sustainedRise.stepSeconds",
        1,
        lambda s: s.autoscaling.sustained_rise.step_seconds,
        "it is the spacing of the rate readings compared; keep it at least one scrape interval.",
    ),
    _at_least(
        "spec.autoscaling.sustainedRise.steps",
        1,
        lambda s: s.autoscaling.sustained_rise.steps,
        "it is how many successive steps the rate must have risen at; keep steps x stepSeconds over twice "
        "windows.rateSeconds so that a step change does not count as a ramp.",
    ),
    _between(
        "spec.autoscaling.sustainedRise.minRise",
        0.0,
        None,
        lambda s: s.autoscaling.sustained_rise.min_rise,
        "it is the least rise per step as a fraction of the rate before (0.05 = 5 %).",
    ),
    _between(
        "spec.autoscaling.sustainedRise.projection",
        0.0,
        None,
        lambda s: s.autoscaling.sustained_rise.projection,
        "it is the fraction of the rise's slope projected ahead (0 projects nothing, 1 all of it).",
    ),
    _between(
        "spec.autoscaling.slo.queueSeconds",
        0.0,
        None,
        lambda s: s.autoscaling.slo.queue_seconds,
        "it is the longest wait for a slot within the SLO; use a bucket bound of sglang:queue_time_seconds "
        "(0.5, 1, 2, 5, ...).",
    ),
    _between(
        "spec.autoscaling.slo.quietMissRatio",
        0.0,
        1.0,
        lambda s: s.autoscaling.slo.quiet_miss_ratio,
        "it is the share of requests over the SLO (0.05 = 5 %) up to which surplus capacity goes after the quiet "
        "scale-down window.",
    ),
    _auth_not_both(
        "basicAuthSecretRef",
        "bearerTokenSecretRef",
        "a request carries one Authorization header; keep the one your Prometheus (or the proxy in front of it) "
        "expects.",
        f"has({_AUTH}.bearerTokenSecretRef) && has({_AUTH}.basicAuthSecretRef)",
        lambda a: a.bearer_token_secret_ref is not None and a.basic_auth_secret_ref is not None,
    ),
    _auth_not_both(
        "insecureSkipTLSVerify",
        "caSecretRef",
        "either verify the certificate against that CA or skip verification; drop one.",
        f"has({_AUTH}.caSecretRef) && {_AUTH}.insecureSkipTLSVerify",
        lambda a: a.ca_secret_ref is not None and a.insecure_skip_tls_verify,
    ),
    _port("spec.engine.port", lambda s: s.engine.port),
    _port("spec.router.port", lambda s: s.router.port),
    _port("spec.router.metricsPort", lambda s: s.router.metrics_port),
    Rule(
        field="spec.router.metricsPort",
        message="must differ from router.port: smg serves Prometheus metrics on a listener of its own.",
        cel="self.router.metricsPort != self.router.port",
        holds=lambda s: s.router.metrics_port != s.router.port,
    ),
    Rule(
        field="spec.router.policy",
        message="power_of_two cannot start here: smg exits with 'Power-of-two policy requires at least 2 workers' "
        "when it starts without --worker-urls, and the operator registers every worker after the router is up; use "
        "least_load (also the less loaded worker, scored by expected wait) or cache_aware.",
        cel="!self.router.enabled || self.router.policy != 'power_of_two'",
        holds=lambda s: not s.router.enabled or s.router.policy != "power_of_two",
    ),
    Rule(
        field="spec.parallelism.attentionDP",
        message="tp must be divisible by attentionDP: attention DP splits the tp group into equal ranks "
        "(attn_tp = tp / attentionDP); choose a divisor of tp.",
        cel="self.parallelism.attentionDP < 1 || self.parallelism.tp % self.parallelism.attentionDP == 0",
        holds=lambda s: s.parallelism.attention_dp < 1 or s.parallelism.tp % s.parallelism.attention_dp == 0,
    ),
    Rule(
        field="spec.parallelism.attentionDP",
        message="attentionDP > 1 cannot be combined with dp > 1: SGLang rejects data-parallel replicas together "
        "with attention data parallelism; use replicas for more copies, or set dp: 1.",
        cel="!(self.parallelism.attentionDP > 1 && self.parallelism.dp > 1)",
        holds=lambda s: not (s.parallelism.attention_dp > 1 and s.parallelism.dp > 1),
    ),
    Rule(
        field="spec.parallelism.dp",
        message="dp > 1 cannot span nodes: in-process data parallelism runs on one node; use replicas (one "
        "replica per node group) or attentionDP across nodes.",
        cel="!(self.parallelism.dp > 1 && self.parallelism.nnodes > 1)",
        holds=lambda s: not (s.parallelism.dp > 1 and s.parallelism.nnodes > 1),
    ),
    Rule(
        field="spec.parallelism.nnodes",
        message="tp must be divisible by nnodes: each node of a replica holds tp / nnodes GPUs; choose nnodes "
        "among tp's divisors.",
        cel="self.parallelism.nnodes < 1 || self.parallelism.tp % self.parallelism.nnodes == 0",
        holds=lambda s: s.parallelism.nnodes < 1 or s.parallelism.tp % s.parallelism.nnodes == 0,
    ),
    Rule(
        field="spec.resources.gpusPerNode",
        message="GPUs per pod (tp x dp / nnodes) exceed gpusPerNode: such a pod can never be scheduled; raise "
        "nnodes or lower tp/dp.",
        cel="self.parallelism.nnodes < 1 || self.resources.gpusPerNode < 1 || "
        "self.parallelism.tp * self.parallelism.dp <= self.resources.gpusPerNode * self.parallelism.nnodes",
        holds=lambda s: (
            s.parallelism.nnodes < 1
            or s.resources.gpus_per_node < 1
            or s.parallelism.tp * s.parallelism.dp <= s.resources.gpus_per_node * s.parallelism.nnodes
        ),
    ),
    Rule(
        field="spec.parallelism.dpLmHead",
        message="dpLmHead requires attentionDP > 1: SGLang's --enable-dp-lm-head only works with attention data "
        "parallelism; set attentionDP or drop dpLmHead.",
        cel="!self.parallelism.dpLmHead || self.parallelism.attentionDP > 1",
        holds=lambda s: not s.parallelism.dp_lm_head or s.parallelism.attention_dp > 1,
    ),
    Rule(
        field="spec.parallelism.ep",
        message="ep must divide tp: experts are sharded inside the tp group; choose a divisor of tp.",
        cel="self.parallelism.ep < 1 || self.parallelism.tp % self.parallelism.ep == 0",
        holds=lambda s: s.parallelism.ep < 1 or s.parallelism.tp % s.parallelism.ep == 0,
    ),
    Rule(
        field="spec.parallelism.ep",
        message=f"the all-to-all backends {', '.join(_SPANNING)} require ep == tp: SGLang would silently "
        "override ep; set ep equal to tp.",
        cel=f"!(self.parallelism.moeA2ABackend in {_SPANNING_CEL}) || self.parallelism.ep == self.parallelism.tp",
        holds=lambda s: (
            s.parallelism.moe_a2a_backend not in EP_SPANNING_BACKENDS or s.parallelism.ep == s.parallelism.tp
        ),
    ),
    Rule(
        field="spec.model.servedName",
        message="the served model name must not contain ':' (SGLang reserves it for model:adapter LoRA names); "
        "set servedName to a name without ':'.",
        cel="has(self.model.servedName) ? !self.model.servedName.contains(':') : !self.model.path.contains(':')",
        holds=lambda s: ":" not in s.served_model_name,
    ),
    Rule(
        field="spec.model.cache.claimName",
        message="is required when cache.type is persistentVolumeClaim; name an existing PVC.",
        cel="self.model.cache.type != 'persistentVolumeClaim' || has(self.model.cache.claimName)",
        holds=lambda s: s.model.cache.type != "persistentVolumeClaim" or bool(s.model.cache.claim_name),
    ),
    Rule(
        field="spec.model.cache.hostPath",
        message="is required when cache.type is hostPath; give the node directory holding the weights.",
        cel="self.model.cache.type != 'hostPath' || has(self.model.cache.hostPath)",
        holds=lambda s: s.model.cache.type != "hostPath" or bool(s.model.cache.host_path),
    ),
    Rule(
        field="spec.engine.memFractionStatic",
        message="must be between 0 and 1 (exclusive): it is the fraction of GPU memory for weights and KV cache.",
        cel="!has(self.engine.memFractionStatic) || (self.engine.memFractionStatic > 0.0 && "
        "self.engine.memFractionStatic < 1.0)",
        holds=lambda s: s.engine.mem_fraction_static is None or 0 < s.engine.mem_fraction_static < 1,
    ),
    Rule(
        field="spec.updateStrategy",
        message="maxSurge and maxUnavailable cannot both be 0: a rollout could then never replace a replica; "
        "set maxSurge: 1 (surge) or maxUnavailable: 1 (in place).",
        cel="self.updateStrategy.maxSurge > 0 || self.updateStrategy.maxUnavailable > 0",
        holds=lambda s: s.update_strategy.max_surge > 0 or s.update_strategy.max_unavailable > 0,
    ),
    Rule(
        field="spec.autoscaling.minReplicas",
        message="minReplicas must not exceed maxReplicas; lower minReplicas or raise maxReplicas.",
        cel="self.autoscaling.minReplicas <= self.autoscaling.maxReplicas",
        holds=lambda s: s.autoscaling.min_replicas <= s.autoscaling.max_replicas,
    ),
    Rule(
        field="spec.autoscaling.maxGPUs",
        message="the GPU budget cannot hold minReplicas replicas (minReplicas x tp x dp GPUs); raise maxGPUs or "
        "lower minReplicas.",
        cel="!has(self.autoscaling.maxGPUs) || self.autoscaling.maxGPUs >= "
        "self.autoscaling.minReplicas * self.parallelism.tp * self.parallelism.dp",
        holds=lambda s: (
            s.autoscaling.max_gpus is None
            or s.autoscaling.max_gpus >= s.autoscaling.min_replicas * s.parallelism.tp * s.parallelism.dp
        ),
    ),
    Rule(
        field="spec.autoscaling.targets.headroom",
        message="must be between 0 and 10: it is the spare capacity fraction (0.3 = 30 %).",
        cel="self.autoscaling.targets.headroom >= 0.0 && self.autoscaling.targets.headroom <= 10.0",
        holds=lambda s: 0 <= s.autoscaling.targets.headroom <= 10,
    ),
    Rule(
        field="spec.autoscaling.tolerance",
        message="must be between 0 and 1: changes smaller than this fraction are ignored (HPA uses 0.1).",
        cel="self.autoscaling.tolerance >= 0.0 && self.autoscaling.tolerance < 1.0",
        holds=lambda s: 0 <= s.autoscaling.tolerance < 1,
    ),
    Rule(
        field="spec.autoscaling.targets.gpuUtilization",
        message="must be a percentage between 1 and 100; omit it to ignore GPU utilisation.",
        cel="!has(self.autoscaling.targets.gpuUtilization) || (self.autoscaling.targets.gpuUtilization >= 1 && "
        "self.autoscaling.targets.gpuUtilization <= 100)",
        holds=lambda s: (
            s.autoscaling.targets.gpu_utilization is None or 1 <= s.autoscaling.targets.gpu_utilization <= 100
        ),
    ),
    Rule(
        field="spec.router.stickySessions.headers",
        message="must name at least one header when sticky sessions are enabled (e.g. x-session-id).",
        cel="!self.router.stickySessions.enabled || size(self.router.stickySessions.headers) > 0",
        holds=lambda s: not s.router.sticky_sessions.enabled or len(s.router.sticky_sessions.headers) > 0,
    ),
    Rule(
        field="spec.inferencePool.endpointPickerRef.name",
        message="must name the Endpoint Picker (its Service) when the InferencePool is enabled; the InferencePool "
        "API requires one.",
        cel="!self.inferencePool.enabled || has(self.inferencePool.endpointPickerRef.name)",
        holds=lambda s: not s.inference_pool.enabled or s.inference_pool.endpoint_picker_ref.name is not None,
    ),
    Rule(
        field="spec.monitoring.interval",
        message=f"must be from {MIN_SCRAPE_INTERVAL} to {MAX_SCRAPE_INTERVAL}: it is how often the shared Prometheus "
        "scrapes every pod of the fleet (1ms would be a thousand scrapes a second per pod) and a rate window needs "
        "two scrapes; write it as Prometheus does, e.g. 15s, 30s or 1m30s.",
        cel=f"{_INTERVAL} == '' || !{_INTERVAL}.matches(r'{PROMETHEUS_DURATION}') || "
        f"(duration({_INTERVAL}) >= duration('{MIN_SCRAPE_INTERVAL}') && "
        f"duration({_INTERVAL}) <= duration('{MAX_SCRAPE_INTERVAL}'))",
        holds=lambda s: _interval_in_bounds(s.monitoring.interval),
    ),
    *TENANT_RULES,
    *POD_RULES,
    *PLACEMENT_RULES,
    *RESOURCE_RULES,
    *RELEASE_RULES,
    *DISAGGREGATION_RULES,
    *AUTOSCALING_PD_RULES,
)
# Every rule that reads a field a worker group sets, once more for the groups (on each group where the rule can be
# checked on the group alone, else over the groups: `groups.group_variants`); then the fleet's own group rules.
RULES = RULES + tuple(variant for rule in RULES for variant in group_variants(rule)) + FLEET_RULES


def check_rules(spec: SGLangDeploymentSpec) -> list[FieldError]:
    errors: list[FieldError] = []
    for rule in RULES:
        if rule.holds(spec):
            continue
        errors += rule.failures(spec) if isinstance(rule, GroupRule) else [FieldError(rule.field, rule.message)]
    return errors


def parse_spec(raw: Any, strict: bool = False) -> tuple[SGLangDeploymentSpec | None, list[FieldError]]:
    """Parse and check a raw `.spec`; the spec is returned only when it has no errors at all.

    `strict` (what `validate` and `render` use, as `kubectl --validate=strict` does) also refuses unknown fields. The
    operator parses leniently, so an older operator keeps serving a CR written for a newer one; the API server has
    pruned or refused unknown fields before the operator sees them anyway.
    """
    if not isinstance(raw, dict):
        return None, [FieldError("spec", "must be an object with at least model.path.")]
    unknown = unknown_fields(raw) if strict else []
    try:
        spec = SGLangDeploymentSpec.model_validate(raw)
    except ValidationError as exc:
        return None, unknown + [_from_pydantic(err) for err in exc.errors()]
    errors = unknown + check_rules(spec)
    return (None if errors else spec), errors


def check_pod_policy(spec: SGLangDeploymentSpec, policy: PodPolicy) -> list[FieldError]:
    """What the operator's settings refuse although the schema allows it: a model cache on a node directory outside
    the paths an admin allowed (`--allow-host-path`), KV over RDMA where the admin allows no RDMA device
    (`--rdma-resource`), the RDMA device's resource named as the GPUs'. Checked by the operator before it writes
    anything, and by `validate` with those flags."""
    errors = []
    rdma = policy.rdma_resource
    named = [("spec.resources", spec.resources)] + [
        (f"spec.workerGroups[{index}].resources", group.resources)
        for index, group in enumerate(spec.worker_groups)
        if group.resources is not None
    ]
    for where, resources in named:
        if rdma is not None and resources.gpu_resource_name == rdma:
            errors.append(
                FieldError(
                    f"{where}.gpuResourceName",
                    f"{rdma} is the RDMA device resource the operator gives prefill/decode workers (--rdma-resource), "
                    "not a GPU: such a worker would get one RDMA device in place of its GPUs, and every other worker "
                    "RDMA devices as GPUs; name the GPU device plugin's resource (e.g. nvidia.com/gpu).",
                )
            )
    cache = spec.model.cache
    if cache.type == "hostPath" and cache.host_path is not None and not policy.host_path_allowed(cache.host_path):
        allowed = ", ".join(policy.allowed_host_paths) or "none"
        errors.append(
            FieldError(
                "spec.model.cache.hostPath",
                f"{cache.host_path} is not under a node directory the operator allows (allowed: {allowed}); use a "
                "persistentVolumeClaim or emptyDir cache, or ask the cluster admin to allow the path "
                "(--allow-host-path).",
            )
        )
    dis = spec.disaggregation
    if dis is not None and dis.transfer_backend in RDMA_BACKENDS and policy.rdma_resource is None:
        errors.append(
            FieldError(
                "spec.disaggregation.transferBackend",
                f"{dis.transfer_backend} moves KV over RDMA, and the operator allows no RDMA device (its pods are "
                "never privileged, so RDMA reaches them only as the RDMA device plugin's resource); use "
                "mooncake_tcp, or ask the cluster admin to name that resource (--rdma-resource).",
            )
        )
    return errors


def unknown_fields(raw: Any, model: type[BaseModel] = SGLangDeploymentSpec, path: str = "spec") -> list[FieldError]:
    """Fields of `raw` that `model` does not define, at any depth, each with the closest known name."""
    if not isinstance(raw, dict):
        return []
    known = {field.alias or name: field for name, field in model.model_fields.items()}
    errors: list[FieldError] = []
    for key, value in raw.items():
        field = known.get(key)
        where = f"{path}.{key}"
        if field is None:
            close = difflib.get_close_matches(str(key), list(known), n=1, cutoff=0.6)
            hint = f"did you mean {close[0]}?" if close else f"known fields: {', '.join(known)}."
            errors.append(FieldError(where, f"unknown field; {hint}"))
            continue
        nested, many = _nested_model(field.annotation)
        if nested is None:
            continue
        if many and isinstance(value, list):
            for index, item in enumerate(value):
                errors += unknown_fields(item, nested, f"{where}[{index}]")
        elif not many:
            errors += unknown_fields(value, nested, where)
    return errors


def _nested_model(annotation: Any) -> tuple[type[BaseModel] | None, bool]:
    """(model, is_list) for a field typed `Model`, `Model | None`, `list[Model]` or `list[Model] | None`."""
    members = [a for a in get_args(annotation) if a is not type(None)] if get_origin(annotation) in _UNIONS else []
    if len(members) == 1:
        annotation = members[0]
    if get_origin(annotation) is list:
        item = get_args(annotation)[0]
        return (item, True) if isinstance(item, type) and issubclass(item, BaseModel) else (None, True)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, False
    return None, False


_UNIONS = (Union, types.UnionType)
_TYPE_NAMES = {
    "int_type": "integer",
    "int_parsing": "integer",
    "bool_type": "boolean",
    "string_type": "string",
    "float_type": "number",
    "list_type": "array",
    "dict_type": "object",
    "model_type": "object",
}


def _from_pydantic(err: Any) -> FieldError:
    """pydantic's error in the API server's words (`must be of type integer`, `may not be more than N
    characters`, `should match '<pattern>'`), naming the field as the API server does (`args[3]`)."""
    field = "spec"
    for part in err["loc"]:
        field += f"[{part}]" if isinstance(part, int) else f".{part}"
    kind, ctx = err["type"], err.get("ctx") or {}
    got = repr(err.get("input"))
    got = got if len(got) <= 60 else got[:57] + "..."
    if kind == "missing":
        return FieldError(field, "is required.")
    if kind in _TYPE_NAMES:
        message = f"must be of type {_TYPE_NAMES[kind]}"
    elif kind == "string_too_long":
        message = f"may not be more than {ctx.get('max_length')} characters"
    elif kind == "too_long":
        message = f"must have at most {ctx.get('max_length')} items"
    elif kind == "string_pattern_mismatch":
        message = f"should match '{ctx.get('pattern')}'"
    elif kind == "literal_error":
        message = f"Unsupported value: supported values: {ctx.get('expected')}"
    elif kind in ("finite_number", "float_parsing"):
        message = "must be a finite number"
    elif kind == "value_error":  # a model's own check (podtypes.unique_paths): its message as written
        message = str(ctx.get("error", err["msg"])).rstrip(".")
    else:
        message = str(err["msg"]).removeprefix("Input ")
    return FieldError(field, f"{message} (got {got}).")


MAX_NAME_LENGTH = 40
DNS_1035_LABEL = "^[a-z]([-a-z0-9]*[a-z0-9])?$"


@dataclass(frozen=True)
class NameRule:
    """Child names are `<name>-<revision>-<replica>-<rank>` and Service names, so the CR's name must be a DNS-1035
    label (a Service name's syntax) short enough for the suffixes to fit a 63-character label."""

    cel: str = f"size(self.metadata.name) <= {MAX_NAME_LENGTH} && self.metadata.name.matches('{DNS_1035_LABEL}')"
    message: str = (
        f"metadata.name must be a DNS-1035 label of at most {MAX_NAME_LENGTH} characters (lower-case letters, "
        "digits and '-', starting with a letter, ending with a letter or digit): pod and Service names are derived "
        "from it; choose such a name."
    )

    def check(self, name: str) -> list[FieldError]:
        valid = len(name) <= MAX_NAME_LENGTH and re.fullmatch(DNS_1035_LABEL, name) is not None
        return [] if valid else [FieldError("metadata.name", self.message)]


NAME_RULE = NameRule()
