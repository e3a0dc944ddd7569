"""The `SGLangDeployment` spec as typed, frozen models: parsed once at the boundary, then trusted everywhere.

These models are the single source of the schema: `crdgen` turns them into the CRD's OpenAPI schema, and
`validation` adds the cross-field rules (enforced here and, as CEL, by the API server).
Defaults are chosen so that `spec: {model: {path: X}}` is one single-GPU replica behind a router.
"""

import re
from typing import Annotated, Literal

from pydantic import Field

from .base import CONTROL, NO_SPACE, SPACE_OR_CONTROL, SpecModel
from .constants import (
    DEFAULT_ENGINE_PORT,
    DEFAULT_ROUTER_IMAGE,
    DEFAULT_ROUTER_METRICS_PORT,
    DEFAULT_ROUTER_PORT,
    DEFAULT_SGLANG_IMAGE,
)
from .diagnostics import DiagnosticsSpec
from .inferencepool import InferencePoolSpec
from .podtemplate import ABSOLUTE_PATH, EnvVar, PodTemplateOverrides
from .podtypes import CONFIG_KEY, DNS_SUBDOMAIN, QUANTITY
from .releases import SUPPORTED_RANGE, VERSION_PATTERN, image_tag_version, release_image

MoeA2ABackend = Literal[
    "none",
    "deepep",
    "deepep_v2",
    "mooncake",
    "nixl",
    "mori",
    "ascend_fuseep",
    "ascend_tp",
    "flashinfer",
    "flashinfer_megamoe",
    "megamoe",
    "pplx",
]
# SGLang 0.5.23 (arg_groups/overrides.py) forces ep_size = tp_size for these all-to-all backends.
EP_SPANNING_BACKENDS: frozenset[str] = frozenset(
    {
        "deepep",
        "deepep_v2",
        "mooncake",
        "nixl",
        "mori",
        "ascend_fuseep",
        "flashinfer",
        "flashinfer_megamoe",
        "megamoe",
        "pplx",
    }
)

# Patterns the schema and `validate` share. Strings that reach a command line, a URL or a header carry no space or
# control character (`base.CONTROL`: one class, read alike by the API server and `validate`), so no value can smuggle
# a second flag, line or header, nor a NUL that exec cannot pass (every pod would fail at start, no field named).
# Values that land right after a flag of the engine's command line must not read as a flag themselves.
NOT_A_FLAG = rf"^[^-{SPACE_OR_CONTROL}][^{SPACE_OR_CONTROL}]*$"
PATH_NOT_A_FLAG = rf"^[^-{CONTROL}][^{CONTROL}]*$"
SECRET_KEY = CONFIG_KEY
"""A key a Secret can hold (`podtypes.CONFIG_KEY`: never `.`, `..` nor starting with `..`): a reference to any other
names nothing, and the pods that read it wait for it forever."""
EXTENDED_RESOURCE = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[a-zA-Z0-9]([-a-zA-Z0-9_.]*[a-zA-Z0-9])?$"
PROMETHEUS_URL = rf"^https?://[^{SPACE_OR_CONTROL}/@?#]+(/[^{SPACE_OR_CONTROL}]*)?$"
Arg = Annotated[str, Field(max_length=1024, pattern=r"^[^\x00\n\r]*$")]
HeaderName = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9-]*$")]
HeaderValue = Annotated[str, Field(max_length=1024, pattern=rf"^[^{CONTROL}]*$")]
PROMETHEUS_TENANT_HEADERS = ("X-Scope-OrgID", "THANOS-TENANT")
"""The only names `prometheusAuth.headers` may have (compared case-insensitively): the tenant headers of the
Prometheus-compatible APIs that select a tenant by header, Cortex, Mimir and Loki (`X-Scope-OrgID`) and Thanos
(`THANOS-TENANT`, its `--query.tenant-header` default). Nothing else a CR could add is needed to read PromQL, and
much would change the request itself: `Host` (another virtual host behind a shared proxy), `Content-Length` and
`Transfer-Encoding` (request smuggling), `Authorization`, `Cookie`, `Proxy-Authorization` (credentials belong in a
Secret), `X-Forwarded-For` and the other forwarding headers (a proxy's trust decisions)."""

