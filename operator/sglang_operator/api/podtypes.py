"""Typed subsets of Kubernetes pod types for `spec.template`: scheduling (affinity, spread) and volume sources.

Free-form maps here would let a CR carry content the API server refuses in a pod (`nodeAffinity: everywhere`), so
that every pass fails to create pods; typed, such a CR is refused at `kubectl apply` and by `validate`. The fields
are Kubernetes' own (names, shapes); only what a tenant needs for placement and for mounting its own Secrets and
ConfigMaps is here.
"""

from typing import Annotated, Literal, TypeVar

from pydantic import Field, field_validator
from pydantic.config import JsonDict

from .base import CONTROL, SpecModel

DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
QUANTITY = r"^[+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+|[numkMGTPE]|[KMGTPE]i)?$"
_CHAR = rf"[^/{CONTROL}]"  # a character of a path element
_LEAD = rf"[^./{CONTROL}]"  # one that is not a dot
_ELEMENT = rf"(\.|\.\.{_CHAR}+|\.?{_LEAD}{_CHAR}*)"  # a path element other than '..' (and not empty)
DESCENDING_PATH = rf"^{_ELEMENT}(/{_ELEMENT}?)*$"
"""A relative path without a `..` element: where a `subPath` may point (Kubernetes' `validateLocalDescendingPath`).
A negative rule written as a positive pattern (RE2, the API server's regex engine, has no lookahead) so that the
schema refuses it naming the exact field, at no CEL cost."""
RELATIVE_PATH = rf"^(\.|\.?{_LEAD}{_CHAR}*)(/{_ELEMENT}?)*$"
"""A file a volume projects (a Secret's, ConfigMap's or the downward API's item): a descending path that does not
start with `..` either (Kubernetes' `ValidateLocalNonReservedPath`: the kubelet keeps `..data` and its timestamped
directories beside the files)."""
CONFIG_KEY = r"^\.?[-_a-zA-Z0-9][-._a-zA-Z0-9]*$"
"""A key a Secret or ConfigMap can hold (apimachinery's `IsConfigMapKey`: letters, digits, '-', '_' and '.', never
'.', '..' nor starting with '..'): a reference to any other key names nothing and leaves the pod waiting."""
QUALIFIED_NAME = (
    r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
)
"""A label key: an optional DNS-subdomain prefix and a name (unanchored, to be embedded)."""
_SUBSCRIPTED = rf"metadata\.(labels|annotations)\['{QUALIFIED_NAME}'\]"
ENV_FIELD_PATH = (
    rf"^(metadata\.(name|namespace|uid)|spec\.(nodeName|serviceAccountName)|status\.(hostIPs?|podIPs?)|{_SUBSCRIPTED})$"
)
"""The pod fields an env var may read (Kubernetes' `validEnvDownwardAPIFieldPathExpressions`, and one label or
annotation by key). Any other path is refused when the pod is created: the fleet would never get a pod."""
VOLUME_FIELD_PATH = rf"^(metadata\.(name|namespace|uid|labels|annotations)|{_SUBSCRIPTED})$"
"""The pod fields a downward API volume may project (`validVolumeDownwardAPIFieldPathExpressions`)."""
CONTAINER_RESOURCE = r"^(limits|requests)\.(cpu|memory|ephemeral-storage|hugepages-[-._a-zA-Z0-9]*)$"
"""What a resourceFieldRef may read (`validContainerResourceFieldPathExpressions` and the hugepages prefixes)."""

LABEL_VALUE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$"
"""A label value (apimachinery's `IsValidLabelValue`): what a selector's values, a nodeSelector's values and an
`Equal` toleration's value must be, or the API server refuses the pod."""

ObjectName = Annotated[str, Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN)]
LabelValue = Annotated[str, Field(max_length=63, pattern=LABEL_VALUE)]
LabelName = Annotated[str, Field(min_length=1, max_length=253, pattern=f"^{QUALIFIED_NAME}$")]
"""A label key of a selector requirement or a toleration (`ValidateLabelName`). At most 253 characters in all, so
its prefix is a DNS subdomain of at most 253 characters whatever the pattern lets it hold."""
Quantity = Annotated[str, Field(min_length=1, max_length=64, pattern=QUANTITY)]
Short = Annotated[str, Field(max_length=316)]
FileMode = Annotated[int, Field(ge=0, le=511)]
ConfigKey = Annotated[str, Field(min_length=1, max_length=253, pattern=CONFIG_KEY)]


class Requirement(SpecModel):
    """A node selector requirement: a node label's key, values that are label values, and how many values its
    operator takes (`placement_rules`: some for In and NotIn, none for Exists and DoesNotExist, one for Gt and Lt)."""

    key: LabelName
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
    values: list[LabelValue] | None = Field(default=None, max_length=64)


class LabelRequirement(SpecModel):
    """A label selector requirement (pods, namespaces): no Gt or Lt, which only node selectors have."""

    key: LabelName
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[LabelValue] | None = Field(default=None, max_length=64)


class FieldRequirement(SpecModel):
    """A node field selector requirement: `metadata.name` is the one node field a pod may select on, with In or
    NotIn and exactly one node name (Kubernetes' `ValidateNodeFieldSelectorRequirement`)."""

    key: Literal["metadata.name"]
    operator: Literal["In", "NotIn"]
    values: list[ObjectName] = Field(min_length=1, max_length=1)


class LabelSelector(SpecModel):
    match_labels: dict[str, LabelValue] | None = Field(default=None, max_length=32)
    match_expressions: list[LabelRequirement] | None = Field(default=None, max_length=16)


