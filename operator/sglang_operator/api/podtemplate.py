"""`spec.template`: what a tenant may add to the worker pods, as typed models, so that nothing else can be.

The operator creates pods with its own service account; a free-form pod spec in a CR would let whoever may create
an SGLangDeployment run privileged pods, mount node directories or borrow another service account. So the template
carries only placement (node selector, affinity, tolerations, spread, priority, scheduler, runtime class, image
pull secrets) and safe additions: volumes of non-host types, env from Secrets and ConfigMaps of the namespace, and
sidecar containers, which the renderer hardens like the main one. Any other field is unknown: `validate` and the
API server (strict field validation) refuse it, and at run time the operator never reads it. Admins widen this in
the operator's settings, never tenants in a CR.
"""

from typing import Annotated, Literal, get_args

from pydantic import Field

from .base import CONTROL, NO_NUL, NO_SPACE, SpecModel
from .podtypes import (
    CONTAINER_RESOURCE,
    DESCENDING_PATH,
    DNS_LABEL,
    DNS_SUBDOMAIN,
    ENV_FIELD_PATH,
    LABEL_VALUE,
    QUALIFIED_NAME,
    Affinity,
    ConfigKey,
    ConfigMapVolumeSource,
    DownwardAPIVolumeSource,
    EmptyDirVolumeSource,
    LabelValue,
    ObjectName,
    PersistentVolumeClaimVolumeSource,
    ProjectedDownwardAPI,
    ProjectedItems,
    Quantity,
    SecretVolumeSource,
    TopologySpreadConstraint,
)

ENV_NAME = r"^(\.[-_a-zA-Z0-9]|[-_a-zA-Z])[-._a-zA-Z0-9]*$"
"""A C identifier with '-' and '.': Kubernetes' `IsEnvVarName`, which also refuses '.', '..' and a leading '..'
(clusters before 1.32, or with relaxed env names off, refuse the pod otherwise)."""
ABSOLUTE_PATH = rf"^/[^{CONTROL}]*$"

VolumeName = Annotated[str, Field(min_length=1, max_length=63, pattern=DNS_LABEL)]
Text = Annotated[str, Field(max_length=4096, pattern=NO_NUL)]
"""A sidecar's command or argument: anything exec passes (`base.NO_NUL`)."""


class LocalObjectReference(SpecModel):
    name: ObjectName


class KeySelector(SpecModel):
    """A key of a Secret or ConfigMap in the CR's namespace (there is no namespace field: the pod's own only)."""

    name: ObjectName
    key: ConfigKey
    optional: bool | None = None


class ObjectFieldSelector(SpecModel):
    """A pod field an env var reads: only those the API server lets env read (`podtypes.ENV_FIELD_PATH`)."""

    field_path: str = Field(min_length=1, max_length=256, pattern=ENV_FIELD_PATH)
    api_version: Literal["v1"] | None = None


Divisor = Literal["1m", "1", "1k", "1M", "1G", "1T", "1P", "1E", "1Ki", "1Mi", "1Gi", "1Ti", "1Pi", "1Ei"]
"""The divisors a resourceFieldRef may give, as Kubernetes writes them (`validateContainerResourceDivisor` compares
the canonical form): 1m and 1 for cpu, every other for memory, ephemeral-storage and hugepages (`resource_rules`)."""
DIVISORS: tuple[str, ...] = get_args(Divisor)
CPU_DIVISORS = ("1m", "1")


class ResourceFieldSelector(SpecModel):
    resource: str = Field(min_length=1, max_length=253, pattern=CONTAINER_RESOURCE)
    container_name: str | None = Field(default=None, max_length=63)
    divisor: Divisor | None = None


class EnvVarSource(SpecModel):
    secret_key_ref: KeySelector | None = None
    config_map_key_ref: KeySelector | None = None
    field_ref: ObjectFieldSelector | None = None
    resource_field_ref: ResourceFieldSelector | None = None


class EnvVar(SpecModel):
    """A container env var: a literal value, or a value from a Secret, ConfigMap or the pod's own fields."""

    name: str = Field(min_length=1, max_length=253, pattern=ENV_NAME)
    # 4 KiB: every value of the main container's env is searched for `$(` at admission (tenant_rules), in each
    # worker group's template too, and the API server's CEL cost estimate counts the longest possible values (32 KiB
    # was 5x over its budget). Longer configuration belongs in a ConfigMap (valueFrom, envFrom or a volume).
    value: str | None = Field(
        default=None,
        max_length=4096,
        pattern=NO_NUL,
        description="No NUL: the runtime passes env to exec as C strings, so a NUL fails the container at every "
        "start; tabs, newlines and other control characters pass.",
    )
    value_from: EnvVarSource | None = None


class EnvSourceReference(SpecModel):
    """A whole Secret or ConfigMap of the CR's namespace: `envFrom` has no key (Kubernetes' SecretEnvSource and
    ConfigMapEnvSource), it sets one variable per key."""

    name: ObjectName
    optional: bool | None = None


class EnvFromSource(SpecModel):
    """Every key of one Secret or ConfigMap as env vars, as Kubernetes types it: exactly one of `configMapRef` and
    `secretRef` (`pod_rules`), an optional `prefix`. It cannot override what the operator sets: the operator's own
    variables are in `env`, which the kubelet applies after `envFrom`, so on a name both define `env` wins."""

    prefix: str | None = Field(default=None, max_length=253, pattern=ENV_NAME)
    config_map_ref: EnvSourceReference | None = None
    secret_ref: EnvSourceReference | None = None