RouterPolicy = Literal[
    "cache_aware", "round_robin", "power_of_two", "least_load", "random", "consistent_hashing", "prefix_hash"
]
PrefillPolicy = Literal[
    "cache_aware", "round_robin", "power_of_two", "least_load", "random", "consistent_hashing", "prefix_hash", "bucket"
]
"""smg's `--prefill-policy` choices: the router's policies and `bucket` (prefill only)."""
Role = Literal["prefill", "decode"]
TransferBackend = Literal["mooncake", "nixl", "ascend", "mori", "mooncake_tcp", "fake"]
"""SGLang's `--disaggregation-transfer-backend` choices. `fake` is in the enum so that a CR asking for it gets the
rule that says why it is refused (a prefill server refuses it), not a bare enum error."""
RDMA_BACKENDS: frozenset[str] = frozenset({"mooncake", "nixl", "mori"})
"""Transfer backends that move KV over RDMA (InfiniBand/RoCE): mooncake_tcp goes over TCP, ascend over Ascend's own
fabric."""
DEFAULT_BOOTSTRAP_PORT = 8998
KvCacheDtype = Literal[
    "auto", "fp8_e5m2", "fp8_e4m3", "mxfp8", "bf16", "bfloat16", "nvfp4", "fp4_mx_block16", "fp4_e2m1"
]
"""Every `--kv-cache-dtype` value of a supported release; which release has which is `releases.KV_CACHE_DTYPES`."""


class SecretKeyRef(SpecModel):
    """A key of a Secret in the CR's namespace."""

    name: str = Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN, description="Secret name.")
    key: str = Field(
        default="token", min_length=1, max_length=253, pattern=SECRET_KEY, description="Key inside the Secret."
    )


class ModelCache(SpecModel):
    """Where downloaded weights live. emptyDir re-downloads per pod; a PVC or hostPath survives restarts."""

    type: Literal["emptyDir", "persistentVolumeClaim", "hostPath"] = "emptyDir"
    claim_name: str | None = Field(
        default=None, max_length=253, pattern=DNS_SUBDOMAIN, description="PVC name when type is persistentVolumeClaim."
    )
    host_path: str | None = Field(
        default=None,
        max_length=512,
        pattern=ABSOLUTE_PATH,
        description="Node directory when type is hostPath; mounted read-only, and only under a path the operator's "
        "settings allow (--allow-host-path).",
    )
    size_limit: str | None = Field(
        default=None, max_length=64, pattern=QUANTITY, description="emptyDir size limit, e.g. 200Gi."
    )
    mount_path: str = Field(
        default="/root/.cache/huggingface", max_length=512, pattern=ABSOLUTE_PATH, description="Mount path (HF_HOME)."
    )
    read_only: bool = False


class ModelSpec(SpecModel):
    path: str = Field(
        min_length=1,
        max_length=512,
        pattern=PATH_NOT_A_FLAG,
        description="Hugging Face model id or local path (--model-path).",
    )
    served_name: str | None = Field(
        default=None,
        max_length=256,
        pattern=NOT_A_FLAG,
        description="Model name clients use (--served-model-name); defaults to path.",
    )
    revision: str | None = Field(
        default=None, max_length=128, pattern=NOT_A_FLAG, description="Model revision (branch, tag or commit)."
    )
    trust_remote_code: bool = False
    token_secret_ref: SecretKeyRef | None = Field(default=None, description="Secret holding the HF token.")
    cache: ModelCache = Field(default_factory=ModelCache)


