"""Generate the CRD from the typed models: structural schema, defaults, enums, CEL rules, subresources, columns.

`python -m sglang_operator.api.crdgen --write` rewrites `crds/` and the chart's copy; a test fails when either
differs from what this module produces, so the models stay the one source of the schema.
"""

import argparse
import copy
import types
import typing
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import yaml
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from .constants import CRD_NAME, GROUP, KIND, LIST_KIND, PLURAL, SHORT_NAMES, SINGULAR, VERSION
from .disaggregation_rules import TRANSITION_RULES
from .groups import GroupRule
from .rule import Rule
from .scaletarget import (
    SCALE_KIND,
    SCALE_LIST_KIND,
    SCALE_PLURAL,
    SCALE_SHORT_NAMES,
    SCALE_SINGULAR,
    WorkerGroupScaleSpec,
    WorkerGroupScaleStatus,
)
from .spec import SGLangDeploymentSpec
from .status import SGLangDeploymentStatus
from .validation import NAME_RULE, RULES

CRD_FILE = f"{GROUP}_{PLURAL}.yaml"
REPO_ROOT = Path(__file__).resolve().parents[3]
CRD_PATHS = (REPO_ROOT / "crds" / CRD_FILE, REPO_ROOT / "charts" / "sglang-operator" / "crds" / CRD_FILE)

