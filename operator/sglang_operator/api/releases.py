"""The SGLang releases the operator supports, and what changed between them that the operator renders or checks.

Facts read from the released wheels' argument definitions (`tests/compat` re-reads them from the wheels and fails
when this table and a release disagree). A version is `MAJOR.MINOR.PATCH` with an optional `.postN`; a post release
behaves as its base release.
"""

import re
from typing import Final

Version = tuple[int, int, int]

OLDEST_SUPPORTED: Final[Version] = (0, 5, 9)
NEWEST_SUPPORTED: Final[Version] = (0, 5, 23)

# First release whose parser accepts each --moe-a2a-backend value (values older than the oldest supported release
# carry OLDEST_SUPPORTED).
MOE_A2A_BACKEND_SINCE: Final[dict[str, Version]] = {
    "none": (0, 5, 9),
    "deepep": (0, 5, 9),
    "mooncake": (0, 5, 9),
    "mori": (0, 5, 9),
    "ascend_fuseep": (0, 5, 9),
    "flashinfer": (0, 5, 9),
    "nixl": (0, 5, 10),
    "megamoe": (0, 5, 12),
    "ascend_tp": (0, 5, 16),
    "pplx": (0, 5, 17),
    "deepep_v2": (0, 5, 19),
    "flashinfer_megamoe": (0, 5, 20),
}

ATTN_DP_FLAG_SINCE: Final[Version] = (0, 5, 22)
"""`--attn-dp-size`; before it attention DP is `--dp-size N --enable-dp-attention`."""
READY_ENDPOINT_SINCE: Final[Version] = (0, 5, 20)
"""`GET /ready`; before it only `/health` exists."""

FLASHINFER_ATTN_DP_CHECK_SINCE: Final[Version] = (0, 5, 13)
"""From here SGLang refuses the flashinfer all-to-all backends unless attention DP spans tp."""
RUNNING_REQUESTS_FLOOR_SINCE: Final[Version] = (0, 5, 23)
"""From here `max_running_requests // attn_dp` has a floor of 1; before, a rank can get no slot."""

MOONCAKE_TCP_SINCE: Final[Version] = (0, 5, 13)
"""`--disaggregation-transfer-backend mooncake_tcp`."""
DECODE_ALLOCATION_POLICY_SINCE: Final[Version] = (0, 5, 22)
"""`--disaggregation-decode-allocation-policy`."""
PD_DECODE_SHAPE_UNTIL: Final[Version] = (0, 5, 9)
"""The last release whose prefill server is told the decode shape (`--disaggregation-decode-tp`/`-dp`) and asserts
that one TP size divides the other; later ones negotiate it per transfer."""
KV_CACHE_DTYPES: Final[dict[str, tuple[Version, Version]]] = {
    "auto": ((0, 5, 9), NEWEST_SUPPORTED),
    "fp8_e5m2": ((0, 5, 9), NEWEST_SUPPORTED),
    "fp8_e4m3": ((0, 5, 9), NEWEST_SUPPORTED),
    "bf16": ((0, 5, 9), NEWEST_SUPPORTED),
    "bfloat16": ((0, 5, 9), NEWEST_SUPPORTED),
    "mxfp8": ((0, 5, 16), NEWEST_SUPPORTED),
    "nvfp4": ((0, 5, 16), NEWEST_SUPPORTED),
    "fp4_mx_block16": ((0, 5, 16), NEWEST_SUPPORTED),
    "fp4_e2m1": ((0, 5, 9), (0, 5, 20)),
}
"""`--kv-cache-dtype` values: the first and the last release whose parser accepts each."""
DTYPES: Final = ("auto", "half", "float16", "bfloat16", "float", "float32")
"""`--dtype` values (weights and activations, and so the KV pages while the KV dtype is auto): the same in every
supported release (0.5.9 `server_args.py` add_argument choices; 0.5.23 `arg_groups/fields/model.py`)."""
DTYPE_ALIASES: Final[dict[str, str]] = {"half": "float16", "float": "float32"}
"""Spellings SGLang's help gives as one dtype ('"float16" is the same as "half"', '"float" is shorthand for FP32')."""

