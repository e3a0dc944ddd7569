"""Which local program a container image stands for (no images can be pulled here).

image name contains            command accepted                                       runs (from the venv)
`sglang-operator`              `sglang-operator ...`, `kopf ...`, none (entrypoint)   the same script
`smg`, `sgl-model-gateway`,    `smg ...`, `python3 -m smg[.launch_router] ...`,       the real `smg`
`sglang-router`                `python3 -m sglang_router.launch_router ...`, none
`sglang`                       `python3 -m sglang.launch_server ...`, `sglang serve`  `python -m sglang_sim`
                                                                                      `--sim-version <the tag's>`

The simulator plays the SGLang release the image's tag names (`v0.5.21-cu129` -> 0.5.21: its flags, checks and
endpoints); a tag without a version (`latest`) plays the simulator's default, the default image's release.

Rows are tried top to bottom (`sglang-operator` and `sglang-router` also contain `sglang`). Anything else is
`ImageNotRunnableLocally`: the container waits, as it would on a failed pull, with a message naming the image.

Light pods (`light.py`): a repository whose last path element ends in `-light` (`lmsysorg/sglang-light:v0.5.23`,
`lightseekorg/smg-light:1.13.0`), or a pod annotated `localcluster.sglang.ai/light: "true"`, selects the same row and
the same command checks, but the container is not started as a process: the agent serves a stand-in of its HTTP
API from its own event loop. The image marker exists because the operator copies `template.metadata.annotations`
to worker pods only, while `router.image` reaches the router pods; a benchmark can then run hundreds of fleets on
two cores without one process per pod.

Listen addresses: all pods share the host's network stack, so a pod must bind only its own IP. Every argument
that is or contains the address `0.0.0.0` (or is `::` / `[::]`) is rewritten to the pod IP, and for the known
servers the listen flags are forced to the pod IP: SGLang's `--host` (its default 127.0.0.1 is pod-local in a
real pod, shared here) and smg's `--host` and `--prometheus-host` (both default to all interfaces). A server in
this cluster is therefore reachable on its pod IP even where a real one would only listen on its loopback.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sglang_operator.api.releases import image_tag_version
from sglang_operator.render.workers import LAUNCH_WITH_API_KEY

NOT_RUNNABLE = "ImageNotRunnableLocally"

SIM_MODULE = "sglang_sim"
_UNSPECIFIED = re.compile(r"(?<![\d.])0\.0\.0\.0(?![\d.])")
_PYTHON = re.compile(r"python(\d+(\.\d+)?)?$")
_LOOPBACK_HOSTS = ("0.0.0.0", "::", "[::]", "127.0.0.1", "localhost", "::1")


@dataclass(frozen=True)
class Toolchain:
    """The programs that stand in for images: this virtualenv's python and its bin/ folder."""

    python: str
    bindir: str

    def script(self, name: str) -> str:
        return os.path.join(self.bindir, name)


LIGHT_ANNOTATION = "localcluster.sglang.ai/light"
LIGHT_SUFFIX = "-light"
LIGHT_KINDS = ("sglang", "router")  # what the light server can stand in for; the operator always runs for real


@dataclass(frozen=True)
class Runnable:
    kind: str  # "sglang" | "router" | "operator"
    argv: tuple[str, ...]
    light: bool = False  # served in-process by the agent (`light.py`), not started as a process


@dataclass(frozen=True)
class NotRunnable:
    reason: str
    message: str


@dataclass(frozen=True)
class ImageRule:
    kind: str
    markers: tuple[str, ...]


IMAGE_RULES: tuple[ImageRule, ...] = (
    ImageRule("operator", ("sglang-operator",)),
    ImageRule("router", ("smg", "sgl-model-gateway", "sglang-router")),
    ImageRule("sglang", ("sglang",)),
)


def image_repository(image: str) -> str:
    """`registry/org/name` without tag or digest (a tag such as `:smg-1` must not select a rule)."""
    name = image.split("@", 1)[0]
    slash = name.rfind("/")
    colon = name.rfind(":")
    return name[:colon] if colon > slash else name


def image_kind(image: str) -> str | None:
    repository = image_repository(image).lower()
    for rule in IMAGE_RULES:
        if any(marker in repository for marker in rule.markers):
            return rule.kind
    return None


def light_image(image: str) -> bool:
    """Whether the image names a light variant: the repository's last path element ends in `-light`."""
    return image_repository(image).lower().rsplit("/", 1)[-1].endswith(LIGHT_SUFFIX)


def light_pod(annotations: Mapping[str, str] | None) -> bool:
    return (annotations or {}).get(LIGHT_ANNOTATION, "").lower() == "true"


def python_module(argv: Sequence[str]) -> tuple[str, list[str]] | None:
    """(module, its arguments) for `python[3[.x]] [-u ...] -m module args...`, else None."""
    if not argv or not _PYTHON.match(os.path.basename(argv[0])):
        return None
    index = 1
    while index < len(argv) and argv[index].startswith("-") and argv[index] != "-m":
        index += 1
    if index + 1 < len(argv) and argv[index] == "-m":
        return argv[index + 1], list(argv[index + 2 :])
    return None


