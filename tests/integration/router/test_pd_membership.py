"""Router membership keyed on (url, worker type, bootstrap port): the pure plan, the parser of `GET /workers`, and
the real smg in prefill/decode mode on 127.0.0.1 (a worker registered with its type and port is listed so; an entry
of the wrong type or port is removed and registered again as it should be, in one sync)."""

import json
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sglang_operator.controller.routers import observe_routers, sync_routers
from sglang_operator.router.client import RouterClient, RouterWorker, parse_workers
from sglang_operator.router.membership import DesiredWorker, missing_roles, plan_membership, registered
from tests.integration.router.test_client import router_pod
from tests.support.router.fakehttp import FakeHTTP, Reply

W1, W2 = "http://10.0.0.1:30000", "http://10.0.0.2:30000"


def listed(id_: str, url: str, worker_type: str = "regular", port: int | None = None,
           healthy: bool = True) -> RouterWorker:  # fmt: skip
    return RouterWorker(id=id_, url=url, status="ready", healthy=healthy, worker_type=worker_type, bootstrap_port=port)


# -- the plan -----------------------------------------------------------------------------------------------------
def test_an_entry_of_the_wrong_type_is_removed_then_registered_again() -> None:
    plan = plan_membership([DesiredWorker(W1, "prefill", 8998)], [listed("a", W1, "decode")])
    assert (plan.add, [w.id for w in plan.remove], plan.replace) == ((), ["a"], (W1,))


def test_an_entry_with_the_wrong_bootstrap_port_is_removed_then_registered_again() -> None:
    for port in (None, 9000):
        plan = plan_membership([DesiredWorker(W1, "prefill", 8998)], [listed("a", W1, "prefill", port)])
        assert (plan.add, [w.id for w in plan.remove], plan.replace) == ((), ["a"], (W1,))


def test_a_decode_listed_with_a_port_is_replaced() -> None:
    """smg keeps a port given with a decode registration; the operator's decode entries carry none."""
    plan = plan_membership([DesiredWorker(W1, "decode")], [listed("a", W1, "decode", 8998)])
    assert plan.replace == (W1,)


def test_of_duplicates_the_matching_entry_stays_and_nothing_is_added() -> None:
    observed = [listed("a", W1, "regular"), listed("b", W1, "prefill", 8998, healthy=False),
                listed("c", W1, "prefill", 8998)]  # fmt: skip
    plan = plan_membership([DesiredWorker(W1, "prefill", 8998)], observed)
    assert (plan.add, [w.id for w in plan.remove], plan.replace) == ((), ["a", "b"], ())


def test_unknown_urls_and_types_are_removed_and_new_ones_added() -> None:
    observed = [listed("a", W1, "decode"), listed("e", "http://10.0.0.9:30000", "encode")]
    plan = plan_membership([DesiredWorker(W1, "decode"), DesiredWorker(W2, "prefill", 8998)], observed)
    assert (plan.add, [w.id for w in plan.remove], plan.replace) == ((W2,), ["e"], ())


def test_a_colocated_fleet_plans_as_before() -> None:
    """Bare URLs are regular workers without a port: what a colocated router lists."""
    assert plan_membership([W1], [listed("a", W1)]).empty
    assert plan_membership([W1], [listed("a", W1, "prefill", 8998)]).replace == (W1,)


def test_registered_counts_matching_entries_and_missing_roles_names_the_absent_ones() -> None:
    wanted = {W1: DesiredWorker(W1, "prefill", 8998), W2: DesiredWorker(W2, "decode")}
    assert registered(wanted, [listed("a", W1, "prefill", 8998), listed("b", W2, "prefill", 8998)]) == 1
    assert missing_roles([listed("a", W1, "prefill", 8998)]) == ["decode"]
    assert missing_roles([]) == ["prefill", "decode"]
    assert missing_roles([listed("a", W1, "prefill", 8998), listed("b", W2, "decode")]) == []


# -- the parser ---------------------------------------------------------------------------------------------------
def entry(**fields: Any) -> dict[str, Any]:
    return {"workers": [{"id": "a1", "url": W1, "status": "ready", "is_healthy": True, **fields}]}


def test_type_and_port_are_read() -> None:
    [worker] = parse_workers(entry(worker_type="prefill", bootstrap_port=8998))
    assert (worker.worker_type, worker.bootstrap_port) == ("prefill", 8998)
    [worker] = parse_workers(entry(worker_type="decode", bootstrap_port=None))
    assert (worker.worker_type, worker.bootstrap_port) == ("decode", None)
    [worker] = parse_workers(entry())  # an older router lists neither: a regular worker
    assert (worker.worker_type, worker.bootstrap_port) == ("regular", None)


BAD_FIELDS = {
    "type-a-number": {"worker_type": 1},
    "type-empty": {"worker_type": ""},
    "type-an-object": {"worker_type": {"Prefill": {"bootstrap_port": 8998}}},
    "type-null": {"worker_type": None},
    "port-a-string": {"bootstrap_port": "8998"},
    "port-zero": {"bootstrap_port": 0},
    "port-too-big": {"bootstrap_port": 70000},
    "port-a-bool": {"bootstrap_port": True},
    "port-a-float": {"bootstrap_port": 8998.0},
}


