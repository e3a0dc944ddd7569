"""Upgrading the operator must not roll fleets whose spec did not change: the revision of every example stays what
the release before the typed template and the optional engine.version computed."""

from pathlib import Path

import pytest
import yaml

from sglang_operator.api.validation import parse_spec
from sglang_operator.render import revision_hash
from tests.conftest import EXAMPLES

# Revisions of the examples as released before the typed template (commit 1d3b595's golden files).
RELEASED_REVISIONS = {
    "quickstart.yaml": "161ea582d1",
    "llama-70b-tp4.yaml": "e04d46764b",
    "deepseek-v3-dpa.yaml": "143908a89b",
    "autoscaling.yaml": "9ced50d486",
    "qwen-dp2-tp4.yaml": "d980c96012",
}


# Examples added after that release: no fleet runs them from before, so there is no revision to keep.
NEW_EXAMPLES = {"worker-groups.yaml", "pd-small.yaml", "deepseek-v3-pd.yaml"}
RELEASED = [p for p in EXAMPLES if p.name not in NEW_EXAMPLES]


def test_every_example_is_released_or_new() -> None:
    assert {p.name for p in RELEASED} == set(RELEASED_REVISIONS)


@pytest.mark.parametrize("path", RELEASED, ids=[p.name for p in RELEASED])
def test_example_revisions_survive_the_upgrade(path: Path) -> None:
    spec, errors = parse_spec(yaml.safe_load(path.read_text())["spec"])
    assert errors == [] and spec is not None
    assert revision_hash(spec) == RELEASED_REVISIONS[path.name]


def test_version_taken_from_the_tag_hashes_like_the_same_version_written_out() -> None:
    implicit, _ = parse_spec({"model": {"path": "m"}, "engine": {"image": "lmsysorg/sglang:v0.5.21-cu129"}})
    explicit, _ = parse_spec(
        {"model": {"path": "m"}, "engine": {"image": "lmsysorg/sglang:v0.5.21-cu129", "version": "0.5.21"}}
    )
    assert implicit is not None and explicit is not None
    assert revision_hash(implicit) == revision_hash(explicit)
