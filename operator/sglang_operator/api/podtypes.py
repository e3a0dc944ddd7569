"""Typed subsets of Kubernetes pod types for `spec.template`: scheduling (affinity, spread) and volume sources.

Free-form maps here would let a CR carry content the API server refuses in a pod (`nodeAffinity: everywhere`), so
that every pass fails to create pods; typed, such a CR is refused at `kubectl apply` and by `validate`. The fields
are Kubernetes' own (names, shapes); only what a tenant needs for placement and for mounting its own Secrets and
ConfigMaps is here.
"""

from typing import Annotated, Literal

from pydantic import Field

from .base import SpecModel

DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
QUANTITY = r"^[+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+|[numkMGTPE]|[KMGTPE]i)?$"
RELATIVE_PATH = r"^[^/\x00-\x1f\x7f]([^\x00-\x1f\x7f]*)?$"

ObjectName = Annotated[str, Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN)]
Quantity = Annotated[str, Field(min_length=1, max_length=64, pattern=QUANTITY)]
Short = Annotated[str, Field(max_length=316)]
FileMode = Annotated[int, Field(ge=0, le=511)]


class Requirement(SpecModel):
    """A label or node-field selector requirement."""

    key: Short = Field(min_length=1)
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
    values: list[Annotated[str, Field(max_length=63)]] | None = Field(default=None, max_length=64)


class LabelSelector(SpecModel):
    match_labels: dict[str, Annotated[str, Field(max_length=63)]] | None = Field(default=None, max_length=32)
    match_expressions: list[Requirement] | None = Field(default=None, max_length=16)


class NodeSelectorTerm(SpecModel):
    match_expressions: list[Requirement] | None = Field(default=None, max_length=16)
    match_fields: list[Requirement] | None = Field(default=None, max_length=16)


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
    key: str = Field(min_length=1, max_length=253)
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
    field_path: str = Field(min_length=1, max_length=256)
    api_version: str | None = Field(default=None, max_length=64)


class DownwardAPIFile(SpecModel):
    path: str = Field(min_length=1, max_length=512, pattern=RELATIVE_PATH)
    field_ref: FieldPath | None = None
    mode: FileMode | None = None


class DownwardAPIVolumeSource(SpecModel):
    items: list[DownwardAPIFile] | None = Field(default=None, max_length=32)
    default_mode: FileMode | None = None


class ProjectedItems(SpecModel):
    """A Secret or ConfigMap projected into a volume (no service-account token source exists here)."""

    name: ObjectName
    items: list[KeyToPath] | None = Field(default=None, max_length=64)
    optional: bool | None = None


class ProjectedDownwardAPI(SpecModel):
    items: list[DownwardAPIFile] | None = Field(default=None, max_length=32)
