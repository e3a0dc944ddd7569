"""The rules of a prefill/decode fleet, each with its CEL twin: what both roles must agree on, what the release the
image runs accepts, and what smg in PD mode can start with. Part of `validation.RULES`.

A fleet is disaggregated when `spec.disaggregation` is present; then every worker group has a role and both roles
are there. What a KV handoff depends on (transfer backend, page size, KV-cache dtype, model dtype) is a field of
`spec.disaggregation`, rendered on both roles, so two groups cannot disagree on it: SGLang would only find out at
the first transfer and fail every request, or (the model dtype) never, handing over pages of another dtype
(docs/pd.md); a change of it cuts the fleet over whole (`kvepoch.py`).
`TRANSITION_RULES` need the stored object too: the API server checks them on update (`oldSelf`), `validate --old`
does the same.
"""

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from .constants import DIST_INIT_PORT
from .release_rules import UNKNOWN_VERSION_CEL, between_cel, runs_between
from .releases import (
    DECODE_ALLOCATION_POLICY_SINCE,
    DP_ATTENTION_HANDSHAKE_DELTA,
    DP_ATTENTION_MULTI_NODE_PORTS,
    DP_ATTENTION_PORT_DELTA,
    DP_ATTENTION_PORTS,
    KV_CACHE_DTYPES,
    MOONCAKE_TCP_SINCE,
    NEWEST_SUPPORTED,
    OLDEST_SUPPORTED,
    PAGE_SIZE_BACKENDS,
    PD_DECODE_SHAPE_UNTIL,
    format_version,
)
from .reserved import owned_flag, owned_flag_cel
from .rule import FieldError, Rule
from .spec import SGLangDeploymentSpec, WorkerGroupSpec

KV_CONTRACT_FLAGS: Final[dict[str, str]] = {
    "--page-size": "spec.disaggregation.pageSize",
    "--kv-cache-dtype": "spec.disaggregation.kvCacheDtype",
    "--dtype": "spec.disaggregation.dtype",
}
"""Flags both roles must give alike; a disaggregated fleet sets them in `spec.disaggregation`, not in args."""

_PD = "!has(self.disaggregation) || "
_GROUPS = "has(self.workerGroups) && size(self.workerGroups) > 0"
_DIS = "self.disaggregation"


def _roles(spec: SGLangDeploymentSpec) -> set[str]:
    return {g.role for g in spec.worker_groups if g.role is not None}


def _of_role(spec: SGLangDeploymentSpec, role: str) -> list[WorkerGroupSpec]:
    return [g for g in spec.worker_groups if g.role == role]


def sglang_dp_size(group: WorkerGroupSpec) -> int:
    """The `--dp-size` SGLang sees: attention DP where it is on (0.5.9 spells it `--dp-size N --enable-dp-attention`),
    else the in-process DP."""
    return group.parallelism.attention_dp if group.parallelism.attention_dp > 1 else group.parallelism.dp


_DP_SIZE_CEL = "({g}.parallelism.attentionDP > 1 ? {g}.parallelism.attentionDP : {g}.parallelism.dp)"


def _one_decode_shape(spec: SGLangDeploymentSpec) -> bool:
    return len({(g.parallelism.tp, sglang_dp_size(g)) for g in _of_role(spec, "decode")}) <= 1


def _tp_divides(spec: SGLangDeploymentSpec) -> bool:
    return all(
        max(p.parallelism.tp, d.parallelism.tp) % min(p.parallelism.tp, d.parallelism.tp) == 0
        for p in _of_role(spec, "prefill")
        for d in _of_role(spec, "decode")
    )


def _kv_dtype_available(spec: SGLangDeploymentSpec) -> bool:
    dis = spec.disaggregation
    if dis is None or dis.kv_cache_dtype is None or not spec.engine.sglang_version:
        return True
    first, last = KV_CACHE_DTYPES[dis.kv_cache_dtype]
    return runs_between(spec, first, last)


def dp_attention_ports(spec: SGLangDeploymentSpec, group: WorkerGroupSpec) -> set[int]:
    """The ports a group's first node binds for attention DP (none without it): SGLang's ZMQ ports from `--port` +
    233 on one node, from the `--dist-init-addr` port (`DIST_INIT_PORT`) over several, and the DP controller's
    handshake 13 above either (`releases.DP_ATTENTION_*`). A prefill's bootstrap server cannot bind one of them."""
    if group.parallelism.attention_dp <= 1:
        return set()
    if group.parallelism.nnodes > 1:
        return {*range(DIST_INIT_PORT, DIST_INIT_PORT + DP_ATTENTION_MULTI_NODE_PORTS), DIST_INIT_PORT + _HANDSHAKE}
    first = spec.engine.port + DP_ATTENTION_PORT_DELTA
    return {*range(first, first + DP_ATTENTION_PORTS), spec.engine.port + _HANDSHAKE}