class EngineSpec(SpecModel):
    image: str | None = Field(
        default=None,
        min_length=1,
        max_length=512,
        pattern=NO_SPACE,
        description=f"The SGLang image. Default: {release_image('<version>')} of engine.version when it is set, "
        f"else {DEFAULT_SGLANG_IMAGE}.",
    )
    version: str | None = Field(
        default=None,
        max_length=32,
        pattern=VERSION_PATTERN,
        description=f"SGLang version of the image ({SUPPORTED_RANGE} supported); picks the launch-flag dialect, the "
        "readiness endpoint and the values SGLang accepts, and without engine.image the image itself. Default: the "
        "version in the image's tag (v0.5.21, v0.5.21-cu129, v0.5.15.post1-cu126); required when the tag names "
        "none (a digest, latest, a private build).",
    )
    port: int = DEFAULT_ENGINE_PORT
    max_running_requests: int | None = Field(default=None, description="--max-running-requests per DP rank.")
    mem_fraction_static: float | None = Field(default=None, description="--mem-fraction-static, in (0, 1).")
    context_length: int | None = None
    startup_timeout_seconds: int = Field(
        default=1800, description="How long weight loading + CUDA graph capture may take before a restart."
    )
    args: list[Arg] = Field(
        default_factory=list,
        max_length=64,
        description="Extra sglang.launch_server arguments, appended; flags the operator sets from other fields are "
        "refused.",
    )
    env: list[EnvVar] = Field(default_factory=list, max_length=64)
    api_key_secret_ref: SecretKeyRef | None = Field(
        default=None,
        description="A Secret holding the workers' API key: SGLang then answers only requests that carry it "
        "(health, readiness and metrics stay open). The key reaches SGLang through the environment, never its "
        "command line; the operator reads it for drain checks and hands it to the router with each worker.",
    )

    @property
    def sglang_image(self) -> str:
        """The image the workers run: `image`, else the release image of `version`, else the default image. A user
        who names only a version means that release's image (it used to be refused as contradicting the default
        image's tag, which the user never wrote)."""
        if self.image is not None:
            return self.image
        return release_image(self.version) if self.version is not None else DEFAULT_SGLANG_IMAGE

    @property
    def sglang_version(self) -> str:
        """The version the image runs: `version`, else the image tag's (validation makes one of them exist)."""
        return self.version or image_tag_version(self.sglang_image) or ""


class ParallelismSpec(SpecModel):
    tp: int = Field(default=1, description="Tensor parallel size (--tp-size).")
    dp: int = Field(default=1, description="In-process data parallel groups on one node (--dp-size).")
    attention_dp: int = Field(default=1, alias="attentionDP", description="Attention data parallel size.")
    ep: int = Field(default=1, description="Expert parallel size inside the tp group (--ep-size).")
    moe_a2a_backend: MoeA2ABackend = Field(default="none", alias="moeA2ABackend")
    dp_lm_head: bool = Field(default=False, description="--enable-dp-lm-head; needs attentionDP > 1.")
    nnodes: int = Field(default=1, description="Nodes (pods) per replica.")


class ResourcesSpec(SpecModel):
    gpu_resource_name: str = Field(
        default="nvidia.com/gpu", alias="gpuResourceName", max_length=253, pattern=EXTENDED_RESOURCE
    )
    gpus_per_node: int = Field(default=8, alias="gpusPerNode", description="GPUs a node offers; bounds GPUs per pod.")
    cpu: str | None = Field(default=None, max_length=64, pattern=QUANTITY)
    memory: str | None = Field(default=None, max_length=64, pattern=QUANTITY)
    shared_memory: str = Field(
        default="16Gi", max_length=64, pattern=QUANTITY, description="Size of the /dev/shm memory volume (NCCL)."
    )


class StickySessions(SpecModel):
    enabled: bool = False
    headers: list[HeaderName] = Field(
        default_factory=lambda: ["x-session-id"], max_length=16, description="Routing-key headers."
    )


class RouterSpec(SpecModel):
    enabled: bool = True
    image: str = Field(default=DEFAULT_ROUTER_IMAGE, min_length=1, max_length=512, pattern=NO_SPACE)
    replicas: int = 1
    policy: RouterPolicy = "cache_aware"
    port: int = DEFAULT_ROUTER_PORT
    metrics_port: int = DEFAULT_ROUTER_METRICS_PORT
    sticky_sessions: StickySessions = Field(default_factory=StickySessions)
    args: list[Arg] = Field(
        default_factory=list,
        max_length=64,
        description="Extra `smg launch` arguments, appended; flags the operator sets are refused.",
    )
    api_key_secret_ref: SecretKeyRef | None = None
    prefill_policy: PrefillPolicy | None = Field(
        default=None,
        description="A prefill/decode fleet's policy for prefill workers (--prefill-policy); default: policy.",
    )
    decode_policy: PrefillPolicy | None = Field(
        default=None,
        description="A prefill/decode fleet's policy for decode workers (--decode-policy); default: policy.",
    )


