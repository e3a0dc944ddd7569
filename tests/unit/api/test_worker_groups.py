"""Worker groups: every rule per group (derived from the rule table, so a new rule is checked for groups too), the
fleet's own group rules, each group's effective spec, names and labels, and whole passes over a two-group fleet."""

import json
from itertools import chain, combinations
from typing import Any

import pytest
from kubernetes import client
from pydantic import ValidationError

from sglang_operator.api.groups import FLEET_RULES, GroupRule, group_spec, worker_groups
from sglang_operator.api.spec import SGLangDeploymentSpec
from sglang_operator.api.validation import RULES, parse_spec
from sglang_operator.controller.reconcile import Reconciler
from sglang_operator.controller.scaletargets import STATUS_WRITES_PER_PASS, scale_target_counts
from sglang_operator.render import Owner, render_all, revision_hash
from sglang_operator.settings import OperatorSettings
from tests.support.controller.fakekube import FakeKube, wire
from tests.unit.api.test_validation import CASES, with_model

_GROUP_OBJECTS = ("parallelism", "resources", "template", "updateStrategy")
_GROUP_ENGINE = ("args", "env", "maxRunningRequests", "memFractionStatic")
# Objects a group may give as `{}` (all defaults): a group that restates them runs the same values, but as its own.
_EMPTY_OBJECTS = ("resources", "template")


def into_group(patch: dict[str, Any], keep: frozenset[str] = frozenset(), own: tuple[str, ...] = ()) -> dict[str, Any]:
    """A rule-table patch with every field a group can set moved into one group `g` (the rest stays on top), except
    the fields in `keep` (`resources`, `engine.args`, ...), which stay on top too; `own` are objects the group
    restates as `{}`. A patch of a disaggregated fleet keeps its groups, with `g` first as another decode group."""
    top: dict[str, Any] = {}
    group: dict[str, Any] = {"name": "g", "replicas": 1, "parallelism": {}, **{name: {} for name in own}}
    declared = patch.get("workerGroups", [])
    if any("role" in declared_group for declared_group in declared):
        group["role"] = "decode"
    for key, value in patch.items():
        if key in _GROUP_OBJECTS and key not in keep:
            group[key] = value
        elif key == "engine":
            mine = {k: v for k, v in value.items() if k in _GROUP_ENGINE and f"engine.{k}" not in keep}
            rest = {k: v for k, v in value.items() if k not in mine}
            if mine:
                group["engine"] = mine
            if rest:
                top["engine"] = rest
        elif key != "workerGroups":
            top[key] = value
    return {**top, "workerGroups": [group, *declared]}


def _placements(patch: dict[str, Any]) -> list[tuple[frozenset[str], tuple[str, ...]]]:
    """Every way to split the patch's group fields between the group and the top level, with and without the group
    restating each of `_EMPTY_OBJECTS` the patch does not set."""
    settable = [k for k in patch if k in _GROUP_OBJECTS and k != "parallelism"]
    settable += [f"engine.{k}" for k in patch.get("engine", {}) if k in _GROUP_ENGINE]
    empties = [name for name in _EMPTY_OBJECTS if name not in patch]
    return [
        (frozenset(keep), own)
        for keep in chain.from_iterable(combinations(settable, n) for n in range(len(settable) + 1))
        for own in chain.from_iterable(combinations(empties, n) for n in range(len(empties) + 1))
    ]


def expected_error(rule: GroupRule) -> tuple[str, str]:
    """What validate (and the API server) say when group `g`, the first, fails `rule`: on an item, the group's own
    field with the index; over the groups, `spec.workerGroups` with the group's name in the message."""
    assert rule.base is not None
    if rule.on_item:
        return f"spec.workerGroups[0]{rule.base.field.removeprefix('spec')}", rule.base.message
    return "spec.workerGroups", f"worker group 'g': {rule.base.message}"