class NodeSelectorTerm(SpecModel):
    match_expressions: list[Requirement] | None = Field(default=None, max_length=16)
    match_fields: list[FieldRequirement] | None = Field(default=None, max_length=16)


class NodeSelector(SpecModel):
    node_selector_terms: list[NodeSelectorTerm] = Field(max_length=16)


class PreferredSchedulingTerm(SpecModel):
    weight: int = Field(ge=1, le=100)
    preference: NodeSelectorTerm


class NodeAffinity(SpecModel):
    required_during_scheduling_ignored_during_execution: NodeSelector | None = None
    preferred_during_scheduling_ignored_during_execution: list[PreferredSchedulingTerm] | None = Field(
        default=None, max_length=16
    )


class PodAffinityTerm(SpecModel):
    label_selector: LabelSelector | None = None
    namespace_selector: LabelSelector | None = None
    namespaces: list[ObjectName] | None = Field(default=None, max_length=16)
    topology_key: Short = Field(min_length=1)
    match_label_keys: list[Short] | None = Field(default=None, max_length=16)
    mismatch_label_keys: list[Short] | None = Field(default=None, max_length=16)


class WeightedPodAffinityTerm(SpecModel):
    weight: int = Field(ge=1, le=100)
    pod_affinity_term: PodAffinityTerm


class PodAffinity(SpecModel):
    required_during_scheduling_ignored_during_execution: list[PodAffinityTerm] | None = Field(
        default=None, max_length=16
    )
    preferred_during_scheduling_ignored_during_execution: list[WeightedPodAffinityTerm] | None = Field(
        default=None, max_length=16
    )


class Affinity(SpecModel):
    node_affinity: NodeAffinity | None = None
    pod_affinity: PodAffinity | None = None
    pod_anti_affinity: PodAffinity | None = None


class TopologySpreadConstraint(SpecModel):
    max_skew: int = Field(ge=1, le=1024)
    topology_key: Short = Field(min_length=1)
    when_unsatisfiable: Literal["DoNotSchedule", "ScheduleAnyway"]
    label_selector: LabelSelector | None = None
    min_domains: int | None = Field(default=None, ge=1, le=1024)
    node_affinity_policy: Literal["Honor", "Ignore"] | None = None
    node_taints_policy: Literal["Honor", "Ignore"] | None = None
    match_label_keys: list[Short] | None = Field(default=None, max_length=16)


class KeyToPath(SpecModel):
    key: ConfigKey
    path: str = Field(min_length=1, max_length=512, pattern=RELATIVE_PATH)
    mode: FileMode | None = None


class ConfigMapVolumeSource(SpecModel):
    name: ObjectName
    items: list[KeyToPath] | None = Field(default=None, max_length=64)
    default_mode: FileMode | None = None
    optional: bool | None = None


class SecretVolumeSource(SpecModel):
    secret_name: ObjectName
    items: list[KeyToPath] | None = Field(default=None, max_length=64)
    default_mode: FileMode | None = None
    optional: bool | None = None


class EmptyDirVolumeSource(SpecModel):
    medium: Literal["", "Memory"] | None = None
    size_limit: Quantity | None = None


class PersistentVolumeClaimVolumeSource(SpecModel):
    claim_name: ObjectName
    read_only: bool | None = None


class FieldPath(SpecModel):
    """A pod field a downward API volume projects; only `v1` paths exist (the API server converts nothing else)."""

    field_path: str = Field(min_length=1, max_length=256, pattern=VOLUME_FIELD_PATH)
    api_version: Literal["v1"] | None = None


class DownwardAPIFile(SpecModel):
    """One projected file: its `fieldRef` is required, since a file with no source is refused with the pod."""

    path: str = Field(min_length=1, max_length=512, pattern=RELATIVE_PATH)
    field_ref: FieldPath
    mode: FileMode | None = None


class DownwardAPIVolumeSource(SpecModel):
    items: list[DownwardAPIFile] | None = Field(default=None, max_length=32)
    default_mode: FileMode | None = None


PATH_KEYED: JsonDict = {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["path"]}
"""A list of projected files in the CRD: the API server refuses a path twice in one list, at no CEL cost."""


_Projected = TypeVar("_Projected", KeyToPath, DownwardAPIFile)


def unique_paths(items: list[_Projected] | None) -> list[_Projected] | None:
    """`PATH_KEYED`'s twin: a projected volume's files are one directory, and the API server refuses the pod whose
    projected sources give a path twice ("conflicting duplicate paths")."""
    paths = [item.path for item in items or []]
    duplicate = next((path for index, path in enumerate(paths) if path in paths[:index]), None)
    if duplicate is not None:
        raise ValueError(f"Duplicate value: path {duplicate!r} twice: a projected volume refuses a path given twice.")
    return items


class ProjectedItems(SpecModel):
    """A Secret or ConfigMap projected into a volume (no service-account token source exists here)."""

    name: ObjectName
    items: list[KeyToPath] | None = Field(default=None, max_length=64, json_schema_extra=PATH_KEYED)
    optional: bool | None = None

    @field_validator("items")
    @classmethod
    def _unique_paths(cls, items: list[KeyToPath] | None) -> list[KeyToPath] | None:
        return unique_paths(items)


class ProjectedDownwardAPI(SpecModel):
    items: list[DownwardAPIFile] | None = Field(default=None, max_length=32, json_schema_extra=PATH_KEYED)

    @field_validator("items")
    @classmethod
    def _unique_paths(cls, items: list[DownwardAPIFile] | None) -> list[DownwardAPIFile] | None:
        return unique_paths(items)
