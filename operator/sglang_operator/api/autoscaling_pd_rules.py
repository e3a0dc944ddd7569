"""The autoscaler's rules for a prefill/decode fleet, each with its CEL twin: the per-role targets and the prefill GPU
share (docs/autoscaling.md, "Prefill/decode fleets"). Part of `validation.RULES`.

Every number is bounded above (as `limits` bounds the others), and every target a reading is divided by is bounded
below by a physical floor (`limits.MIN_LATENCY_TARGET_SECONDS`, `limits.MIN_DECODE_TOKEN_USAGE`), not just above 0:
a target of 5e-324 passes "> 0", and a real reading divided by it is infinite (issue 37). The fields that only a
disaggregated fleet reads are refused on a colocated one, as `router.prefillPolicy` is, so a CR never carries a
setting that does nothing.
"""

from collections.abc import Callable

from .limits import MIN_DECODE_TOKEN_USAGE, MIN_LATENCY_TARGET_SECONDS
from .rule import Rule
from .spec import SGLangDeploymentSpec

MAX_PREFILL_TOKENS_PER_SECOND_PER_GPU = 10_000_000
MAX_INTER_TOKEN_LATENCY_SECONDS = 60.0
MAX_TIME_TO_FIRST_TOKEN_SECONDS = 600.0

_TARGETS = "self.autoscaling.targets"
_SHARE = "self.autoscaling.prefillGPUShare"
_ONLY_PD = "applies only to a disaggregated fleet (spec.disaggregation): a colocated fleet has no {what}; drop it."


def _only_pd(field: str, what: str, get: Callable[[SGLangDeploymentSpec], object]) -> Rule:
    """`field` (optional) is refused on a colocated fleet."""
    return Rule(
        field=field,
        message=_ONLY_PD.format(what=what),
        cel=f"has(self.disaggregation) || !has(self{field.removeprefix('spec')})",
        holds=lambda s: s.disaggregation is not None or get(s) is None,
    )


def _latency_target(
    name: str, maximum: float, meaning: str, get: Callable[[SGLangDeploymentSpec], float | None]
) -> Rule:
    """`targets.<name>` (optional, seconds) is at least MIN_LATENCY_TARGET_SECONDS and at most `maximum`."""
    target, least = f"{_TARGETS}.{name}", MIN_LATENCY_TARGET_SECONDS
    return Rule(
        field=f"spec.autoscaling.targets.{name}",
        message=f"must be at least {least:g} (1 ms, below any server's mean; readings are divided by it) and at most "
        f"{maximum:g}: {meaning}",
        cel=f"!has({target}) || ({target} >= {least!r} && {target} <= {maximum:.1f})",
        holds=lambda s: (value := get(s)) is None or least <= value <= maximum,
    )


AUTOSCALING_PD_RULES: tuple[Rule, ...] = (
    Rule(
        field="spec.autoscaling.targets.prefillTokensPerSecondPerGPU",
        message=f"must be at least 1 and at most {MAX_PREFILL_TOKENS_PER_SECOND_PER_GPU}: it is the uncached prompt "
        "tokens one prefill GPU prefills per second; measure it, or leave it out to have it measured.",
        cel=f"!has({_TARGETS}.prefillTokensPerSecondPerGPU) || ({_TARGETS}.prefillTokensPerSecondPerGPU >= 1 && "
        f"{_TARGETS}.prefillTokensPerSecondPerGPU <= {MAX_PREFILL_TOKENS_PER_SECOND_PER_GPU})",
        holds=lambda s: (
            (value := s.autoscaling.targets.prefill_tokens_per_second_per_gpu) is None
            or 1 <= value <= MAX_PREFILL_TOKENS_PER_SECOND_PER_GPU
        ),
    ),
    Rule(
        field="spec.autoscaling.targets.decodeTokenUsage",
        message=f"must be at least {MIN_DECODE_TOKEN_USAGE:g} (1 %; readings are divided by it) and at most 1: it is "
        "the share of a decode replica's KV cache (sglang:token_usage) the autoscaler aims at.",
        cel=f"{_TARGETS}.decodeTokenUsage >= {MIN_DECODE_TOKEN_USAGE!r} && {_TARGETS}.decodeTokenUsage <= 1.0",
        holds=lambda s: MIN_DECODE_TOKEN_USAGE <= s.autoscaling.targets.decode_token_usage <= 1.0,
    ),
    _latency_target(
        "interTokenLatencySeconds",
        MAX_INTER_TOKEN_LATENCY_SECONDS,
        "it is the mean time between two output tokens the decode replicas should keep to, in seconds (0.05 is 50 ms).",
        lambda s: s.autoscaling.targets.inter_token_latency_seconds,
    ),
    _latency_target(
        "timeToFirstTokenSeconds",
        MAX_TIME_TO_FIRST_TOKEN_SECONDS,
        "it is the mean time to the first token the router (smg_pd_ttft_seconds) should see, in seconds (0.5 is "
        "500 ms).",
        lambda s: s.autoscaling.targets.time_to_first_token_seconds,
    ),
    Rule(
        field="spec.autoscaling.prefillGPUShare.min",
        message="must be at least 0 and at most 1: it is a fraction of the fleet's GPUs (0.25 is a quarter).",
        cel=f"!has({_SHARE}) || !has({_SHARE}.min) || ({_SHARE}.min >= 0.0 && {_SHARE}.min <= 1.0)",
        holds=lambda s: (share := s.autoscaling.prefill_gpu_share) is None or 0.0 <= share.min <= 1.0,
    ),
    Rule(
        field="spec.autoscaling.prefillGPUShare.max",
        message="must be at least 0 and at most 1: it is a fraction of the fleet's GPUs (0.75 is three quarters).",
        cel=f"!has({_SHARE}) || !has({_SHARE}.max) || ({_SHARE}.max >= 0.0 && {_SHARE}.max <= 1.0)",
        holds=lambda s: (share := s.autoscaling.prefill_gpu_share) is None or 0.0 <= share.max <= 1.0,
    ),
    Rule(
        field="spec.autoscaling.prefillGPUShare",
        message="min cannot be above max: no split of the GPUs would satisfy both; lower min or raise max.",
        cel=f"!has({_SHARE}) || !has({_SHARE}.min) || !has({_SHARE}.max) || {_SHARE}.min <= {_SHARE}.max",
        holds=lambda s: (share := s.autoscaling.prefill_gpu_share) is None or share.min <= share.max,
    ),
    _only_pd("spec.autoscaling.prefillGPUShare", "prefill GPUs to share", lambda s: s.autoscaling.prefill_gpu_share),
    _only_pd(
        "spec.autoscaling.targets.prefillTokensPerSecondPerGPU",
        "prefill servers",
        lambda s: s.autoscaling.targets.prefill_tokens_per_second_per_gpu,
    ),
    _only_pd(
        "spec.autoscaling.targets.timeToFirstTokenSeconds",
        "router time to first token of a prefill/decode pair (its autoscaler sizes on request rate and slot time)",
        lambda s: s.autoscaling.targets.time_to_first_token_seconds,
    ),
    _only_pd(
        "spec.autoscaling.targets.interTokenLatencySeconds",
        "decode servers (its autoscaler sizes them on request rate and slot time)",
        lambda s: s.autoscaling.targets.inter_token_latency_seconds,
    ),
)
