"""Light pods: which pods are light, what they listen on, and that the operator's own clients accept their answers.

The server tests bind 127.0.0.1 on free ports and talk to it with the operator's router client and load reader
(the contracts the operator relies on), from a thread so the agent-side event loop keeps serving.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import time
from typing import Any

import pytest
import requests

from localcluster.nodeagent.images import LIGHT_ANNOTATION, Runnable, Toolchain, light_image, light_pod, map_container
from localcluster.nodeagent.light import (
    LightPod,
    LightProc,
    LightServer,
    answer,
    light_ports,
    make_pod,
    startup_seconds,
)
from localcluster.nodeagent.process import ProcRecord
from sglang_operator.controller.loads import read_load
from sglang_operator.router.client import RouterClient

TOOLS = Toolchain(python="/venv/bin/python", bindir="/venv/bin")
IP = "127.1.0.7"
SGLANG_CMD = ["python3", "-m", "sglang.launch_server"]
SGLANG_ARGS = ["--model-path", "Qwen/Qwen3-8B", "--host", "0.0.0.0", "--port", "30000"]
ROUTER_CMD = ["smg", "launch", "--host", "0.0.0.0", "--port", "30000", "--prometheus-port", "29000"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize(
    ("image", "light"),
    [
        ("lmsysorg/sglang-light:v0.5.23", True),
        ("lightseekorg/smg-light:1.13.0", True),
        ("registry:5000/team/smg-light@sha256:abc", True),
        ("lmsysorg/sglang:v0.5.23", False),
        ("lightseekorg/smg:1.13.0-light", False),  # a tag does not make an image light
        ("lightseekorg/light/smg:1.13.0", False),  # only the last path element counts
    ],
)
def test_light_image_marker(image: str, light: bool) -> None:
    assert light_image(image) is light


def test_light_images_keep_their_kind_and_command_checks() -> None:
    worker = map_container("lmsysorg/sglang-light:v0.5.23", SGLANG_CMD, SGLANG_ARGS, IP, TOOLS)
    router = map_container("lightseekorg/smg-light:1.13.0", ROUTER_CMD, [], IP, TOOLS)
    assert isinstance(worker, Runnable) and (worker.kind, worker.light) == ("sglang", True)
    assert isinstance(router, Runnable) and (router.kind, router.light) == ("router", True)
    # A command the real image would not run is refused for the light one too.
    assert not isinstance(map_container("lmsysorg/sglang-light:v0.5.23", ["bash"], [], IP, TOOLS), Runnable)


def test_annotation_makes_sglang_and_router_light_but_never_the_operator() -> None:
    assert light_pod({LIGHT_ANNOTATION: "true"}) and light_pod({LIGHT_ANNOTATION: "True"})
    assert not light_pod({LIGHT_ANNOTATION: "false"}) and not light_pod(None)
    real = map_container("lmsysorg/sglang:v0.5.23", SGLANG_CMD, SGLANG_ARGS, IP, TOOLS)
    light = map_container("lmsysorg/sglang:v0.5.23", SGLANG_CMD, SGLANG_ARGS, IP, TOOLS, light=True)
    operator = map_container("ghcr.io/acme/sglang-operator:0.1", [], ["run"], IP, TOOLS, light=True)
    assert isinstance(real, Runnable) and not real.light
    assert isinstance(light, Runnable) and light.light and light.argv == real.argv
    assert isinstance(operator, Runnable) and not operator.light


def test_ports_come_from_the_container_and_the_flags() -> None:
    container: dict[str, Any] = {"ports": [{"containerPort": 30000}, {"containerPort": 8080}]}
    assert light_ports("sglang", container, ["--port", "31000"]) == (8080, 30000, 31000)
    assert light_ports("sglang", {}, []) == (30000,)  # SGLang's default port
    assert light_ports("router", {}, ["--port=30001"]) == (29000, 30001)  # smg's metrics listener by default


def test_startup_delay_follows_the_simulator_knob() -> None:
    assert startup_seconds({}) == 0.0
    assert startup_seconds({"SGLANG_SIM_STARTUP_SECONDS": "1.5"}) == 1.5
    assert startup_seconds({"SGLANG_SIM_STARTUP_SECONDS": "nan"}) == 0.0
    assert startup_seconds({"SGLANG_SIM_STARTUP_SECONDS": "-3"}) == 0.0
    assert startup_seconds({"SGLANG_SIM_STARTUP_SECONDS": "x"}) == 0.0
    assert startup_seconds({"SGLANG_SIM_STARTUP_SECONDS": "1e9"}) == 3600.0


def test_worker_answers_503_until_up_then_serves_health_and_loads() -> None:
    pod = make_pod("sglang", IP, {}, ["--served-model-name", "m"], {"SGLANG_SIM_STARTUP_SECONDS": "5"})
    assert pod.model == "m"
    assert answer(pod, "GET", "/ready", None, 0.0)[0] == 503
    assert answer(pod, "GET", "/v1/loads", None, 0.0)[0] == 503
    pod.started -= 10
    assert answer(pod, "GET", "/ready", None, 0.0)[0] == 200
    status, body = answer(pod, "GET", "/v1/loads", None, 0.0)
    assert status == 200 and body["loads"][0]["num_running_reqs"] == 0
    assert answer(pod, "POST", "/generate", {}, 0.0)[0] == 501  # no inference: nothing pretends to serve it
    status, text = answer(pod, "GET", "/metrics", None, 0.0)
    assert status == 200 and 'sglang:num_running_reqs{model_name="m"} 0.0' in text


def test_router_table_registers_once_and_removes_by_id() -> None:
    pod = LightPod("router", IP, (30000,))
    assert answer(pod, "GET", "/readiness", None, 0.0)[0] == 503
    status, accepted = answer(pod, "POST", "/workers", {"url": "http://a:1"}, 12.5)
    assert status == 202
    assert answer(pod, "POST", "/workers", {"url": "http://a:1"}, 13.0)[0] == 409
    assert answer(pod, "POST", "/workers", {"nourl": 1}, 13.0)[0] == 400
    assert answer(pod, "POST", "/workers", ["x"], 13.0)[0] == 400
    (entry,) = answer(pod, "GET", "/workers", None, 0.0)[1]["workers"]
    assert (entry["url"], entry["registered_at"], entry["status"]) == ("http://a:1", 12.5, "ready")
    assert answer(pod, "GET", "/readiness", None, 0.0)[0] == 200
    assert answer(pod, "DELETE", f"/workers/{accepted['worker_id']}", None, 0.0)[0] == 202
    assert answer(pod, "DELETE", f"/workers/{accepted['worker_id']}", None, 0.0)[0] == 404
    assert answer(pod, "GET", "/workers", None, 0.0)[1]["total"] == 0


async def _serve_both(server: LightServer) -> tuple[LightPod, LightPod, list[Any], list[Any]]:
    worker = LightPod("sglang", "127.0.0.1", (free_port(),), "m")
    router = LightPod("router", "127.0.0.1", (free_port(), free_port()))
    return worker, router, await server.open(worker), await server.open(router)


def test_the_operators_clients_work_against_light_pods() -> None:
    def operator_side(worker: str, router: str) -> tuple[Any, ...]:
        client = RouterClient(router)
        client.add_worker(worker)
        client.add_worker(worker)  # a 409 is what the operator wants: no error
        (listed,) = client.list_workers()
        load = read_load(worker)
        client.remove_worker(listed.id)
        return listed.url, listed.healthy, load, client.list_workers()

    async def scenario() -> tuple[Any, ...]:
        server = LightServer()
        try:
            worker, router, _, _ = await _serve_both(server)
            w, r = f"http://127.0.0.1:{worker.ports[0]}", f"http://127.0.0.1:{router.ports[0]}"
            result = await asyncio.to_thread(operator_side, w, r)
            metrics = await asyncio.to_thread(requests.get, f"http://127.0.0.1:{router.ports[1]}/metrics", timeout=5)
            return (*result, metrics.status_code)
        finally:
            await server.close()

    worker_url, healthy, load, after, metrics_status = asyncio.run(scenario())
    assert worker_url.startswith("http://127.0.0.1:") and healthy
    assert load == (0, None)
    assert after == [] and metrics_status == 200


def test_probes_are_answered_in_process_and_a_stopped_pod_stops_listening() -> None:
    async def scenario() -> tuple[Any, ...]:
        server = LightServer()
        try:
            worker, router, worker_sites, _ = await _serve_both(server)
            before = server.probe("127.0.0.1", worker.ports[0], "/ready?x=1"), server.probe("127.0.0.1", 1, "/")
            proc = LightProc(ProcRecord(0, 0, 0, "c", time.time()), server, worker, worker_sites)
            proc.signal(signal.SIGKILL)
            code = await asyncio.wait_for(proc.exited, 5)
            url = f"http://127.0.0.1:{worker.ports[0]}/health"
            try:
                await asyncio.to_thread(requests.get, url, timeout=5)
                refused = False
            except requests.ConnectionError:
                refused = True
            still = server.probe("127.0.0.1", router.ports[0], "/health")
            return before, code, proc.signal_number, refused, server.probe("127.0.0.1", worker.ports[0], "/"), still
        finally:
            await server.close()

    before, code, signal_number, refused, after, router_still = asyncio.run(scenario())
    assert before == (200, None)
    assert (code, signal_number) == (137, signal.SIGKILL)
    assert refused and after is None and router_still == 200


def test_a_taken_port_is_an_error_and_leaves_nothing_open() -> None:
    async def scenario() -> tuple[bool, int | None]:
        server = LightServer()
        try:
            port = free_port()
            await server.open(LightPod("sglang", "127.0.0.1", (port,)))
            second = LightPod("router", "127.0.0.1", (free_port(), port))
            try:
                await server.open(second)
                failed = False
            except OSError:
                failed = True
            return failed, server.probe("127.0.0.1", second.ports[0], "/health")
        finally:
            await server.close()

    assert asyncio.run(scenario()) == (True, None)