_HANDSHAKE = DP_ATTENTION_HANDSHAKE_DELTA
_LAST = DIST_INIT_PORT + DP_ATTENTION_MULTI_NODE_PORTS - 1
_LAST_ONE_NODE = DP_ATTENTION_PORT_DELTA + DP_ATTENTION_PORTS - 1
_DP_PORTS_CEL = (
    f"{_PD}!has(self.workerGroups) || self.workerGroups.all(g, !has(g.role) || g.role != 'prefill' || "
    f"g.parallelism.attentionDP < 2 || [g.parallelism.nnodes > 1].all(m, [{_DIS}.bootstrapPort - (m ? "
    f"{DIST_INIT_PORT} : self.engine.port + {DP_ATTENTION_PORT_DELTA})].all(o, (o < 0 || o > (m ? "
    f"{DP_ATTENTION_MULTI_NODE_PORTS - 1} : {DP_ATTENTION_PORTS - 1})) && o != (m ? {_HANDSHAKE} : "
    f"{_HANDSHAKE - DP_ATTENTION_PORT_DELTA}))))"
)
"""`dp_attention_ports` over the prefill groups, as the bootstrap port's offset `o` from the first of those ports
(`[x].all(v, ...)` names a value once)."""

_BACKEND_FLAG = r"(^|\n)--(prefill-a|decode-a|attention-b)[a-z-]*[=\n]"
"""An attention backend flag (`--attention-backend`, `--prefill-`/`--decode-attention-backend`, or a prefix argparse
takes: no other flag of a supported release starts with these) and the start of its value (after `=`, or the next
argument), in the arguments joined by newlines (an argument holds none)."""