class DisaggregationSpec(SpecModel):
    """What the prefill and the decode servers of a fleet must agree on to hand KV over: SGLang reads each of these
    on both roles (docs/pd.md). Present exactly when every worker group has a role."""

    transfer_backend: TransferBackend = Field(
        default="mooncake", description="--disaggregation-transfer-backend on both roles (mooncake_tcp from 0.5.13)."
    )
    bootstrap_port: int = Field(
        default=DEFAULT_BOOTSTRAP_PORT,
        description="--disaggregation-bootstrap-port: served by each prefill server; decode servers reach it there.",
    )
    ib_device: str | None = Field(
        default=None,
        max_length=256,
        pattern=NOT_A_FLAG,
        description="--disaggregation-ib-device: the RDMA device(s) the transfer uses (mlx5_0, or a comma list).",
    )
    decode_allocation_policy: Literal["early", "prefill_complete"] | None = Field(
        default=None,
        description="--disaggregation-decode-allocation-policy on both roles (0.5.22 and later; prefill_complete "
        "needs mooncake and tp 1).",
    )
    page_size: int | None = Field(
        default=None,
        description="--page-size on both roles: SGLang refuses a KV transfer between servers of different page "
        "sizes, so a disaggregated fleet sets it here, never in engine.args. Default: SGLang's.",
    )
    kv_cache_dtype: KvCacheDtype | None = Field(
        default=None,
        description="--kv-cache-dtype on both roles (equal on both sides, as the page size). Default: SGLang's.",
    )
    dtype: Literal["auto", "half", "float16", "bfloat16", "float", "float32"] | None = Field(
        default=None,
        description="--dtype on both roles: with the KV dtype at auto it is the KV pages' dtype. Default: SGLang's.",
    )


class AutoscalingTargets(SpecModel):
    """What one replica should carry; the capacity rule ceil(Q x T x (1 + headroom) / C) turns them into replicas."""

    concurrency_per_replica: int | None = Field(
        default=None,
        description="Requests one replica serves at once (C); default maxRunningRequests x DP ranks.",
    )
    headroom: float = Field(
        default=0.3, description="Extra capacity above the stable (rateSeconds) request rate x slot time / C."
    )
    burst_headroom: float = Field(
        default=0.15,
        description="Extra capacity above the peak burstSeconds rate of the last peakLookbackSeconds.",
    )
    queue_per_replica: float = Field(
        default=2.0, description="Queued requests per ready replica tolerated before the queue adds replicas."
    )
    gpu_utilization: int | None = Field(
        default=None, description="Target GPU utilisation percent; can only raise the count."
    )
    prefill_tokens_per_second_per_gpu: int | None = Field(
        default=None,
        alias="prefillTokensPerSecondPerGPU",
        description="A disaggregated fleet's prefill rate: uncached prompt tokens one prefill GPU prefills per "
        "second (a replica of tp x dp GPUs that many times). Default: measured, from the prefill pods' requests "
        "(concurrency x uncached tokens per request / the time a request holds a slot).",
    )
    decode_token_usage: float = Field(
        default=0.85,
        description="A disaggregated fleet's target KV-cache usage of the decode replicas (sglang:token_usage): "
        "decode replicas = ready x usage / this when that is more than their concurrency asks for.",
    )
    inter_token_latency_seconds: float | None = Field(
        default=None,
        description="A disaggregated fleet's mean inter-token latency target for decode "
        "(sglang:inter_token_latency_seconds): above it, decode replicas = ready x latency / this.",
    )
    time_to_first_token_seconds: float | None = Field(
        default=None,
        description="A disaggregated fleet's mean time-to-first-token target for prefill, as the router measures "
        "it (smg_pd_ttft_seconds): above it, prefill replicas = ready x TTFT / this.",
    )


