"""A prefill/decode fleet's cut-over between KV epochs, step by step in the pure parts: the epoch of a spec, which
router slot runs which epoch and which is kept, which replicas are held while the new generation comes up, when the
router Service may move, and each router listing only its own epoch's workers."""

import json
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

import pytest

from sglang_operator import names
from sglang_operator.api.constants import ANNOTATION_KV_EPOCH, ANNOTATION_KV_EPOCH_SINCE, LABEL_KV_EPOCH
from sglang_operator.api.groups import worker_groups
from sglang_operator.api.spec import SGLangDeploymentSpec, UpdateStrategy
from sglang_operator.controller.cutover import SETTLE_SECONDS, held_replicas, settling, switch_check
from sglang_operator.controller.fleet import GroupPass
from sglang_operator.controller.planner import Targets, plan_replicas
from sglang_operator.controller.routers import RouterState, sync_routers
from sglang_operator.kvepoch import Cutover, kv_epoch, plan_cutover
from sglang_operator.observed import PodView, ReplicaView
from sglang_operator.render import Owner, render_all, shared_children
from sglang_operator.router.client import RouterWorker
from sglang_operator.router.membership import DesiredWorker
from tests.support.api.pd_cases import pd
from tests.support.router.fakehttp import FakeHTTP, Reply, serving

OWNER = Owner(name="chat", namespace="team-a", uid="cr-uid")
SLOT_A, SLOT_B = names.router_slots("chat")
NOW = 1_800_000_000.0


def spec(**top: Any) -> SGLangDeploymentSpec:
    return SGLangDeploymentSpec.model_validate({"model": {"path": "org/model"}, **pd(**top)})


# -- the epoch ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("change", [
    {"model": {"path": "org/other"}},
    {"model": {"path": "org/model", "revision": "abc123"}},
    {"engine": {"version": "0.5.22"}},
    {"engine": {"image": "registry.local/sglang:v0.5.23-patched", "version": "0.5.23"}},
    {"disaggregation": {"transferBackend": "nixl"}},
    {"disaggregation": {"pageSize": 16}},
    {"disaggregation": {"kvCacheDtype": "fp8_e5m2"}},
    {"disaggregation": {"dtype": "float16"}},
])  # fmt: skip
def test_each_field_of_the_kv_contract_changes_the_epoch(change: dict[str, Any]) -> None:
    assert kv_epoch(spec(**change)) != kv_epoch(spec())


def test_a_dtype_change_is_a_new_epoch_and_its_spellings_are_one() -> None:
    """Issue 37: a `--dtype` change rolled group by group, pairing fp16 prefills with bf16 decodes. SGLang's own
    spellings of one dtype (half/float16, float/float32) and `auto` written out (SGLang's default, what an unset
    field renders) hand over the same pages: no cut-over for those."""
    fp16, bf16 = (
        kv_epoch(spec(disaggregation={"dtype": "float16"})),
        kv_epoch(spec(disaggregation={"dtype": "bfloat16"})),
    )
    assert len({fp16, bf16, kv_epoch(spec())}) == 3
    assert kv_epoch(spec(disaggregation={"dtype": "half"})) == fp16
    assert kv_epoch(spec(disaggregation={"dtype": "float"})) == kv_epoch(spec(disaggregation={"dtype": "float32"}))
    assert kv_epoch(spec(disaggregation={"dtype": "auto"})) == kv_epoch(spec())


def test_what_a_handoff_does_not_depend_on_leaves_the_epoch() -> None:
    base = kv_epoch(spec())
    assert len(base) == 10
    assert kv_epoch(spec(router={"decodePolicy": "least_load"})) == base
    assert kv_epoch(spec(engine={"version": "0.5.23"})) == base  # the default, written out
    assert kv_epoch(spec(engine={"image": "lmsysorg/sglang:v0.5.23"})) == base
    assert kv_epoch(spec(engine={"args": ["--chunked-prefill-size", "4096"]})) == base
    colocated = SGLangDeploymentSpec.model_validate({"model": {"path": "org/model"}})
    assert kv_epoch(colocated) == ""


