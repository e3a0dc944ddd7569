"""The supervisor: which loops a CR wants, the finalizer patch the leader sends, and the tasks it starts and stops
from watch events, against fake loops and a recording patch writer (no kopf, no API server).

A standby must not start a loop or write a finalizer before it leads; once it leads, every CR it already knows gets
its loops at once (that is the warm handover); a deleted CR keeps its finalizer until its loops have stopped."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from kubernetes import client

from sglang_operator.runtime import supervisor as supervisor_module
from sglang_operator.runtime.supervisor import (
    FINALIZER,
    Live,
    LoopKind,
    Stopped,
    Supervisor,
    finalizer_patch,
    wanted_loops,
)
from sglang_operator.runtime.writer import Writer
from tests.support.runtime.waiting import until


def cr(name: str = "chat", rv: str = "1", finalizers: list[str] | None = None, deleting: bool = False,
       autoscaling: bool = False) -> dict[str, Any]:  # fmt: skip
    metadata: dict[str, Any] = {"name": name, "namespace": "team-a", "resourceVersion": rv, "generation": 1}
    if finalizers is not None:
        metadata["finalizers"] = finalizers
    if deleting:
        metadata["deletionTimestamp"] = "2026-12-02T06:00:00Z"
    return {"metadata": metadata, "spec": {"autoscaling": {"enabled": autoscaling}}}


def autoscaling_on(body: Mapping[str, Any]) -> bool:
    return bool(body["spec"]["autoscaling"]["enabled"])


def test_a_cr_wants_the_loops_whose_condition_holds_and_none_once_deleted() -> None:
    kinds = [LoopKind("reconcile", lambda **_: None, lambda body: True),
             LoopKind("autoscaler", lambda **_: None, autoscaling_on)]  # fmt: skip
    assert wanted_loops(kinds, cr()) == {"reconcile"}
    assert wanted_loops(kinds, cr(autoscaling=True)) == {"reconcile", "autoscaler"}
    assert wanted_loops(kinds, cr(autoscaling=True, deleting=True)) == frozenset()
    assert wanted_loops(kinds, None) == frozenset()


def test_the_finalizer_patch_adds_to_a_live_cr_removes_from_a_deleted_one_and_tests_the_version() -> None:
    test = {"op": "test", "path": "/metadata/resourceVersion", "value": "7"}
    assert finalizer_patch(cr(rv="7")) == [test, {"op": "add", "path": "/metadata/finalizers", "value": [FINALIZER]}]
    assert finalizer_patch(cr(rv="7", finalizers=["x/y"])) == [
        test, {"op": "add", "path": "/metadata/finalizers/-", "value": FINALIZER}]  # fmt: skip
    assert finalizer_patch(cr(finalizers=[FINALIZER])) is None
    assert finalizer_patch(cr(rv="7", finalizers=["x/y", FINALIZER], deleting=True)) == [
        test, {"op": "remove", "path": "/metadata/finalizers/1"}]  # fmt: skip
    assert finalizer_patch(cr(finalizers=["x/y"], deleting=True)) is None  # not ours to remove
    assert finalizer_patch(cr(deleting=True)) is None


def test_the_finalizer_patch_is_sent_as_a_json_patch() -> None:
    """The kubernetes client sends a custom object's patch as a merge patch unless told otherwise; the API server
    refuses a list as a merge patch, and the finalizer would never be written."""
    sent: list[tuple[str, str, Any, Any]] = []

    class Recording(client.ApiClient):  # type: ignore[misc]
        def call_api(self, method: str, url: str, header_params: Any = None, body: Any = None, *a: Any, **kw: Any):  # type: ignore[no-untyped-def]
            sent.append((method, url, (header_params or {}).get("Content-Type"), body))
            raise RuntimeError("recorded")

    patch = finalizer_patch(cr(rv="7"))
    assert patch is not None
    with pytest.raises(RuntimeError, match="recorded"):
        Writer(Recording()).patch_finalizers("team-a", "chat", patch)
    method, url, content_type, body = sent[0]
    assert (method, content_type) == ("PATCH", "application/json-patch+json")
    assert url.endswith("/apis/sglang.ai/v1alpha1/namespaces/team-a/sglangdeployments/chat") and body == patch


def test_a_live_view_reads_the_latest_body_at_every_access() -> None:
    bodies = {"b": {"spec": {"replicas": 1}}}
    view = Live(lambda: bodies["b"])
    assert view["spec"] == {"replicas": 1} and dict(view) == bodies["b"] and len(view) == 1
    bodies["b"] = {"spec": {"replicas": 2}, "status": {}}
    assert view.get("spec") == {"replicas": 2} and len(view) == 2


class Harness:
    """A supervisor with loops that record their runs and stop when asked, a pool of one thread, and a patch writer
    that records (or fails)."""

    def __init__(self) -> None:
        self.started: list[tuple[str, str]] = []
        self.seen: list[Any] = []
        self.patches: list[tuple[str, str, list[dict[str, Any]]]] = []
        self.fail_writes = False
        self.pool = ThreadPoolExecutor(1)
        self.release = asyncio.Event()

        def make(kind: str) -> Callable[..., Any]:
            async def run(*, stopped: Stopped, name: str, namespace: str, body: Live, spec: Live, **indexes: Any):  # type: ignore[no-untyped-def]
                self.started.append((kind, name))
                self.seen.append((indexes, spec.get("autoscaling")))
                while not stopped:
                    await asyncio.sleep(0.01)

            return run

        self.kinds = [LoopKind("reconcile", make("reconcile"), lambda body: True),
                      LoopKind("autoscaler", make("autoscaler"), autoscaling_on)]  # fmt: skip
        self.lock = threading.Lock()

        def write(namespace: str, name: str, patch: list[dict[str, Any]]) -> None:
            if self.fail_writes:
                raise RuntimeError("422: the CR changed")
            with self.lock:
                self.patches.append((namespace, name, patch))

        self.supervisor = Supervisor(self.kinds, write, stop_timeout=0.5, retry_seconds=0.05)


@pytest.fixture
def harness(monkeypatch: pytest.MonkeyPatch) -> Harness:
    h = Harness()

    async def pooled(fn: Any, pool: Any = None, priority: Any = None, preempt: Any = None) -> Any:
        return await asyncio.wrap_future(h.pool.submit(fn))

    monkeypatch.setattr(supervisor_module, "run_in_pool", pooled)
    return h


def test_a_standby_starts_nothing_and_writes_nothing_until_it_leads_then_every_known_cr_starts(
    harness: Harness,
) -> None:
    s = harness.supervisor
    index = {"sgld_pods": {}}

    async def main() -> None:
        s.observe("team-a", "chat", cr("chat", finalizers=[FINALIZER]), index)
        s.observe("team-a", "code", cr("code", autoscaling=True), index)
        await asyncio.sleep(0.05)
        assert harness.started == [] and harness.patches == [] and s.tasks == {}
        s.lead()  # the Lease is won: the loops start at once, from what the watch already showed
        await until(lambda: len(harness.started) == 3)
        assert sorted(harness.started) == [("autoscaler", "code"), ("reconcile", "chat"), ("reconcile", "code")]
        assert harness.seen[0][0] == index  # the loops get kopf's indexes by name
        await until(lambda: len(harness.patches) == 1)  # only the CR without the finalizer gets it
        assert harness.patches[0][:2] == ("team-a", "code")
        await s.stop_all()
        assert s.tasks == {}

    asyncio.run(main())


def test_loops_follow_their_condition_and_a_deleted_cr_loses_its_finalizer_only_after_its_loops_stopped(
    harness: Harness,
) -> None:
    s = harness.supervisor

    async def main() -> None:
        s.lead()
        s.observe("team-a", "chat", cr(finalizers=[FINALIZER]), {})
        await until(lambda: s.running(("team-a", "chat")) == ["reconcile"])
        s.observe("team-a", "chat", cr(rv="2", finalizers=[FINALIZER], autoscaling=True), {})
        await until(lambda: s.running(("team-a", "chat")) == ["autoscaler", "reconcile"])
        s.observe("team-a", "chat", cr(rv="3", finalizers=[FINALIZER], autoscaling=False), {})
        await until(lambda: s.running(("team-a", "chat")) == ["reconcile"])  # autoscaling off: its loop stopped
        assert harness.patches == []
        s.observe("team-a", "chat", cr(rv="4", finalizers=[FINALIZER], deleting=True), {})
        assert harness.patches == []  # its loop still runs: the finalizer stays
        await until(lambda: len(harness.patches) == 1)
        assert s.running(("team-a", "chat")) == []
        assert harness.patches[0][2][1] == {"op": "remove", "path": "/metadata/finalizers/0"}
        s.observe("team-a", "chat", None, {})  # the DELETED event
        assert s.bodies == {} and s.tasks == {}

    asyncio.run(main())


def test_a_failed_finalizer_write_is_decided_again(harness: Harness) -> None:
    s = harness.supervisor

    async def main() -> None:
        harness.fail_writes = True
        s.lead()
        s.observe("team-a", "chat", cr(), {})
        await asyncio.sleep(0.2)  # several failed attempts, each retried after `retry_seconds`
        assert harness.patches == []
        harness.fail_writes = False
        await until(lambda: len(harness.patches) == 1)
        await s.stop_all()

    asyncio.run(main())


def test_a_loop_that_ends_by_itself_is_not_restarted_while_still_wanted(harness: Harness) -> None:
    ran: list[str] = []

    async def once(*, name: str, **_: Any) -> None:
        ran.append(name)

    s = Supervisor([LoopKind("once", once, lambda body: True)], lambda *a: None)

    async def main() -> None:
        s.lead()
        s.observe("team-a", "chat", cr(finalizers=[FINALIZER]), {})
        await until(lambda: ran == ["chat"] and not s.tasks)
        s.observe("team-a", "chat", cr(rv="2", finalizers=[FINALIZER]), {})
        await asyncio.sleep(0.05)
        assert ran == ["chat"]

    asyncio.run(main())


def test_a_loop_that_ignores_its_stop_is_cancelled_after_the_timeout(harness: Harness) -> None:
    cancelled: list[bool] = []

    async def stubborn(**_: Any) -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    s = Supervisor([LoopKind("stubborn", stubborn, lambda body: True)], lambda *a: None, stop_timeout=0.1)

    async def main() -> None:
        s.lead()
        s.observe("team-a", "chat", cr(finalizers=[FINALIZER]), {})
        await until(lambda: bool(s.tasks))
        s.observe("team-a", "chat", cr(rv="2", finalizers=[FINALIZER], deleting=True), {})
        await until(lambda: cancelled == [True] and not s.tasks)

    asyncio.run(main())