class VolumeMount(SpecModel):
    """No `subPathExpr` (the kubelet expands it from the env: a path chosen at run time) and no mount propagation."""

    name: VolumeName
    mount_path: str = Field(min_length=1, max_length=256, pattern=ABSOLUTE_PATH)
    read_only: bool | None = None
    sub_path: str | None = Field(default=None, max_length=512, pattern=DESCENDING_PATH)


class ResourceRequirements(SpecModel):
    requests: dict[str, Quantity] = Field(default_factory=dict, max_length=16)
    limits: dict[str, Quantity] = Field(default_factory=dict, max_length=16)


class ContainerPort(SpecModel):
    """No hostPort: a pod binding node ports is not a GPU fleet's business."""

    name: str | None = Field(default=None, max_length=15, pattern=DNS_LABEL)
    container_port: int = Field(ge=1, le=65535)
    protocol: Literal["TCP", "UDP", "SCTP"] = "TCP"


class Container(SpecModel):
    """A sidecar (any name but `sglang`), or additions to the `sglang` container: only env, envFrom, volumeMounts
    and resources may be given for that one (its image and command come from the engine section)."""

    name: str = Field(min_length=1, max_length=63, pattern=DNS_LABEL)
    image: str | None = Field(default=None, max_length=512, pattern=NO_SPACE)
    command: list[Text] | None = Field(default=None, max_length=64)
    args: list[Text] | None = Field(default=None, max_length=64)
    working_dir: str | None = Field(default=None, max_length=512, pattern=ABSOLUTE_PATH)
    env: list[EnvVar] | None = Field(default=None, max_length=64)
    env_from: list[EnvFromSource] | None = Field(default=None, max_length=16)
    volume_mounts: list[VolumeMount] | None = Field(default=None, max_length=32)
    resources: ResourceRequirements | None = None
    ports: list[ContainerPort] | None = Field(default=None, max_length=16)


class ProjectedSource(SpecModel):
    """No serviceAccountToken source: a tenant's pod gets no token of the namespace's service accounts."""

    secret: ProjectedItems | None = None
    config_map: ProjectedItems | None = None
    downward_api: ProjectedDownwardAPI | None = Field(default=None, alias="downwardAPI")


class ProjectedVolume(SpecModel):
    sources: list[ProjectedSource] = Field(default_factory=list, max_length=16)
    default_mode: int | None = Field(default=None, ge=0, le=511)


class Volume(SpecModel):
    """A volume of a non-host type. hostPath, and every type that reaches the node or the network directly
    (nfs, iscsi, csi, flexVolume, ...) is absent on purpose, and so is `ephemeral`, which would create a
    PersistentVolumeClaim the tenant may not be allowed to create: a node directory for weights is `model.cache`, and
    only where the operator's settings allow its path."""

    name: VolumeName
    config_map: ConfigMapVolumeSource | None = None
    secret: SecretVolumeSource | None = None
    empty_dir: EmptyDirVolumeSource | None = None
    persistent_volume_claim: PersistentVolumeClaimVolumeSource | None = None
    downward_api: DownwardAPIVolumeSource | None = Field(default=None, alias="downwardAPI")
    projected: ProjectedVolume | None = None


class Toleration(SpecModel):
    """Kubernetes' toleration, in the forms pods accept (`placement_rules`: Exists takes no value, an empty key needs
    Exists, tolerationSeconds needs NoExecute). No Gt or Lt: they need a feature gate a cluster may not have."""

    key: str | None = Field(default=None, max_length=253, pattern=f"^({QUALIFIED_NAME})?$")
    operator: Literal["Exists", "Equal"] | None = None
    value: LabelValue | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = Field(default=None, ge=0, le=31536000)


class PodSpecOverrides(SpecModel):
    """Placement and safe additions merged into every worker pod: maps and scalars replace the rendered value,
    `containers`, `initContainers` and `volumes` merge by name."""

    node_selector: dict[str, LabelValue] | None = Field(default=None, max_length=64)
    affinity: Affinity | None = None
    tolerations: list[Toleration] | None = Field(default=None, max_length=64)
    topology_spread_constraints: list[TopologySpreadConstraint] | None = Field(default=None, max_length=16)
    priority_class_name: str | None = Field(default=None, max_length=253, pattern=DNS_SUBDOMAIN)
    scheduler_name: str | None = Field(default=None, max_length=253, pattern=DNS_SUBDOMAIN)
    runtime_class_name: str | None = Field(default=None, max_length=253, pattern=DNS_SUBDOMAIN)
    image_pull_secrets: list[LocalObjectReference] | None = Field(default=None, max_length=16)
    volumes: list[Volume] | None = Field(default=None, max_length=32)
    containers: list[Container] | None = Field(default=None, max_length=8)
    init_containers: list[Container] | None = Field(default=None, max_length=4)


LABEL_KEY = f"^{QUALIFIED_NAME}$"


class ObjectMetaOverrides(SpecModel):
    labels: dict[str, Annotated[str, Field(max_length=63, pattern=LABEL_VALUE)]] = Field(
        default_factory=dict, max_length=64
    )
    annotations: dict[str, Annotated[str, Field(max_length=8192)]] = Field(default_factory=dict, max_length=64)


class PodTemplateOverrides(SpecModel):
    """Merged into every worker pod: metadata maps are added (the operator's own keys win); see PodSpecOverrides."""

    metadata: ObjectMetaOverrides = Field(default_factory=ObjectMetaOverrides)
    spec: PodSpecOverrides = Field(default_factory=PodSpecOverrides)
