"""Rules that tie a spec to the SGLang release its image runs (`releases`): which version, and what that release's
parser and checks accept. Part of `validation.RULES`, each with its CEL twin.

The version comes from `engine.version` or, when unset, from the image's tag; the CEL reads the tag with the same
regular expressions (`find`, Kubernetes' regex library), so the API server derives the same version. Without
`engine.image` the image is the release image of `engine.version` (or the default image), so a version alone never
contradicts anything.
"""

from .constants import DEFAULT_SGLANG_VERSION
from .releases import (
    FLASHINFER_ATTN_DP_CHECK_SINCE,
    MOE_A2A_BACKEND_SINCE,
    NEWEST_SUPPORTED,
    OLDEST_SUPPORTED,
    RUNNING_REQUESTS_FLOOR_SINCE,
    SUPPORTED_RANGE,
    TAG_VERSION_PATTERN,
    Version,
    format_version,
    image_tag_version,
    parse_version,
    release_image,
    supported,
)
from .rule import Rule
from .spec import SGLangDeploymentSpec

_TAG_CEL = r":v?" + TAG_VERSION_PATTERN + r"([-_][^/:@]*)?(@sha256:[0-9a-f]+)?$"
_EFFECTIVE_CEL = (
    f"(has(self.engine.version) ? self.engine.version : has(self.engine.image) ? self.engine.image.find(r'{_TAG_CEL}')"
    f".find(r'{TAG_VERSION_PATTERN}') : '{DEFAULT_SGLANG_VERSION}')"
)
_BASE_CEL = f"{_EFFECTIVE_CEL}.find(r'^[0-9]+\\.[0-9]+\\.[0-9]+')"
_PAR = "self.parallelism"


def _versions_from(since: Version) -> list[str]:
    """Every supported base version at or after `since` (the supported releases share major.minor)."""
    major, minor, _ = OLDEST_SUPPORTED
    first = max(since[2], OLDEST_SUPPORTED[2])
    return [format_version((major, minor, patch)) for patch in range(first, NEWEST_SUPPORTED[2] + 1)]


def _cel_list(items: list[str]) -> str:
    return "[" + ", ".join(f"'{item}'" for item in items) + "]"


_GATED = {value: since for value, since in MOE_A2A_BACKEND_SINCE.items() if since > OLDEST_SUPPORTED}
_GATED_CEL = "{" + ", ".join(f"'{v}': {_cel_list(_versions_from(s))}" for v, s in sorted(_GATED.items())) + "}"


def between_cel(first: Version, last: Version = NEWEST_SUPPORTED) -> str:
    """CEL: the image's release is known and within [first, last] (post releases as their base). An unknown release
    reads as '' and is in no list, so the version expression is written once (the CRD has a size budget)."""
    versions = [v for v in _versions_from(first) if parse_version(v) <= last]
    return f"({_BASE_CEL} in {_cel_list(versions)})"


UNKNOWN_VERSION_CEL = f"{_EFFECTIVE_CEL} == ''"
"""CEL: the spec names no version (another rule reports that)."""


def runs_between(spec: SGLangDeploymentSpec, first: Version, last: Version = NEWEST_SUPPORTED) -> bool:
    """`between_cel`'s Python twin."""
    version = spec.engine.sglang_version
    return bool(version) and first <= parse_version(version) <= last


def _since(spec: SGLangDeploymentSpec, release: Version) -> bool:
    """The image runs `release` or later (an unknown version counts as the newest: other rules report it)."""
    version = spec.engine.sglang_version
    return not version or parse_version(version) >= release


def _backend_available(spec: SGLangDeploymentSpec) -> bool:
    version = spec.engine.sglang_version
    backend = spec.parallelism.moe_a2a_backend
    return not version or backend not in _GATED or parse_version(version) >= _GATED[backend]


