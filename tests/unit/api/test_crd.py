"""The committed CRD, the chart's copy and the generator must agree; the CRD carries every rule as CEL."""

import json

from sglang_operator.api.crdgen import CRD_PATHS, SCALE_CRD_PATHS, build_crd, build_scale_crd, render_crd_yaml
from sglang_operator.api.disaggregation_rules import TRANSITION_RULES
from sglang_operator.api.groups import GroupRule
from sglang_operator.api.validation import RULES


def test_committed_crds_match_the_generator() -> None:
    expected = render_crd_yaml()
    for path in CRD_PATHS:
        assert path.read_text() == expected, f"{path} is stale: run `make crds`"
    for path in SCALE_CRD_PATHS:
        assert path.read_text() == render_crd_yaml(build_scale_crd()), f"{path} is stale: run `make crds`"


def test_the_worker_group_scale_target_has_a_scale_subresource() -> None:
    version = build_scale_crd()["spec"]["versions"][0]
    assert version["subresources"]["scale"]["specReplicasPath"] == ".spec.replicas"
    replicas = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["replicas"]
    assert (replicas["minimum"], replicas["maximum"]) == (0, 512)


def test_crd_has_subresources_columns_and_short_name() -> None:
    version = build_crd()["spec"]["versions"][0]
    assert version["subresources"]["scale"] == {
        "specReplicasPath": ".spec.replicas",
        "statusReplicasPath": ".status.replicas",
        "labelSelectorPath": ".status.selector",
    }
    assert [c["name"] for c in version["additionalPrinterColumns"]] == [
        "Ready", "Shape", "GPUs", "Router", "QPS", "Age"
    ]  # fmt: skip
    assert build_crd()["spec"]["names"]["shortNames"] == ["sgld"]


def test_every_rule_is_a_cel_validation_with_the_same_message() -> None:
    """On the spec, or on the workerGroups items for a rule a group can be checked by alone (its fieldPath then
    relative to the item, whose index the API server adds); a worker-group rule over the groups once, its
    messageExpression naming the first group that fails."""
    spec = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    on_spec, on_item = (
        spec["x-kubernetes-validations"],
        spec["properties"]["workerGroups"]["items"]["x-kubernetes-validations"],
    )
    expected_item = [r for r in RULES if isinstance(r, GroupRule) and r.on_item]
    assert [(v["rule"], v["message"], v["fieldPath"]) for v in on_item] == [
        (r.cel, r.message, r.field_path) for r in expected_item
    ]
    expected = []
    for rule in RULES:
        if not isinstance(rule, GroupRule):
            expected.append((rule.cel, rule.message, rule.field_path))
        elif not rule.on_item:
            assert rule.base is not None
            [entry] = rule.validations()
            expected.append((rule.cel, rule.message, ".workerGroups"))
            assert entry["messageExpression"].startswith('"worker group \'" + self.workerGroups.map(wg, (')
            assert entry["messageExpression"].endswith(
                f") ? '' : wg.name).filter(n, n != '')[0] + \"': \" + {json.dumps(rule.base.message)}"
            )
    expected += [(rule.cel, rule.message, rule.field_path) for rule in TRANSITION_RULES]  # on update only (oldSelf)
    assert [(v["rule"], v["message"], v["fieldPath"]) for v in on_spec] == expected


def test_schema_defaults_make_the_smallest_spec_complete() -> None:
    spec = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert spec["required"] == ["model"]
    props = spec["properties"]
    assert props["parallelism"]["default"] == {}
    assert props["parallelism"]["properties"]["tp"]["default"] == 1
    assert props["replicas"]["default"] == 1
    assert props["router"]["properties"]["policy"]["enum"][0] == "cache_aware"
    template = props["template"]["properties"]["spec"]
    assert "x-kubernetes-preserve-unknown-fields" not in template  # typed: no pod field outside the allow-list
    assert "hostNetwork" not in template["properties"] and "serviceAccountName" not in template["properties"]