def _group_cases() -> list[tuple[GroupRule, dict[str, Any], dict[str, Any]]]:
    """(group rule, failing spec, passing spec): each table case, in every placement where exactly one group rule
    fails it and no other rule does, and the passing spec in the same placement passes."""
    variants = [r for r in RULES if isinstance(r, GroupRule)]
    others = [r for r in RULES if not isinstance(r, GroupRule)]
    cases: dict[tuple[int, str], tuple[GroupRule, dict[str, Any], dict[str, Any]]] = {}
    for _, _, failing, passing in CASES:
        for keep, own in _placements(failing):
            bad = with_model(into_group(failing, keep, own))
            try:
                spec = SGLangDeploymentSpec.model_validate(bad)
            except ValidationError:
                continue
            failed = [r for r in variants if not r.holds(spec)]
            good = with_model(into_group(passing, keep, own))
            if len(failed) != 1 or any(not r.holds(spec) for r in others) or parse_spec(good, strict=True)[1]:
                continue
            cases.setdefault((id(failed[0]), json.dumps(bad, sort_keys=True)), (failed[0], bad, good))
    return list(cases.values())


GROUP_CASES = _group_cases()
_G = {"name": "a", "replicas": 1, "parallelism": {"tp": 2}}
FLEET_CASES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("unique", {"workerGroups": [_G, _G]}, {"workerGroups": [_G, {**_G, "name": "b"}]}),
    ("at most one group may leave out", {"workerGroups": [{"name": "a", "parallelism": {}}, {"name": "b",
     "parallelism": {}}]}, {"workerGroups": [{"name": "a", "parallelism": {}}, _G | {"name": "b"}]}),
    ("together at most", {"workerGroups": [_G | {"replicas": 300}, _G | {"name": "b", "replicas": 300}]},
     {"workerGroups": [_G | {"replicas": 300}, _G | {"name": "b", "replicas": 200}]}),
    ("autoscaling bounds", {"workerGroups": [_G | {"autoscaling": {"minReplicas": 3, "maxReplicas": 2}}]},
     {"workerGroups": [_G | {"autoscaling": {"minReplicas": 2, "maxReplicas": 2}}]}),
    ("every group's minReplicas", {"autoscaling": {"maxGPUs": 7}, "workerGroups": [
        _G | {"parallelism": {"tp": 4}, "autoscaling": {"minReplicas": 1}},
        _G | {"name": "b", "autoscaling": {"minReplicas": 2}}]},
     {"autoscaling": {"maxGPUs": 8}, "workerGroups": [
        _G | {"parallelism": {"tp": 4}, "autoscaling": {"minReplicas": 1}},
        _G | {"name": "b", "autoscaling": {"minReplicas": 2}}]}),
    # Issue 37: each group's maxReplicas was capped, not their sum (8 groups of 512 asked for 4,096 replicas)
    ("maxReplicas may add up to", {"workerGroups": [_G | {"autoscaling": {"maxReplicas": 300}},
                                                    _G | {"name": "b", "autoscaling": {"maxReplicas": 213}}]},
     {"workerGroups": [_G | {"autoscaling": {"maxReplicas": 300}},
                       _G | {"name": "b", "autoscaling": {"maxReplicas": 212}}]}),
]  # fmt: skip


def test_every_group_rule_has_a_case() -> None:
    assert {rule for rule, _, _ in GROUP_CASES} == {r for r in RULES if isinstance(r, GroupRule)}
    covered = {next(r for r in FLEET_RULES if fragment in r.message) for fragment, _, _ in FLEET_CASES}
    assert covered == set(FLEET_RULES)


@pytest.mark.parametrize(("rule", "failing", "passing"), GROUP_CASES, ids=[c[0].field for c in GROUP_CASES])
def test_each_rule_applies_to_each_group(rule: GroupRule, failing: dict[str, Any], passing: dict[str, Any]) -> None:
    spec, errors = parse_spec(failing, strict=True)
    assert spec is None
    assert [(e.field, e.message) for e in errors] == [expected_error(rule)]
    spec, errors = parse_spec(passing, strict=True)
    assert errors == [] and spec is not None