RELEASE_RULES: tuple[Rule, ...] = (
    Rule(
        field="spec.engine.version",
        message="is required: the image's tag names no SGLang version (a digest, latest or a private build); set "
        "engine.version to the version the image runs.",
        cel=f"has(self.engine.version) || !has(self.engine.image) || self.engine.image.matches(r'{_TAG_CEL}')",
        holds=lambda s: s.engine.version is not None or image_tag_version(s.engine.sglang_image) is not None,
    ),
    Rule(
        field="spec.engine.version",
        message="contradicts the version in the tag of engine.image, which is given too (the image runs the "
        f"release its tag names): drop engine.version, make the two agree, or drop engine.image to run "
        f"{release_image('<version>')}.",
        cel=f"!has(self.engine.version) || !has(self.engine.image) || !self.engine.image.matches(r'{_TAG_CEL}') || "
        f"self.engine.image.find(r'{_TAG_CEL}').find(r'{TAG_VERSION_PATTERN}') == self.engine.version",
        holds=lambda s: (
            s.engine.version is None
            or s.engine.image is None
            or image_tag_version(s.engine.image) in (None, s.engine.version)
        ),
    ),
    Rule(
        field="spec.engine.version",
        message=f"is not a supported SGLang release: the operator renders and checks flags for {SUPPORTED_RANGE}; "
        "use an image of those releases.",
        cel=f"{_EFFECTIVE_CEL} == '' || {_BASE_CEL} in {_cel_list(_versions_from(OLDEST_SUPPORTED))}",
        holds=lambda s: not s.engine.sglang_version or supported(s.engine.sglang_version),
    ),
    Rule(
        field="spec.parallelism.moeA2ABackend",
        message="is not accepted by the SGLang release the image runs ("
        + "; ".join(f"{v} from {format_version(since)}" for v, since in sorted(_GATED.items()))
        + "); pick a backend that release has, or a newer image.",
        cel=f"{_EFFECTIVE_CEL} == '' || !({_PAR}.moeA2ABackend in {_GATED_CEL}) || "
        f"{_BASE_CEL} in {_GATED_CEL}[{_PAR}.moeA2ABackend]",
        holds=_backend_available,
    ),
    Rule(
        field="spec.parallelism.attentionDP",
        message="the pplx all-to-all backend needs attention data parallelism (attentionDP >= 2): SGLang refuses it "
        "at start-up from 0.5.22, and earlier releases fail later, in the kernel; set attentionDP or pick another "
        "backend.",
        cel=f"{_PAR}.moeA2ABackend != 'pplx' || {_PAR}.attentionDP >= 2",
        holds=lambda s: s.parallelism.moe_a2a_backend != "pplx" or s.parallelism.attention_dp >= 2,
    ),
    Rule(
        field="spec.parallelism.attentionDP",
        message="the flashinfer and flashinfer_megamoe all-to-all backends need attentionDP == tp, as SGLang checks "
        f"at start-up from {format_version(FLASHINFER_ATTN_DP_CHECK_SINCE)}; set attentionDP to tp or pick another "
        "backend.",
        cel=f"!({_PAR}.moeA2ABackend in ['flashinfer', 'flashinfer_megamoe']) || {_PAR}.attentionDP == {_PAR}.tp || "
        f"!({_BASE_CEL} in {_cel_list(_versions_from(FLASHINFER_ATTN_DP_CHECK_SINCE))})",
        holds=lambda s: (
            s.parallelism.moe_a2a_backend not in ("flashinfer", "flashinfer_megamoe")
            or s.parallelism.attention_dp == s.parallelism.tp
            or not _since(s, FLASHINFER_ATTN_DP_CHECK_SINCE)
        ),
    ),
    Rule(
        field="spec.engine.maxRunningRequests",
        message="must be at least attentionDP: SGLang divides it across the attention-DP ranks and, before "
        f"{format_version(RUNNING_REQUESTS_FLOOR_SINCE)}, leaves a rank with no slot at all when it is smaller; "
        "raise it or use a newer image.",
        cel=f"!has(self.engine.maxRunningRequests) || self.engine.maxRunningRequests >= {_PAR}.attentionDP || "
        f"{_BASE_CEL} in {_cel_list(_versions_from(RUNNING_REQUESTS_FLOOR_SINCE))}",
        holds=lambda s: (
            s.engine.max_running_requests is None
            or s.engine.max_running_requests >= s.parallelism.attention_dp
            or _since(s, RUNNING_REQUESTS_FLOOR_SINCE)
        ),
    ),
)
