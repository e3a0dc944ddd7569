"""Issue 29, "engine.version alone": a user who names only a version gets that release's image and its flags; one who
gives both an image and a version that disagree is told so in words that fit."""

from typing import Any

from sglang_operator.api.constants import DEFAULT_SGLANG_IMAGE, DEFAULT_SGLANG_VERSION
from sglang_operator.api.releases import release_image
from sglang_operator.api.validation import parse_spec
from sglang_operator.render import Owner, render_all, revision_hash


def _spec(engine: dict[str, Any], **rest: Any) -> Any:
    spec, errors = parse_spec({"model": {"path": "m"}, "engine": engine, **rest}, strict=True)
    assert errors == [] and spec is not None
    return spec


def _worker(spec: Any) -> dict[str, Any]:
    container: dict[str, Any] = render_all(spec, Owner("f", "ns", "uid"))[0]["spec"]["containers"][0]
    return container


def test_a_version_alone_renders_that_releases_image_and_flags() -> None:
    worker = _worker(_spec({"version": "0.5.9"}, parallelism={"tp": 2, "attentionDP": 2}))
    assert worker["image"] == "lmsysorg/sglang:v0.5.9"
    command = worker["command"]
    # 0.5.9 has no --attn-dp-size (0.5.22) and no /ready (0.5.20): the dialect follows the version
    assert "--attn-dp-size" not in command
    assert command[command.index("--dp-size") + 1] == "2" and "--enable-dp-attention" in command
    assert worker["readinessProbe"]["httpGet"]["path"] == "/health"


def test_no_image_and_no_version_is_the_default_image_with_the_hash_it_had() -> None:
    """The CRD no longer writes the default image into a stored CR; a spec without one renders and hashes as one
    that spells the default out, so no fleet rolls."""
    bare, spelled = _spec({}), _spec({"image": DEFAULT_SGLANG_IMAGE})
    assert _worker(bare)["image"] == DEFAULT_SGLANG_IMAGE == release_image(DEFAULT_SGLANG_VERSION)
    assert revision_hash(bare) == revision_hash(spelled)
    assert bare.engine.sglang_version == DEFAULT_SGLANG_VERSION


def test_an_image_and_a_version_that_disagree_are_refused_naming_both() -> None:
    _, errors = parse_spec({"model": {"path": "m"}, "engine": {"image": "lmsysorg/sglang:v0.5.21", "version": "0.5.9"}})
    [error] = errors
    assert error.field == "spec.engine.version"
    assert "engine.image, which is given too" in error.message and "drop engine.image" in error.message


def test_a_version_with_an_untagged_image_keeps_that_image() -> None:
    worker = _worker(_spec({"image": "registry.local/sglang@sha256:" + "a" * 64, "version": "0.5.21"}))
    assert worker["image"] == "registry.local/sglang@sha256:" + "a" * 64