def test_a_rule_a_group_can_be_checked_by_alone_names_the_groups_field() -> None:
    """Issue 29: the CEL on the spec could name only `spec.workerGroups` while validate named the group's field;
    a rule that reads only what the group sets now sits on the group's item, where the API server names the index
    itself. A rule that also reads the top level (the fleet's version) names the group in both."""
    raw = with_model({"workerGroups": [_G, _G | {"name": "b", "engine": {"args": ["--por", "1"]}}]})
    assert [e.field for e in parse_spec(raw)[1]] == ["spec.workerGroups[1].engine.args"]
    item_rule = next(r for r in RULES if isinstance(r, GroupRule) and r.field == "spec.workerGroups[].engine.args")
    assert item_rule.on_item and item_rule.field_path == ".engine.args"
    version = with_model({"engine": {"image": "lmsysorg/sglang:v0.5.9"}, "workerGroups": [
        _G, _G | {"name": "b", "parallelism": {"tp": 8, "ep": 8, "moeA2ABackend": "deepep_v2"}}]})  # fmt: skip
    [error] = parse_spec(version)[1]
    assert error.field == "spec.workerGroups" and error.message.startswith("worker group 'b': is not accepted")


@pytest.mark.parametrize(("fragment", "failing", "passing"), FLEET_CASES, ids=[c[0] for c in FLEET_CASES])
def test_fleet_rules(fragment: str, failing: dict[str, Any], passing: dict[str, Any]) -> None:
    _, errors = parse_spec(with_model(failing), strict=True)
    assert len(errors) == 1 and fragment in errors[0].message, errors
    spec, errors = parse_spec(with_model(passing), strict=True)
    assert errors == [] and spec is not None


def test_a_group_error_names_the_group_and_its_field() -> None:
    raw = with_model({"workerGroups": [_G, {"name": "b", "replicas": 1, "parallelism": {"tp": 4, "ep": 3}}]})
    _, errors = parse_spec(raw)
    assert [e.field for e in errors] == ["spec.workerGroups[1].parallelism.ep"]


SEED = with_model({
    "engine": {"image": "lmsysorg/sglang:v0.5.23", "args": ["--chunked-prefill-size", "4096"]},
    "resources": {"gpusPerNode": 8, "cpu": "4"},
    "replicas": 2,
    "workerGroups": [
        {"name": "a", "replicas": 1, "parallelism": {"tp": 4}},
        {"name": "b", "parallelism": {"tp": 2}, "engine": {"maxRunningRequests": 64}},
    ],
})  # fmt: skip


def seed(**group_b: Any) -> SGLangDeploymentSpec:
    raw = {**SEED, "workerGroups": [SEED["workerGroups"][0], {**SEED["workerGroups"][1], **group_b}]}
    spec, errors = parse_spec(raw, strict=True)
    assert spec is not None, errors
    return spec


def test_group_fields_inherit_from_the_top_level_and_replace_it_where_given() -> None:
    spec = seed()
    a, b = worker_groups(spec)
    assert (a.name, a.spec.parallelism.tp, a.spec.replicas, a.elastic) == ("a", 4, 1, False)
    assert (b.name, b.spec.parallelism.tp, b.spec.replicas, b.elastic) == ("b", 2, 2, True)
    assert b.spec.engine.args == ["--chunked-prefill-size", "4096"]  # inherited whole
    assert (a.spec.engine.max_running_requests, b.spec.engine.max_running_requests) == (None, 64)
    assert a.spec.resources.cpu == b.spec.resources.cpu == "4"
    own = group_spec(spec, spec.worker_groups[1].model_copy(update={"engine": None}))
    assert own.engine == spec.engine


def test_a_spec_without_groups_is_its_own_single_group() -> None:
    spec, _ = parse_spec(with_model({"replicas": 3}))
    assert spec is not None
    [group] = worker_groups(spec)
    assert group.name == "" and group.spec is spec