def _program(argv: Sequence[str]) -> str:
    return os.path.basename(argv[0]) if argv else ""


def _operator_argv(argv: list[str], has_command: bool, tools: Toolchain) -> list[str] | None:
    if not has_command:
        return [tools.script("sglang-operator"), *argv]
    if _program(argv) in ("sglang-operator", "kopf"):
        return [tools.script(_program(argv)), *argv[1:]]
    module = python_module(argv)
    if module and (module[0] == "kopf" or module[0].startswith("sglang_operator")):
        return [tools.python, "-m", module[0], *module[1]]
    return None


def _router_argv(argv: list[str], has_command: bool, tools: Toolchain) -> list[str] | None:
    if not has_command:
        return [tools.script("smg"), *argv]
    if _program(argv) in ("smg", "sglang-router", "amg"):
        return [tools.script("smg"), *argv[1:]]
    module = python_module(argv)
    if module is None:
        return None
    name, rest = module
    if name in ("smg", "sglang_router"):
        return [tools.python, "-m", "smg", *rest]
    if name in ("smg.launch_router", "sglang_router.launch_router"):
        return [tools.python, "-m", "smg.launch_router", *rest]
    return None


def _sglang_argv(argv: list[str], tools: Toolchain, image: str) -> list[str] | None:
    version = image_tag_version(image)
    sim = [tools.python, "-m", SIM_MODULE, *(["--sim-version", version] if version else [])]
    module = python_module(argv)
    if module and module[0] == "sglang.launch_server":
        return [*sim, *module[1]]
    if len(argv) > 2 and _PYTHON.match(_program(argv)) and argv[1] == "-c" and argv[2] == LAUNCH_WITH_API_KEY:
        # The operator's launcher for a worker with an API key: the same launcher, running the simulator.
        launcher = LAUNCH_WITH_API_KEY.replace("'sglang.launch_server'", repr(SIM_MODULE))
        return [tools.python, "-c", launcher, *sim[3:], *argv[3:]]
    if _program(argv) == "sglang" and len(argv) > 1 and argv[1] == "serve":
        return [*sim, *argv[2:]]
    return None


EXPECTED = {
    "operator": "`sglang-operator ...` (or no command)",
    "router": "`smg ...`, `python3 -m smg ...` or `python3 -m smg.launch_router ...` (or no command)",
    "sglang": "`python3 -m sglang.launch_server ...`, the operator's API-key launcher or `sglang serve ...`",
}


def rewrite_unspecified(argv: Sequence[str], pod_ip: str) -> list[str]:
    """Every all-interfaces address in the arguments becomes the pod IP (see the module docstring)."""
    out = []
    for arg in argv:
        if arg in ("::", "[::]"):
            out.append(pod_ip)
        else:
            out.append(_UNSPECIFIED.sub(pod_ip, arg))
    return out


def force_listen_flag(argv: Sequence[str], flag: str, pod_ip: str) -> list[str]:
    """Set `flag` to the pod IP when it is absent or names a loopback/unspecified address."""
    out = list(argv)
    for index, arg in enumerate(out):
        if arg == flag and index + 1 < len(out):
            if out[index + 1] in _LOOPBACK_HOSTS:
                out[index + 1] = pod_ip
            return out
        if arg.startswith(flag + "="):
            if arg.split("=", 1)[1] in _LOOPBACK_HOSTS:
                out[index] = f"{flag}={pod_ip}"
            return out
    return [*out, flag, pod_ip]


LISTEN_FLAGS = {"sglang": ("--host",), "router": ("--host", "--prometheus-host"), "operator": ()}


def map_container(
    image: str, command: Sequence[str], args: Sequence[str], pod_ip: str, tools: Toolchain, light: bool = False
) -> Runnable | NotRunnable:
    """The local argv for a container whose `$(VAR)` references are already expanded.

    `light`: the pod asks for light mode (its annotation); a light image asks for it by itself. Either way only
    SGLang and router containers become light, after the same command checks as a real start.
    """
    kind = image_kind(image)
    if kind is None:
        return NotRunnable(
            NOT_RUNNABLE,
            f'image "{image}" cannot run on the local cluster: only SGLang (sglang), router (smg, '
            "sgl-model-gateway, sglang-router) and sglang-operator images map to local programs",
        )
    argv = [*command, *args]
    if kind == "operator":
        mapped = _operator_argv(argv, bool(command), tools)
    elif kind == "router":
        mapped = _router_argv(argv, bool(command), tools)
    else:
        mapped = _sglang_argv(argv, tools, image)
    if mapped is None:
        return NotRunnable(
            NOT_RUNNABLE,
            f'image "{image}" runs locally only as {EXPECTED[kind]}; got {argv!r}',
        )
    mapped = [mapped[0], *rewrite_unspecified(mapped[1:], pod_ip)]
    for flag in LISTEN_FLAGS[kind]:
        mapped = force_listen_flag(mapped, flag, pod_ip)
    return Runnable(kind, tuple(mapped), light=kind in LIGHT_KINDS and (light or light_image(image)))
