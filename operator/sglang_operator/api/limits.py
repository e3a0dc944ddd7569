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