def test_pd_pods_and_routers_carry_the_epoch_and_the_service_selects_it() -> None:
    s = spec()
    epoch = kv_epoch(s)
    objects = render_all(s, OWNER)
    workers = [o for o in objects if o["kind"] == "Pod"]
    assert workers and all(w["metadata"]["labels"][LABEL_KV_EPOCH] == epoch for w in workers)
    [deployment] = [o for o in objects if o["kind"] == "Deployment"]
    [service] = [o for o in objects if o["kind"] == "Service" and o["metadata"]["name"] == SLOT_A]
    assert deployment["metadata"]["name"] == SLOT_A
    assert deployment["metadata"]["annotations"][ANNOTATION_KV_EPOCH] == epoch
    assert deployment["spec"]["template"]["metadata"]["labels"][LABEL_KV_EPOCH] == epoch
    assert service["spec"]["selector"][LABEL_KV_EPOCH] == epoch
    colocated = render_all(SGLangDeploymentSpec.model_validate({"model": {"path": "org/model"}}), OWNER)
    assert not any(LABEL_KV_EPOCH in json.dumps(o) for o in colocated)  # a colocated fleet renders as before


def test_during_a_cut_over_the_new_slot_runs_the_spec_and_the_service_stays() -> None:
    cutover = Cutover("new", "old", "2026-12-04T10:00:00Z", SLOT_B, kept=(SLOT_A,))
    children = shared_children(spec(), OWNER, cutover=cutover)
    [deployment] = [c for c in children if c["kind"] == "Deployment"]
    [service] = [c for c in children if c["kind"] == "Service"]
    assert deployment["metadata"]["name"] == SLOT_B
    assert deployment["spec"]["template"]["metadata"]["labels"][LABEL_KV_EPOCH] == "new"
    assert service["spec"]["selector"][LABEL_KV_EPOCH] == "old"
    assert service["metadata"]["annotations"][ANNOTATION_KV_EPOCH_SINCE] == "2026-12-04T10:00:00Z"


# -- which slot runs which epoch ---------------------------------------------------------------------------------
def observed(epoch: str | None, since: str | None = None) -> dict[str, Any]:
    """A router Service or Deployment as the watch cache keeps it: its epoch annotation (None: made before
    epochs)."""
    annotations = {} if epoch is None else {ANNOTATION_KV_EPOCH: epoch}
    if since is not None:
        annotations[ANNOTATION_KV_EPOCH_SINCE] = since
    return {"metadata": {"annotations": annotations}}


@pytest.mark.parametrize(("service", "slots", "workers", "expected"), [
    # a fresh fleet: the first slot, serving the spec's epoch
    (None, {}, [], Cutover("D", "D", None, SLOT_A)),
    # steady
    (observed("D"), {SLOT_A: observed("D")}, ["D", "D"], Cutover("D", "D", None, SLOT_A)),
    # the contract changed: the idle slot gets the new epoch, the serving one is kept as it is
    (observed("S"), {SLOT_A: observed("S")}, ["S"], Cutover("D", "S", None, SLOT_B, (SLOT_A,))),
    (observed("S"), {SLOT_A: observed("S"), SLOT_B: observed("D")}, ["S", "D"],
     Cutover("D", "S", None, SLOT_B, (SLOT_A,))),
    # switched: the old slot stays while workers of its epoch drain, then goes
    (observed("D", "t"), {SLOT_A: observed("S"), SLOT_B: observed("D")}, ["S", "D"],
     Cutover("D", "D", "t", SLOT_B, (SLOT_A,))),
    (observed("D", "t"), {SLOT_A: observed("S"), SLOT_B: observed("D")}, ["D"], Cutover("D", "D", "t", SLOT_B)),
    # the next change goes back to the first slot
    (observed("D"), {SLOT_B: observed("D")}, ["D"], Cutover("E", "D", None, SLOT_A, (SLOT_B,))),
    # a second change before the first switched: the idle slot is taken over, the serving one kept
    (observed("S"), {SLOT_A: observed("S"), SLOT_B: observed("D")}, ["S", "D"],
     Cutover("E", "S", None, SLOT_B, (SLOT_A,))),
    # the change reverted before the switch: the serving slot is the spec's again; the abandoned one stays while
    # its workers drain
    (observed("S"), {SLOT_A: observed("S"), SLOT_B: observed("D")}, ["S", "D"],
     Cutover("S", "S", None, SLOT_A, (SLOT_B,))),
    # made before epochs: unlabelled routers and workers are the serving generation, which is the spec's
    (observed(None), {SLOT_A: observed(None)}, ["", ""], Cutover("D", "D", None, SLOT_A)),
])  # fmt: skip
def test_router_slots(service: dict[str, Any] | None, slots: dict[str, Any], workers: list[str],
                      expected: Cutover) -> None:  # fmt: skip
    assert plan_cutover("chat", expected.desired, service, slots, workers) == expected