PAGE_SIZE_BACKENDS: Final[dict[str, tuple[int, ...]]] = {
    "flashmla": (64,),
    "hpc_ops": (64,),
    "cutlass_mla": (128,),
    "trtllm_mla": (32, 64),
    "cutedsl_mla": (32, 64),
    "tokenspeed_mla": (32, 64),
    "trtllm_mha": (16, 32, 64, 128),
    "intel_xpu": (16, 32, 64, 128),
}
"""Attention backends (`--attention-backend`, `--prefill-`/`--decode-attention-backend`) for which SGLang replaces
`--page-size` with one its kernel takes, and the sizes it keeps: `server_args.py` up to 0.5.14, then
`arg_groups/overrides.py` (`_mla_backend_page_constraints`, `_intel_xpu_page_constraint`). Where releases differ the
sizes are those some release keeps: trtllm_mha keeps 128 from 0.5.17 (16, 32, 64 before), intel_xpu 32 to 128 up to
0.5.10, then 64 and 128 (16 and 32 too for MLA models). cutlass_mla is accepted up to 0.5.19, hpc_ops from 0.5.17,
cutedsl_mla from 0.5.13, tokenspeed_mla from 0.5.12 (0.5.23: an alias of cutedsl_mla); a release without one refuses
it at start anyway. fa4 forces 128 only for non-MLA models (from 0.5.10 on SM100 only), which the spec does not
say: not listed."""

DP_ATTENTION_PORT_DELTA: Final = 233
"""SGLang's `ZMQ_TCP_PORT_DELTA` (`server_args.py`, `PortArgs.init_new`): with attention DP its processes talk over
TCP, on one node from `--port` + 233, over several from the `--dist-init-addr` port, every release. (From 0.5.13 the
one-node ports move to `--port` - 233 when + 233 passes 65535: not modelled.)"""
DP_ATTENTION_PORTS: Final = 6
"""The ports from there on one node: the rendezvous, tokenizer, detokenizer, rpc, metrics and scheduler input
(+ 0 to + 5), every release."""
DP_ATTENTION_MULTI_NODE_PORTS: Final = 7
"""The same over several nodes, and from 0.5.13 the load collector's (+ 6, bound only there): one more port than
0.5.9 to 0.5.12 bind, kept on every release so that the rule needs no release check."""
DP_ATTENTION_HANDSHAKE_DELTA: Final = 13
"""SGLang's `DP_ATTENTION_HANDSHAKE_PORT_DELTA` (`managers/data_parallel_controller.py`): the DP controller binds
`--port` + 13 (one node) or the `--dist-init-addr` port + 13 (several) to hand out its workers' ports, every
release."""

VERSION_PATTERN: Final = r"^[0-9]+\.[0-9]+\.[0-9]+(\.post[0-9]+)?$"
# The version at the start of an image tag: `v0.5.21`, `v0.5.21-cu129`, `0.5.15.post1-cu126`.
TAG_VERSION_PATTERN: Final = r"[0-9]+\.[0-9]+\.[0-9]+(\.post[0-9]+)?"
_TAG = re.compile(r":v?(" + TAG_VERSION_PATTERN + r")([-_][^/:@]*)?(@sha256:[0-9a-f]+)?$")


def parse_version(version: str) -> Version:
    """`0.5.15.post1` -> (0, 5, 15): a post release gates like its base release."""
    major, minor, patch = (int(part) for part in version.split(".")[:3])
    return major, minor, patch


def image_tag_version(image: str) -> str | None:
    """The SGLang version an image's tag names, or None for a digest-only reference, `latest` or a private tag."""
    match = _TAG.search(image)
    return match.group(1) if match else None


def supported(version: str) -> bool:
    return OLDEST_SUPPORTED <= parse_version(version) <= NEWEST_SUPPORTED


def format_version(version: Version) -> str:
    return ".".join(str(part) for part in version)


IMAGE_REPOSITORY: Final = "lmsysorg/sglang"
"""Where SGLang's release images are published, each tagged `v<version>`."""


def release_image(version: str) -> str:
    """The published image of an SGLang release: what `engine.version` alone means."""
    return f"{IMAGE_REPOSITORY}:v{version}"


SUPPORTED_RANGE: Final = f"{format_version(OLDEST_SUPPORTED)} to {format_version(NEWEST_SUPPORTED)}"
