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