# -- who keeps serving -------------------------------------------------------------------------------------------
def replica(index: int, epoch: str, revision: str = "new", ready: bool = True, ip: str = "") -> ReplicaView:
    pod = PodView(name=f"p{index}", rank=0, phase="Running", ready=ready, ip=ip or f"127.3.0.{index + 1}",
                  port=30000, deleting=False, restarts=0, replica_nodes=1, draining_since=None, warm=False)  # fmt: skip
    return ReplicaView(index=index, revision=revision, pods={0: pod}, epoch=epoch)


def test_the_serving_generation_is_held_until_the_switch_settles() -> None:
    replicas = [replica(0, "S", "old"), replica(1, "S", "old"), replica(2, "D"), replica(3, "", "old")]
    cutting = Cutover("D", "S", None, SLOT_B, (SLOT_A,))
    assert held_replicas(cutting, replicas, NOW) == {0, 1, 3}  # unlabelled: the serving epoch's
    just = Cutover("D", "D", "2027-01-15T08:00:00Z", SLOT_B, (SLOT_A,))  # NOW
    assert settling(just, NOW + 1) and held_replicas(just, replicas, NOW + 1) == {0, 1}  # "" is now D's
    assert not settling(just, NOW + SETTLE_SECONDS) and held_replicas(just, replicas, NOW + SETTLE_SECONDS) == set()
    assert held_replicas(None, replicas, NOW) == set()


def test_a_held_generation_is_not_drained_and_the_new_one_is_created_in_full() -> None:
    old = [replica(i, "S", "old") for i in range(3)]
    strategy = UpdateStrategy(max_surge=1, max_unavailable=0, drain_timeout_seconds=60)
    targets = Targets(active=3, warm=0, revision="new", strategy=strategy)
    held = plan_replicas(old, targets, {0: 0, 1: 0, 2: 0}, set(), NOW, held=frozenset({0, 1, 2}))
    assert held.create_active == [3, 4, 5] and held.drain == [] and held.delete == []
    rolling = plan_replicas(old, targets, {0: 0, 1: 0, 2: 0}, set(), NOW)
    assert rolling.create_active == [3]  # without a hold: maxSurge as ever
    whole = old + [replica(i, "D") for i in (3, 4, 5)]
    released = plan_replicas(whole, targets, {i: 0 for i in range(6)}, set(), NOW)
    assert sorted(released.drain) == [0, 1, 2] and released.create_active == []


# -- when the Service moves --------------------------------------------------------------------------------------
P_NEW, D_NEW, P_OLD = "http://127.3.0.5:30000", "http://127.3.0.6:30000", "http://127.3.0.1:30000"
R_NEW, R_OLD = "http://127.4.0.2:30000", "http://127.4.0.1:30000"


def groups(new_ready: bool = True) -> list[GroupPass]:
    prefill, decode = worker_groups(spec(workerGroups=[
        {"name": "p", "role": "prefill", "replicas": 1, "parallelism": {"tp": 2}},
        {"name": "d", "role": "decode", "replicas": 1, "parallelism": {}},
    ]))  # fmt: skip
    return [
        GroupPass(prefill, "new", 1, 0, [replica(0, "S", "old"), replica(4, "D", ready=new_ready, ip="127.3.0.5")]),
        GroupPass(decode, "new", 1, 0, [replica(1, "S", "old"), replica(5, "D", ip="127.3.0.6")]),
    ]


