"""The largest value of every number in a spec: what one SGLangDeployment may ask of the operator at most.

Sized for the largest real fleets (512 replicas of 8 GPUs is 4,096 GPUs; a day for any window or timeout), far
below what would make one reconcile pass do unbounded work or overflow a timer. `validation` turns each into the
upper half of the field's range rule, in `validate` and as CEL; a test fails when a numeric field has no bound.
"""

from typing import Final

MAX_REPLICAS: Final = 512
POD_ANNOTATION_BYTES: Final = 256 * 1024
"""The API server's limit on a pod's annotations, keys and values together (apimachinery's
`TotalAnnotationSizeLimitB`): a pod over it is refused."""
OPERATOR_ANNOTATION_BYTES: Final = 4096
"""What the operator keeps of that for its own annotations on a worker pod (scrape, replica nodes, drain and warm
state: a few hundred bytes today)."""
TEMPLATE_ANNOTATION_BYTES: Final = POD_ANNOTATION_BYTES - OPERATOR_ANNOTATION_BYTES
"""What `template.metadata.annotations` may hold in all, so that every worker pod stays under the API server's
limit with the operator's own annotations added."""
DAY_SECONDS: Final = 86_400

MAX_READING: Final = 1e15
"""The largest metric reading the autoscaler computes on (req/s, tokens/s, requests, seconds): far above any real
fleet's (65,536 GPUs at 10 million tokens/s each is under 1e12), far below a float's overflow, so a sum or product
of a few readings and spec values stays finite. A reading past it (an exporter's garbage, a tenant's forged series)
is unknown: the autoscaler holds and says which one, as for a missing metric."""
MAX_DEMAND_REPLICAS: Final = 1e9
"""The most replicas (in the fleet's units) a demand may ask for and still be computed on: above what the largest
fleet can hold in units (MAX_REPLICAS replicas of the largest concurrencyPerReplica over one of a single slot,
5.12e8), so a real overload is still clamped to maxReplicas; past it, or not finite, the demand is unknown (a
target that divides a reading into an overflow, a reading that multiplies one): the autoscaler holds and says so."""
MIN_LATENCY_TARGET_SECONDS: Final = 0.001
"""The least latency target (time to first token, inter-token latency): no server reports a mean below a
millisecond, and ready x reading / target stays finite for every reading up to MAX_READING."""
MIN_DECODE_TOKEN_USAGE: Final = 0.01
"""The least KV-cache usage target of decode: 1 % of the cache; below it every reading asks for 100 x the ready
replicas or more, and ready x usage / target stays finite."""

_WINDOWS = (
    "rateSeconds",
    "slotTimeSeconds",
    "burstSeconds",
    "peakLookbackSeconds",
    "scaleUpStabilizationSeconds",
    "scaleDownStabilizationSeconds",
    "quietScaleDownSeconds",
    "quietLookbackSeconds",
    "metricsMaxAgeSeconds",
)
_BURSTY_WINDOWS = ("rateSeconds", "burstSeconds", "peakLookbackSeconds", "scaleDownStabilizationSeconds")

UPPER_BOUNDS: Final[dict[str, int | float]] = {
    "spec.replicas": MAX_REPLICAS,
    "spec.parallelism.tp": 128,
    "spec.parallelism.dp": 64,
    "spec.parallelism.attentionDP": 128,
    "spec.parallelism.ep": 128,
    "spec.parallelism.nnodes": 64,
    "spec.resources.gpusPerNode": 64,
    "spec.router.replicas": 16,
    "spec.engine.maxRunningRequests": 65_536,
    "spec.engine.contextLength": 16_777_216,
    "spec.engine.startupTimeoutSeconds": DAY_SECONDS,
    "spec.disaggregation.pageSize": 4_096,
    "spec.updateStrategy.maxSurge": MAX_REPLICAS,
    "spec.updateStrategy.maxUnavailable": MAX_REPLICAS,
    "spec.updateStrategy.drainTimeoutSeconds": DAY_SECONDS,
    "spec.autoscaling.minReplicas": MAX_REPLICAS,
    "spec.autoscaling.maxReplicas": MAX_REPLICAS,
    "spec.autoscaling.warmReplicas": 64,
    "spec.autoscaling.intervalSeconds": 3_600,
    "spec.autoscaling.maxGPUs": 65_536,
    "spec.autoscaling.targets.concurrencyPerReplica": 1_000_000,
    "spec.autoscaling.maxScaleUpStep": MAX_REPLICAS,
    "spec.autoscaling.startupSeconds": DAY_SECONDS,
    "spec.autoscaling.panicThreshold": 1_000.0,
    "spec.autoscaling.targets.queuePerReplica": 1_000_000.0,
    "spec.autoscaling.windows.quietMaxRise": 1_000_000.0,
    "spec.autoscaling.burstyTraffic.threshold": 1_000_000.0,
    "spec.autoscaling.sustainedRise.stepSeconds": DAY_SECONDS,
    "spec.autoscaling.sustainedRise.steps": 1_000,
    "spec.autoscaling.sustainedRise.minRise": 1_000_000.0,
    "spec.autoscaling.sustainedRise.projection": 100.0,
    "spec.autoscaling.slo.queueSeconds": float(DAY_SECONDS),
    **{f"spec.autoscaling.windows.{name}": DAY_SECONDS for name in _WINDOWS},
    **{f"spec.autoscaling.burstyTraffic.{name}": DAY_SECONDS for name in _BURSTY_WINDOWS},
}