@pytest.mark.parametrize("fields", BAD_FIELDS.values(), ids=BAD_FIELDS.keys())
def test_an_unusable_type_or_port_is_not_a_worker_list(fields: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        parse_workers(entry(**fields))


# -- the real smg in prefill/decode mode ----------------------------------------------------------------------------
SMG = shutil.which("smg", path=str(Path(sys.executable).parent)) or shutil.which("smg")
MODEL = "org/model"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as response:
            return int(response.status) == 200
    except (urllib.error.URLError, OSError):
        return False


@pytest.fixture
def pd_router() -> Iterator[str]:
    """smg 1.13.0 launched with `--pd-disaggregation` on 127.0.0.1 and no worker; stopped when the test ends."""
    if SMG is None:
        pytest.skip("smg is not installed")
    port = free_port()
    command = [SMG, "launch", "--pd-disaggregation", "--host", "127.0.0.1", "--port", str(port),
               "--prometheus-host", "127.0.0.1", "--prometheus-port", str(free_port()), "--log-level", "warn",
               "--health-check-interval-secs", "2", "--worker-startup-check-interval", "1",
               "--shutdown-grace-period-secs", "1"]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while not answers(f"{url}/health"):
            assert process.poll() is None, f"smg exited with {process.returncode}"
            assert time.monotonic() < deadline, "smg did not answer /health within 20s"
            time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def stand_in_worker(fake_http: Callable[..., FakeHTTP]) -> str:
    """An HTTP server answering what smg reads of a worker it registers (its health, its model)."""
    models = {"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "sglang"}]}
    info = {"model_path": MODEL, "served_model_name": MODEL, "is_generation": True}
    return fake_http({
        ("GET", "/health"): Reply(body=b"", content_type="text/plain"),
        ("GET", "/v1/models"): Reply.json(models),
        ("GET", "/server_info"): Reply.json(info),
        ("GET", "/model_info"): Reply.json(info),
    }).url  # fmt: skip


def entries(router: str) -> set[tuple[str, str, int | None]]:
    return {(w.url, w.worker_type, w.bootstrap_port) for w in RouterClient(router).list_workers()
            if w.status != "draining"}  # fmt: skip


def wait_for(router: str, wanted: set[tuple[str, str, int | None]], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while (now := entries(router)) != wanted:
        assert time.monotonic() < deadline, f"smg lists {now}, not {wanted}"
        time.sleep(0.1)


def sync(router: str, desired: list[DesiredWorker]) -> Any:
    return sync_routers(observe_routers([router_pod(router)], None), desired, disaggregated=True)


def test_smg_lists_a_prefill_with_its_port_and_a_decode(pd_router: str, fake_http: Callable[..., FakeHTTP]) -> None:
    prefill, decode = stand_in_worker(fake_http), stand_in_worker(fake_http)
    desired = [DesiredWorker(prefill, "prefill", 9123), DesiredWorker(decode, "decode")]
    first = sync(pd_router, desired)
    assert first.changed and not first.failures and not first.observation.synced
    wait_for(pd_router, {(prefill, "prefill", 9123), (decode, "decode", None)})
    again = sync(pd_router, desired)
    assert not again.changed and again.observation.synced and again.observation.registered == 2


def test_smg_entries_of_the_wrong_type_or_port_are_corrected_in_one_sync(
    pd_router: str, fake_http: Callable[..., FakeHTTP]
) -> None:
    typed_wrong, port_wrong, decode = (stand_in_worker(fake_http) for _ in range(3))
    client = RouterClient(pd_router)
    client.add_worker(typed_wrong, worker_type="decode")
    client.add_worker(port_wrong, worker_type="prefill", bootstrap_port=9999)
    client.add_worker(decode, worker_type="decode")
    wait_for(pd_router, {(typed_wrong, "decode", None), (port_wrong, "prefill", 9999), (decode, "decode", None)})
    desired = [DesiredWorker(typed_wrong, "prefill", 9123), DesiredWorker(port_wrong, "prefill", 9123),
               DesiredWorker(decode, "decode")]  # fmt: skip
    result = sync(pd_router, desired)
    assert result.changed and not result.failures
    assert result.unconfirmed_removals == set()  # the wrong entries were gone before their URLs were registered again
    wanted = {(typed_wrong, "prefill", 9123), (port_wrong, "prefill", 9123), (decode, "decode", None)}
    wait_for(pd_router, wanted)
    assert sync(pd_router, desired).observation.synced


def test_smg_answers_503_until_it_lists_both_roles(pd_router: str, fake_http: Callable[..., FakeHTTP]) -> None:
    """Why `synced` needs both roles: with one role only, smg refuses every request."""
    prefill = stand_in_worker(fake_http)
    assert not sync(pd_router, [DesiredWorker(prefill, "prefill", 9123)]).observation.synced
    wait_for(pd_router, {(prefill, "prefill", 9123)})
    again = sync(pd_router, [DesiredWorker(prefill, "prefill", 9123)])
    assert not again.changed and not again.observation.synced
    assert again.observation.note == "not every router pod lists a decode worker yet"
    body = json.dumps({"text": "hi", "sampling_params": {"max_new_tokens": 1}}).encode()
    request = urllib.request.Request(f"{pd_router}/generate", data=body, headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 503