def lists(new: list[RouterWorker]) -> RouterState:
    old = [RouterWorker("o1", P_OLD, "ready", True, "prefill", 8998)]
    return RouterState(lists={R_OLD: old, R_NEW: new}, epochs={R_OLD: "S", R_NEW: "D"})


NEW_PAIR = [
    RouterWorker("n1", P_NEW, "ready", True, "prefill", 8998),
    RouterWorker("n2", D_NEW, "ready", True, "decode"),
]
CUTTING = Cutover("D", "S", None, SLOT_B, (SLOT_A,))


def test_the_service_moves_once_the_new_generation_is_whole() -> None:
    check = switch_check(CUTTING, groups(), lists(NEW_PAIR), router_replicas=1)
    assert check.ready
    assert "2/2 new replicas ready and listed by 1/1 new router pods" in check.note


@pytest.mark.parametrize(("why", "check"), [
    ("a new replica not ready", lambda: switch_check(CUTTING, groups(new_ready=False), lists(NEW_PAIR), 1)),
    ("a new replica not listed", lambda: switch_check(CUTTING, groups(), lists(NEW_PAIR[:1]), 1)),
    ("fewer new router pods than asked for", lambda: switch_check(CUTTING, groups(), lists(NEW_PAIR), 2)),
    ("a router unreachable", lambda: switch_check(
        CUTTING, groups(), RouterState(lists=lists(NEW_PAIR).lists, epochs=lists(NEW_PAIR).epochs, errors=["x"]), 1)),
    ("listed only by an old router", lambda: switch_check(
        CUTTING, groups(), RouterState(lists={R_OLD: NEW_PAIR}, epochs={R_OLD: "S"}), 1)),
])  # fmt: skip
def test_the_service_stays_while(why: str, check: Callable[[], Any]) -> None:
    assert not check().ready, why


# -- each router lists its own epoch's workers -------------------------------------------------------------------
@pytest.fixture
def router() -> Iterator[Callable[[list[dict[str, Any]]], FakeHTTP]]:
    """A scripted router listing `workers` and accepting registrations."""
    with ExitStack() as stack:
        yield lambda workers: stack.enter_context(serving({
            ("GET", "/workers"): Reply.json({"workers": workers, "total": len(workers)}),
            ("POST", "/workers"): Reply(status=202),
        }))  # fmt: skip


def test_each_router_is_given_only_its_own_epochs_workers(router: Callable[..., FakeHTTP]) -> None:
    old_router, new_router = router([]), router([])
    state = RouterState(lists={old_router.url: [], new_router.url: []},
                        epochs={old_router.url: "S", new_router.url: "D"})  # fmt: skip
    desired = [DesiredWorker(P_OLD, "prefill", 8998), DesiredWorker(P_NEW, "prefill", 8998)]
    result = sync_routers(state, desired, disaggregated=True, worker_epochs={P_OLD: "S", P_NEW: "D"},
                          serving_epoch="S")  # fmt: skip
    posted = {fake.url: [json.loads(r.body)["url"] for r in fake.requests if r.method == "POST"]
              for fake in (old_router, new_router)}  # fmt: skip
    assert posted == {old_router.url: [P_OLD], new_router.url: [P_NEW]}
    assert result.observation.ready_pods == 1  # status reports the routers the Service selects


def test_listed_everywhere_is_per_epoch() -> None:
    state = lists(NEW_PAIR)
    assert state.listed_everywhere() == {P_OLD, P_NEW, D_NEW}
    assert state.listed_by_all("D") == {P_NEW, D_NEW} and state.listed_by_all("X") == set()
    one_epoch = RouterState(lists={R_OLD: NEW_PAIR, R_NEW: NEW_PAIR[:1]})
    assert one_epoch.listed_everywhere() == {P_NEW}  # a colocated fleet's: every router