PRINTER_COLUMNS = [
    {"name": "Ready", "type": "string", "jsonPath": ".status.ready", "description": "Ready/desired replicas"},
    {"name": "Shape", "type": "string", "jsonPath": ".status.shape",
     "description": "Each replica's parallelism; per worker group (and role) in a fleet of groups"},
    {"name": "GPUs", "type": "integer", "jsonPath": ".status.totalGPUs"},
    {"name": "Router", "type": "integer", "jsonPath": ".status.registeredWorkers",
     "description": "Workers registered on the router"},
    {"name": "QPS", "type": "string", "jsonPath": ".status.qps"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]  # fmt: skip


def _strip_optional(annotation: Any) -> Any:
    if get_origin(annotation) in (Union, types.UnionType):
        members = [arg for arg in get_args(annotation) if arg is not type(None)]
        if len(members) == 1:
            return members[0]
    return annotation


def _type_schema(annotation: Any) -> dict[str, Any]:
    annotation = _strip_optional(annotation)
    origin = get_origin(annotation)
    if origin is Annotated:  # a constrained item or value type, e.g. list[Annotated[str, Field(max_length=...)]]
        base, *metadata = get_args(annotation)
        schema = _type_schema(base)
        for meta in metadata:
            _constrain(schema, getattr(meta, "metadata", [meta]))
        return schema
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return model_schema(annotation)
    if origin is Literal:
        return {"type": "string", "enum": list(get_args(annotation))}
    if origin is list:
        return {"type": "array", "items": _type_schema(get_args(annotation)[0])}
    if origin is dict:
        value_type = get_args(annotation)[1]
        if value_type is Any:
            return {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        return {"type": "object", "additionalProperties": _type_schema(value_type)}
    if annotation is typing.Any:
        return {"x-kubernetes-preserve-unknown-fields": True}
    scalar = {str: "string", bool: "boolean", int: "integer", float: "number"}
    if annotation in scalar:
        return {"type": scalar[annotation]}
    raise TypeError(f"no CRD schema for {annotation!r}")


def _constrain(schema: dict[str, Any], metadata: list[Any]) -> None:
    """pydantic's constraints as OpenAPI keywords. Every string, list and map is bounded: that bounds what one CR
    may ask of the operator, and what a CEL rule may iterate (the API server refuses unbounded rule costs)."""
    for meta in metadata:
        if (min_length := getattr(meta, "min_length", None)) is not None:
            schema["minLength"] = min_length
        if (pattern := getattr(meta, "pattern", None)) is not None:
            schema["pattern"] = pattern
        if (max_length := getattr(meta, "max_length", None)) is not None:
            keyword = {"object": "maxProperties", "array": "maxItems"}.get(schema.get("type", ""), "maxLength")
            schema[keyword] = max_length
        if (minimum := getattr(meta, "ge", None)) is not None:
            schema["minimum"] = minimum
        if (maximum := getattr(meta, "le", None)) is not None:
            schema["maximum"] = maximum


def _field_schema(field: FieldInfo) -> dict[str, Any]:
    schema = _type_schema(field.annotation)
    _constrain(schema, field.metadata)
    if isinstance(field.json_schema_extra, dict):  # Kubernetes' own keywords (list types) pass through
        schema |= {k: copy.deepcopy(v) for k, v in field.json_schema_extra.items() if k.startswith("x-kubernetes-")}
    if field.description:
        schema["description"] = field.description
    if not field.is_required():
        default = field.get_default(call_default_factory=True)
        if isinstance(default, BaseModel):
            schema["default"] = {}  # the API server then applies the nested defaults
        elif (isinstance(default, list) and default) or (default is not None and not isinstance(default, list | dict)):
            schema["default"] = default
    return schema


def model_schema(model: type[BaseModel]) -> dict[str, Any]:
    properties: dict[str, Any] = {}
    required: list[str] = []
    for name, field in model.model_fields.items():
        key = field.alias or name
        properties[key] = _field_schema(field)
        if field.is_required():
            required.append(key)
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if model.__doc__ and model.__doc__.strip() and model.__doc__ is not BaseModel.__doc__:
        schema["description"] = " ".join(model.__doc__.split())
    if required:
        schema["required"] = required
    return schema


def validations(rule: Rule) -> list[dict[str, str]]:
    """A rule's `x-kubernetes-validations` entries: one, or a worker-group rule's own (`GroupRule.validations`)."""
    if isinstance(rule, GroupRule):
        return rule.validations()
    return [{"rule": rule.cel, "message": rule.message, "fieldPath": rule.field_path}]


def spec_schema() -> dict[str, Any]:
    """The spec's schema with every rule: on the spec, or on the `workerGroups` items for the rules a group can be
    checked by alone (the API server then puts the item's index in the field it names)."""
    schema = model_schema(SGLangDeploymentSpec)
    schema["description"] = "Desired state of a fleet of SGLang server replicas behind an smg router."
    on_item = [rule for rule in RULES if isinstance(rule, GroupRule) and rule.on_item]
    schema["x-kubernetes-validations"] = [v for rule in RULES if rule not in on_item for v in validations(rule)] + [
        {"rule": rule.cel, "message": rule.message, "fieldPath": rule.field_path} for rule in TRANSITION_RULES
    ]
    schema["properties"]["workerGroups"]["items"]["x-kubernetes-validations"] = [
        v for rule in on_item for v in validations(rule)
    ]
    _drop_copied_descriptions(schema)
    return schema


_GROUP_OWN_FIELDS = frozenset({"name", "role", "replicas"})
"""The fields of a worker group that are its own; the rest repeat a top-level field's schema."""


def _drop_copied_descriptions(spec: dict[str, Any]) -> None:
    """Drop the descriptions of the embedded pod template (Kubernetes' own fields, documented by `kubectl explain
    pod.spec`) and of a worker group's copies of top-level fields (`kubectl explain sgld.spec.engine` documents
    them once). Client-side apply stores the whole CRD in one annotation, so the CRD keeps each text once
    (docs/decisions.md, "The CRD's size")."""
    spec["properties"]["template"] = _without_descriptions(spec["properties"]["template"])
    item = spec["properties"]["workerGroups"]["items"]["properties"]
    for name in item.keys() - _GROUP_OWN_FIELDS:
        item[name] = _without_descriptions(item[name])


def _without_descriptions(schema: Any) -> Any:
    if isinstance(schema, dict):
        # a property named "description" is a schema (a dict), a description a string
        return {k: _without_descriptions(v) for k, v in schema.items() if k != "description" or not isinstance(v, str)}
    if isinstance(schema, list):
        return [_without_descriptions(v) for v in schema]
    return schema


def build_crd() -> dict[str, Any]:
    status = model_schema(SGLangDeploymentStatus)
    status["description"] = "Observed state, written by the operator only."
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD_NAME, "labels": {"app.kubernetes.io/part-of": "sglang-operator"}},
        "spec": {
            "group": GROUP,
            "names": {
                "kind": KIND,
                "listKind": LIST_KIND,
                "plural": PLURAL,
                "singular": SINGULAR,
                "shortNames": list(SHORT_NAMES),
                "categories": ["sglang"],
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {
                        "status": {},
                        "scale": {
                            "specReplicasPath": ".spec.replicas",
                            "statusReplicasPath": ".status.replicas",
                            "labelSelectorPath": ".status.selector",
                        },
                    },
                    "additionalPrinterColumns": PRINTER_COLUMNS,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "required": ["spec"],
                            "x-kubernetes-validations": [{"rule": NAME_RULE.cel, "message": NAME_RULE.message}],
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": spec_schema(),
                                "status": status,
                            },
                        }
                    },
                }
            ],
        },
    }