class AutoscalingWindows(SpecModel):
    """Time windows. Rate windows need at least two scrapes: keep them >= 2 x the scrape interval."""

    rate_seconds: int = Field(default=120, description="Window of the stable request rate.")
    slot_time_seconds: int = Field(
        default=600, description="Window of the mean slot time (long: a few long requests make short ones noisy)."
    )
    burst_seconds: int = Field(default=30, description="Short rate window that catches bursts (>= 2 scrape intervals).")
    peak_lookback_seconds: int = Field(default=120, description="How far back the peak burstSeconds rate counts.")
    scale_up_stabilization_seconds: int = Field(
        default=0, description="Scale up only to the lowest recommendation of this window (0: at once)."
    )
    scale_down_stabilization_seconds: int = Field(
        default=300,
        description="Scale down only to the highest recommendation of this window (HPA's default) unless the fleet "
        "was quiet over the last quietLookbackSeconds; then quietScaleDownSeconds applies.",
    )
    quiet_scale_down_seconds: int = Field(
        default=90,
        description="The shorter scale-down window of a quiet fleet: over the last quietLookbackSeconds it met its "
        "SLO (see slo; without that reading: no queue beyond queuePerReplica) and its stable request rate did not "
        "rise by more than quietMaxRise. Capacity that was not short, for traffic that is not coming back, is "
        "released sooner.",
    )
    quiet_lookback_seconds: int = Field(
        default=600,
        description="How far back a fleet must have been quiet before quietScaleDownSeconds applies; longer than the "
        "troughs of periodic traffic, so their capacity is kept for the next rise.",
    )
    quiet_max_rise: float = Field(
        default=0.5,
        description="A fleet whose stable request rate rose by more than this fraction at some point of the quiet "
        "lookback is not quiet: traffic that came back up is periodic, and its next rise would meet a fleet "
        "released in the trough a start-up delay short. A large value disables the test.",
    )
    metrics_max_age_seconds: int = Field(default=60, description="Older samples count as missing (hold).")


class BurstyTraffic(SpecModel):
    """The rule for bursty traffic, which the autoscaler switches to while the busiest `burstSeconds` rate of the
    last `peakLookbackSeconds` is at least `threshold` x the mean rate over `rateSeconds`.

    Bursts that short are over before a replica started for one is ready, so following the current rate only pays
    for late replicas (HPA's and KEDA's cost on the Azure code trace). The fleet is sized for that busiest rate
    instead, with no further headroom (it is already the burst level), a wider tolerance and a shorter scale-down
    window (the lookback itself holds the peak). docs/autoscaling-experiments.md has the measurements behind the
    defaults.
    """

    enabled: bool = True
    threshold: float = Field(
        default=2.25, description="Busiest burstSeconds rate / mean rateSeconds rate at which traffic is bursty."
    )
    rate_seconds: int = Field(default=300, description="Window of the mean rate the threshold compares with.")
    burst_seconds: int = Field(default=60, description="Short rate window whose busiest value sizes the fleet.")
    peak_lookback_seconds: int = Field(default=600, description="How far back the busiest burstSeconds rate counts.")
    tolerance: float = Field(default=0.2, description="The tolerance above the count while traffic is bursty.")
    scale_down_stabilization_seconds: int = Field(
        default=180, description="The scale-down window while traffic is bursty."
    )


class SustainedRise(SpecModel):
    """The rule for a ramp: while the stable rate (`windows.rateSeconds`) has risen by at least `minRise` at each
    of the last `steps` steps of `stepSeconds`, to a new level (more than `minRise` above every reading of the
    series before the rise: a rise back to a recent crest is not a ramp), demand is projected ahead along that rise.

    A replica started now serves only after the start-up delay, and the stable rate itself lags by half its window,
    so a policy that follows the rate is always that far behind a ramp (a morning's traffic). One reading cannot
    tell a ramp from a step or from batch noise; a rise at every step for several minutes can: a step lifts a
    rate window for only as long as the window is, and noise does not rise at every step. `projection` is the
    fraction of the measured slope carried over the start-up delay plus half the rate window (1: all of it).
    Off while the bursty-traffic rule applies. docs/autoscaling-experiments.md has the measurements behind the
    defaults.
    """

    enabled: bool = True
    step_seconds: int = Field(default=60, description="Spacing of the stable-rate readings that are compared.")
    steps: int = Field(default=4, description="How many successive steps the rate must have risen at.")
    min_rise: float = Field(default=0.05, description="The least rise per step, as a fraction of the rate before.")
    projection: float = Field(
        default=0.5, description="Fraction of the rise's slope projected over startupSeconds + rateSeconds / 2."
    )


