"""Image -> local program mapping and the listen-address rewrite."""

from __future__ import annotations

import pytest

from localcluster.nodeagent.images import (
    NOT_RUNNABLE,
    NotRunnable,
    Runnable,
    Toolchain,
    image_kind,
    map_container,
    rewrite_unspecified,
)

TOOLS = Toolchain(python="/venv/bin/python", bindir="/venv/bin")
IP = "127.1.0.7"


@pytest.mark.parametrize(
    ("image", "kind"),
    [
        ("lmsysorg/sglang:v0.5.23", "sglang"),
        ("lmsysorg/sglang:v0.5.23-cu129", "sglang"),
        ("lightseekorg/smg:1.13.0", "router"),
        ("ghcr.io/sgl-project/sgl-model-gateway:0.3", "router"),
        ("lmsysorg/sglang-router:0.3.2", "router"),
        ("ghcr.io/acme/sglang-operator:0.1.0", "operator"),
        ("registry:5000/lmsysorg/sglang@sha256:abc", "sglang"),
        ("busybox:1.36", None),
        ("nginx:smg-tag", None),  # the tag does not select a rule
    ],
)
def test_image_kind(image: str, kind: str | None) -> None:
    assert image_kind(image) == kind


def test_sglang_launch_server_runs_the_simulator_on_the_pod_ip() -> None:
    mapped = map_container(
        "lmsysorg/sglang:v0.5.23",
        ["python3", "-m", "sglang.launch_server"],
        ["--model-path", "Qwen/Qwen3-8B", "--host", "0.0.0.0", "--port", "30000", "--tp", "2"],
        IP,
        TOOLS,
    )
    assert mapped == Runnable(
        "sglang",
        (
            "/venv/bin/python",
            "-m",
            "sglang_sim",
            "--sim-version",
            "0.5.23",
            "--model-path",
            "Qwen/Qwen3-8B",
            "--host",
            IP,
            "--port",
            "30000",
            "--tp",
            "2",
        ),
    )


def test_sglang_serve_and_missing_host() -> None:
    mapped = map_container("lmsysorg/sglang:latest", ["sglang", "serve"], ["--model-path", "m"], IP, TOOLS)
    assert isinstance(mapped, Runnable)
    assert mapped.argv[-2:] == ("--host", IP)  # SGLang's pod-local default would collide between pods
    assert mapped.argv[1:5] == ("-m", "sglang_sim", "--model-path", "m")  # no version: the default


def test_the_simulator_plays_the_release_the_tag_names() -> None:
    mapped = map_container(
        "lmsysorg/sglang:v0.5.15.post1-cu126",
        ["python3", "-m", "sglang.launch_server"],
        ["--model-path", "m"],
        IP,
        TOOLS,
    )
    assert isinstance(mapped, Runnable)
    assert mapped.argv[1:5] == ("-m", "sglang_sim", "--sim-version", "0.5.15.post1")


def test_host_equals_form_is_rewritten() -> None:
    mapped = map_container(
        "lmsysorg/sglang:1", ["python", "-m", "sglang.launch_server", "--host=0.0.0.0"], [], IP, TOOLS
    )
    assert isinstance(mapped, Runnable)
    assert f"--host={IP}" in mapped.argv
    assert "--host" not in mapped.argv


def test_router_gets_its_listeners_on_the_pod_ip() -> None:
    mapped = map_container(
        "lightseekorg/smg:1.13.0",
        ["smg", "launch"],
        ["--host", "0.0.0.0", "--port", "30000", "--worker-urls", "http://127.1.0.2:30000", "--policy", "cache_aware"],
        IP,
        TOOLS,
    )
    assert isinstance(mapped, Runnable)
    assert mapped.argv[:2] == ("/venv/bin/smg", "launch")
    assert mapped.argv[mapped.argv.index("--host") + 1] == IP
    assert mapped.argv[mapped.argv.index("--prometheus-host") + 1] == IP
    assert "http://127.1.0.2:30000" in mapped.argv  # worker URLs are not listen addresses


@pytest.mark.parametrize(
    "command",
    [
        ["python3", "-m", "smg", "launch"],
        ["python3", "-m", "smg.launch_router"],
        ["python3", "-m", "sglang_router.launch_router"],
    ],
)
def test_router_module_forms(command: list[str]) -> None:
    mapped = map_container("lightseekorg/smg:1.13.0", command, ["--port", "1"], IP, TOOLS)
    assert isinstance(mapped, Runnable)
    assert mapped.argv[0] == "/venv/bin/python"
    assert mapped.argv[2] in ("smg", "smg.launch_router")


def test_operator_entrypoint_and_command() -> None:
    assert map_container("acme/sglang-operator:1", [], ["run"], IP, TOOLS) == Runnable(
        "operator", ("/venv/bin/sglang-operator", "run")
    )
    mapped = map_container(
        "acme/sglang-operator:1", ["sglang-operator", "run", "--liveness=http://0.0.0.0:8080/h"], [], IP, TOOLS
    )
    assert mapped == Runnable("operator", ("/venv/bin/sglang-operator", "run", f"--liveness=http://{IP}:8080/h"))


def test_unknown_image_names_the_image() -> None:
    mapped = map_container("busybox:1.36", ["sleep", "3600"], [], IP, TOOLS)
    assert isinstance(mapped, NotRunnable)
    assert mapped.reason == NOT_RUNNABLE
    assert "busybox:1.36" in mapped.message


def test_known_image_with_foreign_command_is_not_runnable() -> None:
    mapped = map_container("lmsysorg/sglang:1", ["bash", "-c", "sleep 1"], [], IP, TOOLS)
    assert isinstance(mapped, NotRunnable)
    assert "sglang.launch_server" in mapped.message


def test_rewrite_unspecified_keeps_other_addresses() -> None:
    assert rewrite_unspecified(["0.0.0.0:5000", "10.0.0.0", "::", "http://0.0.0.0/x", "10.0.0.01"], IP) == [
        f"{IP}:5000",
        "10.0.0.0",
        IP,
        f"http://{IP}/x",
        "10.0.0.01",
    ]