SCALE_CRD_FILE = f"{GROUP}_{SCALE_PLURAL}.yaml"
SCALE_CRD_PATHS = tuple(path.with_name(SCALE_CRD_FILE) for path in CRD_PATHS)


def build_scale_crd() -> dict[str, Any]:
    """The CRD of `SGLangWorkerGroup`, a worker group's scale target (`scaletarget`)."""
    spec = model_schema(WorkerGroupScaleSpec)
    spec["description"] = "Which worker group of which SGLangDeployment this object sizes, and to how many replicas."
    status = model_schema(WorkerGroupScaleStatus)
    status["description"] = "Observed state, written by the operator only."
    columns = [
        {"name": "Deployment", "type": "string", "jsonPath": ".spec.deployment"},
        {"name": "Group", "type": "string", "jsonPath": ".spec.group"},
        {"name": "Desired", "type": "integer", "jsonPath": ".spec.replicas"},
        {"name": "Replicas", "type": "integer", "jsonPath": ".status.replicas"},
        {"name": "In-Effect", "type": "boolean", "jsonPath": ".status.inEffect"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{SCALE_PLURAL}.{GROUP}", "labels": {"app.kubernetes.io/part-of": "sglang-operator"}},
        "spec": {
            "group": GROUP,
            "names": {"kind": SCALE_KIND, "listKind": SCALE_LIST_KIND, "plural": SCALE_PLURAL,
                      "singular": SCALE_SINGULAR, "shortNames": list(SCALE_SHORT_NAMES), "categories": ["sglang"]},
            "scope": "Namespaced",
            "versions": [{
                "name": VERSION, "served": True, "storage": True,
                "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.replicas",
                                                          "statusReplicasPath": ".status.replicas",
                                                          "labelSelectorPath": ".status.selector"}},
                "additionalPrinterColumns": columns,
                "schema": {"openAPIV3Schema": {
                    "type": "object", "required": ["spec"],
                    "properties": {"apiVersion": {"type": "string"}, "kind": {"type": "string"},
                                   "metadata": {"type": "object"}, "spec": spec, "status": status},
                }},
            }],
        },
    }  # fmt: skip


def render_crd_yaml(crd: dict[str, Any] | None = None) -> str:
    header = "# Generated by `python -m sglang_operator.api.crdgen --write` from the typed API. Do not edit.\n"
    return header + yaml.safe_dump(build_crd() if crd is None else crd, sort_keys=False, width=120)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write", action="store_true", help="write the CRD files instead of printing")
    args = parser.parse_args(argv)
    texts = {CRD_PATHS: render_crd_yaml(), SCALE_CRD_PATHS: render_crd_yaml(build_scale_crd())}
    if not args.write:
        print("---\n".join(texts.values()), end="")
        return 0
    for paths, text in texts.items():
        for path in paths:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            print(f"wrote {path.relative_to(REPO_ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