class ServiceLevel(SpecModel):
    """The service level the workers measure: the share of requests that waited longer than `queueSeconds` for a
    slot, from SGLang's `sglang:queue_time_seconds` histogram (recorded when a request is admitted to a batch).

    It decides how soon surplus capacity goes. While at most `quietMissRatio` of the requests admitted during
    `windows.quietLookbackSeconds` waited longer, the fleet was not short of capacity, and the quiet scale-down
    window applies unless its request rate rose again in the lookback (`windows.quietMaxRise`). Without that
    reading (disabled, no requests, or no histogram bucket at `queueSeconds`) the queue gauge decides instead: no
    queue beyond `targets.queuePerReplica` during the lookback. A gauge sampled every scrape sees a queue that
    served everyone within the SLO as a shortage, and misses one that formed between scrapes.
    docs/autoscaling-experiments.md has the measurements behind the defaults.
    """

    enabled: bool = True
    queue_seconds: float = Field(
        default=1.0,
        description="A request that waits longer than this for a slot misses the SLO. It must be a bucket bound of "
        "sglang:queue_time_seconds (SGLang's: 0.1, 0.2, 0.5, 1, 2, 3, 4, 5, 10, 15, 20, 30, ...).",
    )
    quiet_miss_ratio: float = Field(
        default=0.05,
        description="The quiet scale-down window applies while at most this share of the requests admitted during "
        "windows.quietLookbackSeconds waited longer than queueSeconds.",
    )


class BasicAuthSecretRef(SpecModel):
    """A Secret in the CR's namespace holding a user name and a password."""

    name: str = Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN, description="Secret name.")
    username_key: str = Field(
        default="username", min_length=1, max_length=253, pattern=SECRET_KEY, description="Key of the user name."
    )
    password_key: str = Field(
        default="password", min_length=1, max_length=253, pattern=SECRET_KEY, description="Key of the password."
    )


class CASecretRef(SpecModel):
    """A PEM CA bundle in a Secret of the CR's namespace."""

    name: str = Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN, description="Secret name.")
    key: str = Field(
        default="ca.crt", min_length=1, max_length=253, pattern=SECRET_KEY, description="Key inside the Secret."
    )


class PrometheusAuth(SpecModel):
    """How the autoscaler reaches a Prometheus that asks who it is: a Thanos querier behind kube-rbac-proxy wants a
    bearer token, a Prometheus with a web config basic auth, Mimir and Cortex a tenant header, an internal https
    endpoint its own CA. Credentials live in Secrets of the CR's namespace, never in the spec."""

    bearer_token_secret_ref: SecretKeyRef | None = Field(
        default=None, description="Sent as `Authorization: Bearer <token>`."
    )
    basic_auth_secret_ref: BasicAuthSecretRef | None = Field(default=None, description="HTTP basic auth.")
    headers: dict[str, HeaderValue] = Field(
        default_factory=dict,
        max_length=16,
        description=(
            "Tenant headers: only X-Scope-OrgID (Cortex, Mimir) and THANOS-TENANT (Thanos), case-insensitive. Sent "
            "to the CR's own prometheusURL; to the operator's default Prometheus only where the admin allows it "
            "(--allow-prometheus-headers-to-default)."
        ),
    )
    ca_secret_ref: CASecretRef | None = Field(
        default=None, description="A PEM CA bundle that signed an https Prometheus' certificate."
    )
    insecure_skip_tls_verify: bool = Field(
        default=False, alias="insecureSkipTLSVerify", description="Do not verify an https Prometheus' certificate."
    )


class PrefillGPUShare(SpecModel):
    """The share of a disaggregated fleet's GPUs its prefill replicas may have: a decision outside it is clamped
    (the role below its share grows first; the other shrinks only where bounds or the GPU budget stop that)."""

    min: float = Field(default=0.0, description="Prefill GPUs / all GPUs of the fleet, at least.")
    max: float = Field(default=1.0, description="Prefill GPUs / all GPUs of the fleet, at most.")