def test_pods_carry_their_group_and_shape() -> None:
    pods = render_all(seed(), Owner("chat", "team-a", "uid"))
    workers = [p for p in pods if p["kind"] == "Pod"]
    assert [p["metadata"]["labels"]["sglang.ai/group"] for p in workers] == ["a", "b", "b"]
    assert all(p["metadata"]["name"].startswith(f"chat-{p['metadata']['labels']['sglang.ai/group']}-")
               for p in workers)  # fmt: skip
    gpus = [p["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] for p in workers]
    assert gpus == ["4", "2", "2"]
    tp = [p["spec"]["containers"][0]["command"] for p in workers]
    assert [c[c.index("--tp-size") + 1] for c in tp] == ["4", "2", "2"]


def test_a_change_to_one_group_changes_only_its_revision() -> None:
    before, after = worker_groups(seed()), worker_groups(seed(engine={"maxRunningRequests": 32}))
    assert revision_hash(before[0].spec) == revision_hash(after[0].spec)
    assert revision_hash(before[1].spec) != revision_hash(after[1].spec)


def test_the_implicit_group_keeps_its_names_and_revision() -> None:
    spec, _ = parse_spec(with_model({"replicas": 1}))
    assert spec is not None
    [pod] = [p for p in render_all(spec, Owner("chat", "ns", "u")) if p["kind"] == "Pod"]
    assert pod["metadata"]["name"] == f"chat-{revision_hash(spec)}-0-0"
    assert "sglang.ai/group" not in pod["metadata"]["labels"]


# -- whole passes --------------------------------------------------------------------------------------------------

NS, NAME = "team-a", "chat"


def fleet(spec: dict[str, Any]) -> tuple[Reconciler, FakeKube]:
    fake = FakeKube()
    fake.put({"apiVersion": "sglang.ai/v1alpha1", "kind": "SGLangDeployment",
              "metadata": {"name": NAME, "namespace": NS, "uid": "cr-uid", "generation": 1}, "spec": spec})  # fmt: skip
    reconciler = Reconciler(client.ApiClient(), OperatorSettings())
    wire(reconciler, fake)
    return reconciler, fake


def worker_pods(fake: FakeKube) -> dict[str, dict[str, Any]]:
    return {name: obj for (kind, name), obj in fake.objects.items() if kind == "Pod"}


def test_each_group_gets_its_replicas_and_status_counts_them() -> None:
    reconciler, fake = fleet({**SEED, "router": {"enabled": False}})
    reconciler.reconcile(NS, NAME)
    by_group: dict[str, int] = {}
    for pod in worker_pods(fake).values():
        by_group[pod["metadata"]["labels"]["sglang.ai/group"]] = (
            by_group.get(pod["metadata"]["labels"]["sglang.ai/group"], 0) + 1
        )
    assert by_group == {"a": 1, "b": 2}
    reconciler.reconcile(NS, NAME)
    status = fake.objects[("SGLangDeployment", NAME)]["status"]
    assert [(g["name"], g["desiredReplicas"], g["replicas"], g["gpusPerReplica"]) for g in status["groups"]] == [
        ("a", 1, 1, 4),
        ("b", 2, 2, 2),
    ]
    assert status["totalGPUs"] == 8 and status["ready"] == "0/3"
    assert status["replicas"] == 2  # what /scale sizes: group b follows spec.replicas
    assert status["selector"].endswith(",sglang.ai/group=b")


def test_changing_one_group_rolls_that_group_only() -> None:
    reconciler, fake = fleet({**SEED, "router": {"enabled": False}})
    reconciler.reconcile(NS, NAME)
    group_a = {n: p["metadata"]["uid"] for n, p in worker_pods(fake).items() if "-a-" in n}
    cr = fake.objects[("SGLangDeployment", NAME)]
    writes_before = len(fake.writes("Pod"))
    cr["spec"] = {
        **SEED,
        "router": {"enabled": False},
        "workerGroups": [SEED["workerGroups"][0], {**SEED["workerGroups"][1], "engine": {"maxRunningRequests": 32}}],
    }
    cr["metadata"]["generation"] += 1
    for _ in range(4):
        reconciler.reconcile(NS, NAME)
    now = worker_pods(fake)
    assert {n: p["metadata"]["uid"] for n, p in now.items() if "-a-" in n} == group_a
    new_b = revision_hash(worker_groups(seed(engine={"maxRunningRequests": 32}))[1].spec)
    group_b = [p["metadata"] for n, p in now.items() if "-b-" in n]
    assert sum(m["labels"]["sglang.ai/revision"] == new_b for m in group_b) == 2
    assert all("sglang.ai/draining-since" in (m.get("annotations") or {}) for m in group_b
               if m["labels"]["sglang.ai/revision"] != new_b)  # fmt: skip
    touched = {c.name for c in fake.writes("Pod")[writes_before:]}
    assert not touched & set(group_a)


def test_removing_the_groups_retires_their_pods() -> None:
    reconciler, fake = fleet({**SEED, "router": {"enabled": False}})
    reconciler.reconcile(NS, NAME)
    cr = fake.objects[("SGLangDeployment", NAME)]
    cr["spec"] = {**SEED, "router": {"enabled": False}, "workerGroups": []}
    cr["metadata"]["generation"] += 1
    for _ in range(4):
        reconciler.reconcile(NS, NAME)
    metas = [p["metadata"] for p in worker_pods(fake).values()]
    assert len([m for m in metas if "sglang.ai/group" not in m["labels"]]) == 2
    assert all("sglang.ai/draining-since" in m["annotations"] for m in metas if "sglang.ai/group" in m["labels"])
    assert "groups" not in cr["status"] or cr["status"]["groups"] == []


# -- a group's own scale target (SGLangWorkerGroup) ------------------------------------------------------------------


def scale_target(name: str, group: str, replicas: Any, created: str = "2026-12-01T00:00:00Z") -> dict[str, Any]:
    return {"apiVersion": "sglang.ai/v1alpha1", "kind": "SGLangWorkerGroup",
            "metadata": {"name": name, "namespace": NS, "generation": 1, "creationTimestamp": created},
            "spec": {"deployment": NAME, "group": group, "replicas": replicas}}  # fmt: skip


def test_one_scale_target_per_group_is_in_effect() -> None:
    targets = [scale_target("late", "a", 5, "2026-12-02T00:00:00Z"), scale_target("first", "a", 3),
               scale_target("nope", "z", 1), scale_target("odd", "b", "2")]  # fmt: skip
    counts, verdicts = scale_target_counts(seed(), NAME, targets)
    assert counts == {"a": 3}
    assert [(v.name, v.in_effect) for v in verdicts] == [
        ("first", True),
        ("nope", False),
        ("odd", False),
        ("late", False),
    ]
    assert "already sizes group a" in verdicts[3].message and "no worker group 'z'" in verdicts[1].message
    owned = seed().model_copy(update={"autoscaling": seed().autoscaling.model_copy(update={"enabled": True})})
    counts, verdicts = scale_target_counts(owned, NAME, targets)
    assert counts == {} and all("built-in autoscaler" in v.message for v in verdicts)


def test_a_scale_target_sizes_its_group_and_reads_back_the_count() -> None:
    reconciler, fake = fleet({**SEED, "router": {"enabled": False}})
    fake.put(scale_target("a-scaler", "a", 2))
    reconciler.reconcile(NS, NAME)
    reconciler.reconcile(NS, NAME)
    groups = [p["metadata"]["labels"]["sglang.ai/group"] for p in worker_pods(fake).values()]
    assert sorted(groups) == ["a", "a", "b", "b"]
    status = fake.objects[("SGLangWorkerGroup", "a-scaler")]["status"]
    assert status == {"replicas": 2, "selector": "sglang.ai/deployment=chat,sglang.ai/component=worker,"
                      "sglang.ai/group=a", "observedGeneration": 1, "inEffect": True,
                      "message": "sizes group a of chat"}  # fmt: skip
    writes = len(fake.writes())
    reconciler.reconcile(NS, NAME)
    assert len(fake.writes()) == writes  # nothing changed: no status write


def test_many_scale_targets_cost_a_bounded_number_of_writes_per_pass() -> None:
    reconciler, fake = fleet({**SEED, "router": {"enabled": False}})
    for i in range(STATUS_WRITES_PER_PASS + 8):
        fake.put(scale_target(f"t{i:03d}", "a", 1))
    reconciler.reconcile(NS, NAME)
    assert len([c for c in fake.calls if c.kind == "SGLangWorkerGroup" and c.verb == "patch_status"]) == (
        STATUS_WRITES_PER_PASS
    )
    reconciler.reconcile(NS, NAME)
    written = {n for (k, n), obj in fake.objects.items() if k == "SGLangWorkerGroup" and obj.get("status")}
    assert len(written) == STATUS_WRITES_PER_PASS + 8  # the rest on the next pass