def _by_sizes(backends: dict[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
    """The backends that keep the same page sizes, as one alternation (`trtllm_mla|cutedsl_mla`) -> those sizes."""
    same: dict[tuple[int, ...], list[str]] = {}
    for backend, sizes in backends.items():
        same.setdefault(sizes, []).append(backend)
    return {"|".join(names): sizes for sizes, names in same.items()}


_BACKEND_SIZES = _by_sizes(PAGE_SIZE_BACKENDS)


def _backend_keeps_page_size(spec: SGLangDeploymentSpec) -> bool:
    dis = spec.disaggregation
    if dis is None or dis.page_size is None:
        return True
    joined = "\n".join(spec.engine.args)
    return all(
        dis.page_size in sizes or not re.search(rf"{_BACKEND_FLAG}({backends})(\n|$)", joined)
        for backends, sizes in _BACKEND_SIZES.items()
    )


_BACKEND_CEL = (
    f"{_PD}!has({_DIS}.pageSize) || !has(self.engine.args) || ["
    + ", ".join(f"'{','.join(map(str, sizes))}:{backends}'" for backends, sizes in _BACKEND_SIZES.items())
    + f"].all(e, string({_DIS}.pageSize) in e.split(':')[0].split(',') || !self.engine.args.join('\\n')"
    rf".matches(r'{_BACKEND_FLAG}(' + e.split(':')[1] + r')(\n|$)'))"
)
"""`_backend_keeps_page_size`: each entry is `sizes:alternation`, one string, so that the list is written once."""

_KV_DTYPE_CEL = (
    "{"
    + ", ".join(f"'{dtype}': {between_cel(first, last)}" for dtype, (first, last) in sorted(KV_CACHE_DTYPES.items()))
    + "}"
)
_POLICY_POWER_OF_TWO = (
    "cannot be power_of_two: smg exits at start ('Power-of-two policy for {role} requires at least 2 {role} "
    "workers'), and in a disaggregated fleet the router starts with none (the operator registers each ready worker); "
    "use least_load or cache_aware."
)

DISAGGREGATION_RULES: tuple[Rule, ...] = (
    Rule(
        field="spec.workerGroups",
        message="either every worker group has a role (prefill or decode) or none has: a disaggregated fleet serves "
        "each request on one prefill and one decode server, so a group without a role would serve nothing; give "
        "each group a role, or drop the roles.",
        cel="!has(self.workerGroups) || self.workerGroups.all(g, has(g.role)) || "
        "self.workerGroups.all(g, !has(g.role))",
        holds=lambda s: len({g.role is None for g in s.worker_groups}) <= 1,
    ),
    Rule(
        field="spec.disaggregation",
        message="needs workerGroups with roles: the implicit group of the top-level fields has none; declare a "
        "prefill group and a decode group.",
        cel=f"{_PD}({_GROUPS} && self.workerGroups.exists(g, has(g.role)))",
        holds=lambda s: s.disaggregation is None or bool(_roles(s)),
    ),
    Rule(
        field="spec.workerGroups",
        message="worker groups with roles make a disaggregated fleet, which needs spec.disaggregation (what both "
        "roles agree on; `disaggregation: {}` takes the defaults); add it, or drop the roles.",
        cel=f"!({_GROUPS}) || !self.workerGroups.all(g, has(g.role)) || has(self.disaggregation)",
        holds=lambda s: not s.worker_groups or not all(g.role for g in s.worker_groups) or s.disaggregation is not None,
    ),
    Rule(
        field="spec.workerGroups",
        message="a disaggregated fleet needs at least one prefill group and one decode group: the router pairs "
        "each request's prefill with a decode, and answers 503 while one role is missing; add the missing role.",
        cel=f"{_PD}!({_GROUPS}) || !self.workerGroups.all(g, has(g.role)) || "
        "(self.workerGroups.exists(g, g.role == 'prefill') && self.workerGroups.exists(g, g.role == 'decode'))",
        holds=lambda s: (
            s.disaggregation is None
            or not s.worker_groups
            or not all(g.role for g in s.worker_groups)
            or _roles(s) == {"prefill", "decode"}
        ),
    ),
    Rule(
        field="spec.disaggregation.transferBackend",
        message="cannot be fake: it moves no KV (a test backend, which prefill servers refuse at start-up from "
        "SGLang 0.5.10); use mooncake, nixl, mori, ascend or mooncake_tcp.",
        cel=f"{_PD}{_DIS}.transferBackend != 'fake'",
        holds=lambda s: s.disaggregation is None or s.disaggregation.transfer_backend != "fake",
    ),
    Rule(
        field="spec.disaggregation.transferBackend",
        message=f"mooncake_tcp is accepted from SGLang {format_version(MOONCAKE_TCP_SINCE)}: the release the image "
        "runs does not have it; use mooncake, or a newer image.",
        cel=f"{_PD}{_DIS}.transferBackend != 'mooncake_tcp' || {UNKNOWN_VERSION_CEL} || "
        f"{between_cel(MOONCAKE_TCP_SINCE)}",
        holds=lambda s: (
            s.disaggregation is None
            or s.disaggregation.transfer_backend != "mooncake_tcp"
            or not s.engine.sglang_version
            or runs_between(s, MOONCAKE_TCP_SINCE)
        ),
    ),
    Rule(
        field="spec.disaggregation.decodeAllocationPolicy",
        message=f"is accepted from SGLang {format_version(DECODE_ALLOCATION_POLICY_SINCE)}: the release the image "
        "runs allocates early and has no such flag; drop it, or use a newer image.",
        cel=f"{_PD}!has({_DIS}.decodeAllocationPolicy) || {UNKNOWN_VERSION_CEL} || "
        f"{between_cel(DECODE_ALLOCATION_POLICY_SINCE)}",
        holds=lambda s: (
            s.disaggregation is None
            or s.disaggregation.decode_allocation_policy is None
            or not s.engine.sglang_version
            or runs_between(s, DECODE_ALLOCATION_POLICY_SINCE)
        ),
    ),
    Rule(
        field="spec.disaggregation.decodeAllocationPolicy",
        message="prefill_complete needs the mooncake backend and tp 1 in every group, as SGLang checks at start-up "
        "(0.5.22 and 0.5.23 read attention TP as tp, before attention DP divides it, so any tp above 1 is refused); "
        "use early, or change the backend or the groups' parallelism.",
        cel=f"{_PD}!has({_DIS}.decodeAllocationPolicy) || {_DIS}.decodeAllocationPolicy != 'prefill_complete' || "
        f"({_DIS}.transferBackend == 'mooncake' && (!has(self.workerGroups) || "
        "self.workerGroups.all(g, g.parallelism.tp == 1)))",
        holds=lambda s: (
            s.disaggregation is None
            or s.disaggregation.decode_allocation_policy != "prefill_complete"
            or (s.disaggregation.transfer_backend == "mooncake" and all(g.parallelism.tp == 1 for g in s.worker_groups))
        ),
    ),
    Rule(
        field="spec.disaggregation.bootstrapPort",
        message=f"must be a TCP port between 1 and 65535 other than engine.port and {DIST_INIT_PORT} (the "
        "multi-node rendezvous): each prefill server listens on it beside those; pick a free port.",
        cel=f"{_PD}({_DIS}.bootstrapPort >= 1 && {_DIS}.bootstrapPort <= 65535 && "
        f"{_DIS}.bootstrapPort != self.engine.port && {_DIS}.bootstrapPort != {DIST_INIT_PORT})",
        holds=lambda s: (
            s.disaggregation is None
            or (
                1 <= s.disaggregation.bootstrap_port <= 65535
                and s.disaggregation.bootstrap_port not in (s.engine.port, DIST_INIT_PORT)
            )
        ),
    ),
    Rule(
        field="spec.disaggregation.bootstrapPort",
        message="must be outside the ports SGLang binds for attention DP on a prefill group's first node (engine.port "
        f"+ {_HANDSHAKE} and + {DP_ATTENTION_PORT_DELTA} to + {_LAST_ONE_NODE} on one node; {DIST_INIT_PORT} to "
        f"{_LAST} and {DIST_INIT_PORT + _HANDSHAKE} over several): the bootstrap server could not bind it there; pick "
        "another port.",
        cel=_DP_PORTS_CEL,
        holds=lambda s: (
            s.disaggregation is None
            or all(s.disaggregation.bootstrap_port not in dp_attention_ports(s, g) for g in _of_role(s, "prefill"))
        ),
    ),
    Rule(
        field="spec.disaggregation.pageSize",
        message="must be at least 1 and at most 4096: it is SGLang's --page-size (tokens per KV page).",
        cel=f"{_PD}!has({_DIS}.pageSize) || ({_DIS}.pageSize >= 1 && {_DIS}.pageSize <= 4096)",
        holds=lambda s: (
            s.disaggregation is None or s.disaggregation.page_size is None or 1 <= s.disaggregation.page_size <= 4096
        ),
    ),
    Rule(
        field="spec.disaggregation.kvCacheDtype",
        message="is not accepted by the SGLang release the image runs ("
        + "; ".join(
            f"{dtype} {format_version(first)} to {format_version(last)}"
            for dtype, (first, last) in sorted(KV_CACHE_DTYPES.items())
            if (first, last) != (OLDEST_SUPPORTED, NEWEST_SUPPORTED)
        )
        + "); pick a dtype that release has.",
        cel=f"{_PD}!has({_DIS}.kvCacheDtype) || {UNKNOWN_VERSION_CEL} || {_KV_DTYPE_CEL}[{_DIS}.kvCacheDtype]",
        holds=_kv_dtype_available,
    ),
    Rule(
        field="spec.disaggregation.pageSize",
        message="must be a size the attention backend named in engine.args takes ("
        + "; ".join(f"{b.replace('|', ', ')}: {', '.join(map(str, z))}" for b, z in _BACKEND_SIZES.items())
        + "): SGLang replaces any other, so the roles' KV pages would differ; set one of those or another backend.",
        cel=_BACKEND_CEL,
        holds=_backend_keeps_page_size,
    ),
    Rule(
        field="spec.engine.args",
        message="a disaggregated fleet sets "
        + ", ".join(f"{flag} in {field}" for flag, field in KV_CONTRACT_FLAGS.items())
        + ": both roles must give them alike (SGLang refuses a KV transfer otherwise, or with --dtype hands over "
        "pages of another dtype unnoticed); move the value there.",
        cel=f"{_PD}({owned_flag_cel('self.engine.args', KV_CONTRACT_FLAGS)})",
        holds=lambda s: s.disaggregation is None or not any(owned_flag(a, KV_CONTRACT_FLAGS) for a in s.engine.args),
    ),
    Rule(
        field="spec.workerGroups",
        message=f"SGLang {format_version(PD_DECODE_SHAPE_UNTIL)} tells each prefill server the decode shape "
        "(--disaggregation-decode-tp/-dp), so every decode group must have the same tp and DP size there; give the "
        "decode groups one shape, or use a newer image.",
        cel=f"{_PD}!has(self.workerGroups) || !{between_cel(OLDEST_SUPPORTED, PD_DECODE_SHAPE_UNTIL)} || "
        "self.workerGroups.all(g, !has(g.role) || g.role != 'decode' || self.workerGroups.all(h, !has(h.role) || "
        f"h.role != 'decode' || (g.parallelism.tp == h.parallelism.tp && {_DP_SIZE_CEL.format(g='g')} == "
        f"{_DP_SIZE_CEL.format(g='h')})))",
        holds=lambda s: (
            s.disaggregation is None
            or not runs_between(s, OLDEST_SUPPORTED, PD_DECODE_SHAPE_UNTIL)
            or _one_decode_shape(s)
        ),
    ),
    Rule(
        field="spec.workerGroups",
        message=f"SGLang {format_version(PD_DECODE_SHAPE_UNTIL)} refuses a prefill tp and a decode tp of which "
        "neither is a multiple of the other ('Different tp size is supported only when one tp is multiple of the "
        "other'); change one group's tp, or use a newer image.",
        cel=f"{_PD}!has(self.workerGroups) || !{between_cel(OLDEST_SUPPORTED, PD_DECODE_SHAPE_UNTIL)} || "
        "self.workerGroups.all(p, !has(p.role) || p.role != 'prefill' || self.workerGroups.all(d, !has(d.role) || "
        "d.role != 'decode' || (p.parallelism.tp >= d.parallelism.tp ? p.parallelism.tp % d.parallelism.tp == 0 : "
        "d.parallelism.tp % p.parallelism.tp == 0)))",
        holds=lambda s: (
            s.disaggregation is None or not runs_between(s, OLDEST_SUPPORTED, PD_DECODE_SHAPE_UNTIL) or _tp_divides(s)
        ),
    ),
    Rule(
        field="spec.router.enabled",
        message="a disaggregated fleet needs its router: only the router pairs a request's prefill with a decode "
        "and gives both the bootstrap room; set router.enabled: true.",
        cel=f"{_PD}self.router.enabled",
        holds=lambda s: s.disaggregation is None or s.router.enabled,
    ),
    Rule(
        field="spec.inferencePool.enabled",
        message="cannot serve a disaggregated fleet: the gateway's endpoint picker sends a request to one server, "
        "and prefill/decode needs the router to pair two; route through the fleet's router instead.",
        cel=f"{_PD}!self.inferencePool.enabled",
        holds=lambda s: s.disaggregation is None or not s.inference_pool.enabled,
    ),
    Rule(
        field="spec.router.prefillPolicy",
        message="applies only to a disaggregated fleet (spec.disaggregation); use router.policy.",
        cel="has(self.disaggregation) || !has(self.router.prefillPolicy)",
        holds=lambda s: s.disaggregation is not None or s.router.prefill_policy is None,
    ),
    Rule(
        field="spec.router.decodePolicy",
        message="applies only to a disaggregated fleet (spec.disaggregation); use router.policy.",
        cel="has(self.disaggregation) || !has(self.router.decodePolicy)",
        holds=lambda s: s.disaggregation is not None or s.router.decode_policy is None,
    ),
    Rule(
        field="spec.router.prefillPolicy",
        message=_POLICY_POWER_OF_TWO.format(role="prefill"),
        cel="!has(self.router.prefillPolicy) || self.router.prefillPolicy != 'power_of_two'",
        holds=lambda s: s.router.prefill_policy != "power_of_two",
    ),
    Rule(
        field="spec.router.decodePolicy",
        message=_POLICY_POWER_OF_TWO.format(role="decode"),
        cel="!has(self.router.decodePolicy) || self.router.decodePolicy != 'power_of_two'",
        holds=lambda s: s.router.decode_policy != "power_of_two",
    ),
    Rule(
        field="spec.router.decodePolicy",
        message="cannot be bucket: smg's bucket policy is for prefill only (--prefill-policy); pick another policy.",
        cel="!has(self.router.decodePolicy) || self.router.decodePolicy != 'bucket'",
        holds=lambda s: s.router.decode_policy != "bucket",
    ),
)


@dataclass(frozen=True)
class TransitionRule:
    """A rule over the stored spec and the new one: CEL on the spec with `oldSelf`, which the API server checks on
    update only; `validate --old` checks it with the stored file."""

    field: str
    message: str
    cel: str
    holds: Callable[[SGLangDeploymentSpec, SGLangDeploymentSpec], bool]

    @property
    def field_path(self) -> str:
        return self.field.removeprefix("spec")


TRANSITION_RULES: tuple[TransitionRule, ...] = (
    TransitionRule(
        field="spec.disaggregation",
        message="cannot be added to or removed from an existing fleet: the router's mode (--pd-disaggregation) is "
        "fixed when it starts and every worker would restart in the other mode at once; create a new "
        "SGLangDeployment and move traffic to it.",
        cel="has(self.disaggregation) == has(oldSelf.disaggregation)",
        holds=lambda old, new: (old.disaggregation is None) == (new.disaggregation is None),
    ),
)


def check_transition(old: SGLangDeploymentSpec, new: SGLangDeploymentSpec) -> list[FieldError]:
    """What the API server refuses on update from `old` to `new`."""
    return [FieldError(rule.field, rule.message) for rule in TRANSITION_RULES if not rule.holds(old, new)]