class AutoscalingSpec(SpecModel):
    """The operator's own autoscaler; when enabled it owns the replica count (unless `recommendOnly`) and writes
    only status."""

    enabled: bool = False
    recommend_only: bool = Field(
        default=False,
        description=(
            "Decide and report (status.autoscaler, events) but leave the count to spec.replicas, so it can run "
            "beside an existing HPA or KEDA on real traffic before it is handed the fleet."
        ),
    )
    min_replicas: int = Field(default=1, description="0 allows scale to zero; the router's request rate wakes it.")
    max_replicas: int = 10
    max_gpus: int | None = Field(default=None, alias="maxGPUs", description="GPU budget for the whole fleet.")
    warm_replicas: int = Field(
        default=0, description="Started, ready but unregistered replicas, promoted at once on scale-up."
    )
    prometheus_url: str | None = Field(
        default=None,
        alias="prometheusURL",
        max_length=2048,
        pattern=PROMETHEUS_URL,
        description="This CR's own Prometheus (http or https, no credentials in the URL); used only when the "
        "operator's settings allow it (--allow-prometheus-url), else the operator's default is.",
    )
    prometheus_auth: PrometheusAuth = Field(default_factory=PrometheusAuth)
    interval_seconds: int = Field(default=15, description="How often the autoscaler reads metrics and decides.")
    tolerance: float = Field(default=0.1, description="No change while demand is within this fraction of the count.")
    scale_down_tolerance: float | None = Field(
        default=None,
        description="A wider band below the count (hysteresis against early scale-down); default: tolerance.",
    )
    panic_threshold: float = Field(
        default=2.0,
        description="Burst demand / ready capacity at which panic mode lifts the scale-up step limit.",
    )
    max_scale_up_step: int = Field(
        default=4, description="Replicas added per interval outside panic (or +100 %, whichever is more)."
    )
    startup_seconds: int = Field(default=120, description="Expected time for a new replica to become ready.")
    targets: AutoscalingTargets = Field(default_factory=AutoscalingTargets)
    windows: AutoscalingWindows = Field(default_factory=AutoscalingWindows)
    bursty_traffic: BurstyTraffic = Field(default_factory=BurstyTraffic)
    sustained_rise: SustainedRise = Field(default_factory=SustainedRise)
    slo: ServiceLevel = Field(default_factory=ServiceLevel)
    prefill_gpu_share: PrefillGPUShare | None = Field(
        default=None,
        alias="prefillGPUShare",
        description="A disaggregated fleet's range for prefill GPUs / all its GPUs (fractions); none: any.",
    )


class UpdateStrategy(SpecModel):
    max_surge: int = 1
    max_unavailable: int = 0
    drain_timeout_seconds: int = 120


# A Prometheus duration of hours, minutes, seconds and milliseconds, each at most once and in that order (what
# Prometheus' own parser and prometheus-operator's PodMonitor schema accept); six digits a part keep the total within
# a Go duration, so CEL's `duration()` reads every string the pattern admits.
PROMETHEUS_DURATION = r"^([0-9]{1,6}h)?([0-9]{1,6}m)?([0-9]{1,6}s)?([0-9]{1,6}ms)?$"
_DURATION_MS = {"h": 3_600_000, "m": 60_000, "s": 1_000, "ms": 1}


def duration_ms(text: str) -> int | None:
    """A PROMETHEUS_DURATION in milliseconds (`1m30s` -> 90000), None for anything else (the empty string too)."""
    match = re.fullmatch(PROMETHEUS_DURATION, text)
    if not text or match is None:
        return None
    parts = [re.fullmatch(r"([0-9]+)(ms|h|m|s)", part) for part in match.groups() if part]
    return sum(int(part[1]) * _DURATION_MS[part[2]] for part in parts if part is not None)


class MonitoringSpec(SpecModel):
    pod_monitor: bool = Field(default=False, description="Render a prometheus-operator PodMonitor.")
    interval: str = Field(
        default="15s",
        min_length=2,
        max_length=16,
        pattern=PROMETHEUS_DURATION,
        description="The PodMonitor's scrape interval, a Prometheus duration from 5s to 10m (e.g. 15s, 1m30s).",
    )


