"""The command lines the operator renders: for every example, every golden file, and a sample of valid specs across
the supported releases (every parallelism shape the API allows on that release, each all-to-all backend the
release has, engine tuning on and off, each router policy and sticky sessions). Used by the compatibility tests
and by the matrix generator, so the matrix lists exactly the flags the tests check.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from sglang_operator.api.releases import MOE_A2A_BACKEND_SINCE, parse_version
from sglang_operator.api.validation import parse_spec
from sglang_operator.render import Owner, render_all
from sglang_operator.topology import launch_args
from tests.support.compat.wheels import RELEASES

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))
GOLDEN = sorted((REPO / "tests" / "golden").glob("*.yaml"))
OWNER = Owner(name="compat", namespace="default", uid="7f0c2a4e-0000-4000-8000-00000000c0de")
LAUNCH = "sglang.launch_server"


@dataclass(frozen=True)
class Command:
    """One rendered command line: `sglang` (the flags after `sglang.launch_server`) or `smg` (after `smg launch`)."""

    program: str
    version: str  # the SGLang release the worker image runs; "" for smg
    argv: tuple[str, ...]
    origin: str


def image(version: str) -> str:
    return f"lmsysorg/sglang:v{version}-cu129"


def commands_of(objects: list[dict[str, Any]], version: str, origin: str) -> Iterator[Command]:
    """The SGLang and smg command lines of rendered objects (pods, and the router Deployment's pod template)."""
    for obj in objects:
        spec = obj.get("spec", {})
        pod = spec.get("template", {}).get("spec", spec) if obj.get("kind") == "Deployment" else spec
        for container in pod.get("containers", []) if obj.get("kind") in ("Pod", "Deployment") else []:
            argv = [*container.get("command", []), *container.get("args", [])]
            if LAUNCH in argv:
                yield Command("sglang", version, tuple(argv[argv.index(LAUNCH) + 1 :]), origin)
            elif argv[:2] == ["smg", "launch"]:
                yield Command("smg", "", tuple(argv[2:]), origin)


def _version_of(raw_spec: dict[str, Any]) -> str:
    spec, errors = parse_spec(raw_spec, strict=True)
    assert spec is not None, errors
    return spec.engine.sglang_version


def example_commands() -> Iterator[Command]:
    for path in EXAMPLES:
        doc = yaml.safe_load(path.read_text())
        spec, errors = parse_spec(doc["spec"], strict=True)
        assert spec is not None, (path, errors)
        yield from commands_of(render_all(spec, OWNER), spec.engine.sglang_version, f"examples/{path.name}")


def golden_commands() -> Iterator[Command]:
    for path in GOLDEN:
        example = yaml.safe_load((REPO / "examples" / path.name).read_text())
        objects = [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
        yield from commands_of(objects, _version_of(example["spec"]), f"tests/golden/{path.name}")


def _backends(version: str) -> list[str]:
    return [b for b, since in MOE_A2A_BACKEND_SINCE.items() if parse_version(version) >= since and b != "none"]


def shapes(version: str) -> list[dict[str, Any]]:
    """Parallelism blocks worth rendering on `version`; invalid ones are dropped by validation later."""
    out: list[dict[str, Any]] = [
        {},
        {"tp": 4},
        {"tp": 4, "dp": 2},
        {"tp": 2, "dp": 4, "ep": 2},
        {"tp": 8, "attentionDP": 8},
        {"tp": 8, "attentionDP": 4, "ep": 8, "dpLmHead": True},
        {"tp": 16, "nnodes": 2},
        {"tp": 16, "attentionDP": 16, "ep": 16, "dpLmHead": True, "nnodes": 2},
    ]
    for backend in _backends(version):
        attention_dp = 8 if backend in ("flashinfer", "flashinfer_megamoe") else 2 if backend == "pplx" else 1
        out.append({"tp": 8, "attentionDP": attention_dp, "ep": 8, "moeA2ABackend": backend})
        out.append({"tp": 16, "attentionDP": 16, "ep": 16, "moeA2ABackend": backend, "nnodes": 2})
    return out


ENGINES: tuple[dict[str, Any], ...] = (
    {},
    {
        "maxRunningRequests": 64,
        "memFractionStatic": 0.85,
        "contextLength": 32768,
        "args": ["--chunked-prefill-size", "4096"],
    },
)
MODELS: tuple[dict[str, Any], ...] = (
    {"path": "Qwen/Qwen2.5-0.5B-Instruct"},
    {"path": "deepseek-ai/DeepSeek-V3", "servedName": "dsv3", "revision": "main", "trustRemoteCode": True},
)
ROUTERS: tuple[dict[str, Any], ...] = (
    *({"policy": policy} for policy in ("cache_aware", "round_robin", "random")),
    {"policy": "consistent_hashing", "stickySessions": {"enabled": True}},
    {"policy": "prefix_hash", "apiKeySecretRef": {"name": "router-key"}},
    {"policy": "least_load"},
)


def sample_specs() -> Iterator[tuple[str, dict[str, Any]]]:
    """(release, raw spec) for every valid combination above on every supported release."""
    for version in RELEASES:
        for index, (shape, engine, model) in enumerate(itertools.product(shapes(version), ENGINES, MODELS)):
            router = ROUTERS[index % len(ROUTERS)]
            raw = {
                "model": model,
                "engine": {"image": image(version), **engine},
                "parallelism": shape,
                "resources": {"gpusPerNode": 8},
                "router": router,
            }
            spec, _ = parse_spec(raw, strict=True)
            if spec is not None:
                yield version, raw


def sample_commands() -> Iterator[Command]:
    """Every rank's launch command of every sample spec, and the router command of each."""
    for version, raw in sample_specs():
        spec, _ = parse_spec(raw, strict=True)
        assert spec is not None
        origin = f"sample {version} {raw['parallelism']} {raw['engine']}"
        for rank in range(spec.parallelism.nnodes):
            argv = launch_args(spec, node_rank=rank, dist_init_host="compat-0.default.svc")
            yield Command("sglang", version, tuple(argv[argv.index(LAUNCH) + 1 :]), origin)
        yield from (c for c in commands_of(render_all(spec, OWNER), version, origin) if c.program == "smg")


@functools.cache
def all_commands() -> tuple[Command, ...]:
    return (*example_commands(), *golden_commands(), *sample_commands())


def operator_flags(commands: tuple[Command, ...]) -> set[str]:
    """The option strings the operator itself puts on SGLang command lines (user `engine.args` excluded)."""
    user = {arg for engine in ENGINES for arg in engine.get("args", [])}
    return {arg for c in commands if c.program == "sglang" for arg in c.argv if arg.startswith("--")} - user
