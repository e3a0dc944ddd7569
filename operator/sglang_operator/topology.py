"""Parallelism -> GPUs, pods and the exact `sglang.launch_server` command line, per SGLang flag dialect.

Pure arithmetic over a parsed spec. The rules follow SGLang 0.5.23 (see shared/reference/sglang-server.md):
GPUs per replica = tp x dp (attention DP and EP live inside the tp group and add none); a multi-node replica
spreads tp over `nnodes` pods; only rank 0 serves HTTP.
"""

from dataclasses import dataclass

from .api.constants import DIST_INIT_PORT
from .api.groups import PdRole
from .api.releases import ATTN_DP_FLAG_SINCE, READY_ENDPOINT_SINCE, parse_version
from .api.spec import SGLangDeploymentSpec
from .capacity import DEFAULT_MAX_RUNNING_REQUESTS as DEFAULT_MAX_RUNNING_REQUESTS  # re-exported, one number
from .capacity import concurrency_per_replica as _sglang_concurrency


@dataclass(frozen=True)
class Topology:
    """The shape of one replica and of the fleet."""

    gpus_per_replica: int
    pods_per_replica: int
    gpus_per_pod: int
    concurrency_per_replica: int

    def total_gpus(self, replicas: int) -> int:
        return self.gpus_per_replica * replicas


def topology(spec: SGLangDeploymentSpec) -> Topology:
    par = spec.parallelism
    gpus_per_replica = par.tp * par.dp
    nnodes = max(par.nnodes, 1)
    return Topology(
        gpus_per_replica=gpus_per_replica,
        pods_per_replica=nnodes,
        gpus_per_pod=-(-gpus_per_replica // nnodes),  # ceil; validation makes it exact
        concurrency_per_replica=concurrency_per_replica(spec),
    )


def concurrency_per_replica(spec: SGLangDeploymentSpec) -> int:
    """C of the capacity rule: requests one replica runs at once, as SGLang computes it (`capacity`): an explicit
    autoscaling target wins; `maxRunningRequests` is divided across attention-DP ranks and kept whole by each
    in-process DP replica; without it, the default applies per scheduler."""
    return _sglang_concurrency(spec)


def readiness_path(version: str) -> str:
    """`/ready` is a flag check (cheap, exact) from 0.5.20; before that only `/health` exists."""
    return "/ready" if parse_version(version) >= READY_ENDPOINT_SINCE else "/health"


def uses_attn_dp_flag(version: str) -> bool:
    return parse_version(version) >= ATTN_DP_FLAG_SINCE


def launch_args(
    spec: SGLangDeploymentSpec, node_rank: int = 0, dist_init_host: str | None = None, pd: PdRole | None = None
) -> list[str]:
    """The full command of one worker pod: `python3 -m sglang.launch_server` and its flags, user args last. `pd`:
    the group's role in a disaggregated fleet."""
    engine = spec.engine
    args = [
        "python3", "-m", "sglang.launch_server",
        "--model-path", spec.model.path,
        "--served-model-name", spec.served_model_name,
        "--host", "0.0.0.0",
        "--port", str(engine.port),
    ]  # fmt: skip
    args += parallelism_args(spec)
    args += multi_node_args(spec, node_rank, dist_init_host)
    args += engine_args(spec)
    args += disaggregation_args(spec, pd)
    args.append("--enable-metrics")
    return args + list(engine.args)


def parallelism_args(spec: SGLangDeploymentSpec) -> list[str]:
    """TP, in-process DP, DP-attention in the release's dialect, EP, the all-to-all backend and the DP LM head."""
    par = spec.parallelism
    args = ["--tp-size", str(par.tp)]
    if par.dp > 1:
        args += ["--dp-size", str(par.dp)]
    if par.attention_dp > 1:
        if uses_attn_dp_flag(spec.engine.sglang_version):
            args += ["--attn-dp-size", str(par.attention_dp)]
        else:
            args += ["--dp-size", str(par.attention_dp), "--enable-dp-attention"]
    if par.ep > 1:
        args += ["--ep-size", str(par.ep)]
    if par.moe_a2a_backend != "none":
        args += ["--moe-a2a-backend", par.moe_a2a_backend]
    if par.dp_lm_head:
        args.append("--enable-dp-lm-head")
    return args


def multi_node_args(spec: SGLangDeploymentSpec, node_rank: int, dist_init_host: str | None) -> list[str]:
    """A replica over several nodes: its node count, this pod's rank and rank 0's address; none on one node."""
    nnodes = spec.parallelism.nnodes
    if nnodes <= 1:
        return []
    if dist_init_host is None:
        raise ValueError("a multi-node replica needs the rank-0 host for --dist-init-addr")
    return [
        "--nnodes", str(nnodes),
        "--node-rank", str(node_rank),
        "--dist-init-addr", f"{dist_init_host}:{DIST_INIT_PORT}",
    ]  # fmt: skip


def engine_args(spec: SGLangDeploymentSpec) -> list[str]:
    """The engine's typed settings and the model's revision and trust, each only when set."""
    engine, model = spec.engine, spec.model
    args: list[str] = []
    if engine.max_running_requests is not None:
        args += ["--max-running-requests", str(engine.max_running_requests)]
    if engine.mem_fraction_static is not None:
        args += ["--mem-fraction-static", repr(engine.mem_fraction_static)]
    if engine.context_length is not None:
        args += ["--context-length", str(engine.context_length)]
    if model.revision:
        args += ["--revision", model.revision]
    if model.trust_remote_code:
        args.append("--trust-remote-code")
    return args


def disaggregation_args(spec: SGLangDeploymentSpec, pd: PdRole | None) -> list[str]:
    """A disaggregated group's role and what both roles agree on (`spec.disaggregation`, the KV contract: rendered
    alike on both roles), each only when set. The bootstrap port is the prefill server's (decode reads it from each
    request); SGLang 0.5.9's prefill is told the decode shape."""
    dis = spec.disaggregation
    if pd is None or dis is None:
        return []
    args = ["--disaggregation-mode", pd.role, "--disaggregation-transfer-backend", dis.transfer_backend]
    if pd.role == "prefill":
        args += ["--disaggregation-bootstrap-port", str(dis.bootstrap_port)]
        if pd.decode_shape is not None:
            tp, dp = pd.decode_shape
            args += ["--disaggregation-decode-tp", str(tp), "--disaggregation-decode-dp", str(dp)]
    if dis.ib_device is not None:
        args += ["--disaggregation-ib-device", dis.ib_device]
    if dis.decode_allocation_policy is not None:
        args += ["--disaggregation-decode-allocation-policy", dis.decode_allocation_policy]
    if dis.page_size is not None:
        args += ["--page-size", str(dis.page_size)]
    if dis.kv_cache_dtype is not None:
        args += ["--kv-cache-dtype", dis.kv_cache_dtype]
    if dis.dtype is not None:
        args += ["--dtype", dis.dtype]
    return args