class NetworkPolicySpec(SpecModel):
    """A NetworkPolicy for the fleet's workers: reachable only from the fleet's own routers, the operator and
    Prometheus (as the operator's settings name them), so the router's API key cannot be bypassed by calling a
    worker directly."""

    enabled: bool = Field(default=False, description="Render a NetworkPolicy that isolates the workers.")


GROUP_NAME = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
MAX_WORKER_GROUPS = 8


class GroupEngineSpec(SpecModel):
    """The engine fields a worker group may set for itself. Each one given replaces the top level's whole (a group's
    `args` are its args, not appended to the top level's); the image, version, port and model are the fleet's."""

    max_running_requests: int | None = Field(default=None, description="--max-running-requests per DP rank.")
    mem_fraction_static: float | None = Field(default=None, description="--mem-fraction-static, in (0, 1).")
    args: list[Arg] | None = Field(
        default=None,
        max_length=32,
        description="This group's extra launch arguments (32 at most: each is checked per group at admission).",
    )
    env: list[EnvVar] | None = Field(default=None, max_length=64, description="This group's extra environment.")


class GroupScaling(SpecModel):
    """The bounds the built-in autoscaler keeps this group within when it sizes the fleet."""

    min_replicas: int = Field(default=0, description="Replicas this group keeps at least.")
    max_replicas: int = Field(default=10, description="Replicas this group grows to at most.")


class WorkerGroupSpec(SpecModel):
    """Replicas of one shape. A group states its parallelism; every other field it leaves out is the top level's
    (docs/decisions.md, "Worker groups")."""

    name: str = Field(
        min_length=1,
        max_length=15,
        pattern=GROUP_NAME,
        description="A DNS label, unique in the fleet; pod names and the sglang.ai/group label carry it.",
    )
    role: Role | None = Field(
        default=None,
        description="prefill or decode in a disaggregated fleet (spec.disaggregation): every group has one, or none.",
    )
    replicas: int | None = Field(
        default=None,
        description="This group's replica count. At most one group leaves it out: that group follows spec.replicas, "
        "so `kubectl scale` and the /scale subresource size it.",
    )
    parallelism: ParallelismSpec
    resources: ResourcesSpec | None = None
    engine: GroupEngineSpec | None = None
    template: PodTemplateOverrides | None = None
    update_strategy: UpdateStrategy | None = None
    autoscaling: GroupScaling = Field(default_factory=GroupScaling)


class SGLangDeploymentSpec(SpecModel):
    model: ModelSpec
    engine: EngineSpec = Field(default_factory=EngineSpec)
    parallelism: ParallelismSpec = Field(default_factory=ParallelismSpec)
    resources: ResourcesSpec = Field(default_factory=ResourcesSpec)
    replicas: int = Field(default=1, description="Independent server replicas (outer DP).")
    router: RouterSpec = Field(default_factory=RouterSpec)
    autoscaling: AutoscalingSpec = Field(default_factory=AutoscalingSpec)
    template: PodTemplateOverrides = Field(default_factory=PodTemplateOverrides)
    update_strategy: UpdateStrategy = Field(default_factory=UpdateStrategy)
    monitoring: MonitoringSpec = Field(default_factory=MonitoringSpec)
    network_policy: NetworkPolicySpec = Field(default_factory=NetworkPolicySpec)
    inference_pool: InferencePoolSpec = Field(default_factory=InferencePoolSpec)
    diagnostics: DiagnosticsSpec = Field(default_factory=DiagnosticsSpec)
    disaggregation: DisaggregationSpec | None = Field(
        default=None,
        description="Prefill/decode disaggregation: present exactly when every worker group has a role. A fleet "
        "cannot switch between colocated and disaggregated (the router's mode is fixed at start): create a new one.",
    )
    worker_groups: list[WorkerGroupSpec] = Field(
        default_factory=list,
        max_length=MAX_WORKER_GROUPS,
        description="Replicas of different shapes behind the one router (e.g. tp=4 and tp=2 on one node). Empty: "
        "the top-level fields are the one group.",
    )

    @property
    def served_model_name(self) -> str:
        return self.model.served_name or self.model.path

    @property
    def disaggregated(self) -> bool:
        """Prefill/decode: the router runs in PD mode and each group serves one role."""
        return self.disaggregation is not None
