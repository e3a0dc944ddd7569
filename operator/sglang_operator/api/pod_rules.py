"""Rules that keep every worker pod a CR renders acceptable to the API server, and sidecars off the accelerators.

A spec the CRD accepts but whose pods the API server refuses leaves a fleet with no pod and a status that can only
repeat the API server's 422. Kubernetes' pod validation (`pkg/apis/core/validation`) is the reference: what the
typed template can say as a pattern is in `podtypes`/`podtemplate` (paths without `..`, Secret keys, the fieldRef
paths pods have, env names); what needs two fields at once is here, each a `Rule` with its CEL twin, so `validate`
and the API server refuse the spec when it is written, naming the field, instead of the pod at every pass.

Sidecars and init containers may request only cpu, memory and ephemeral-storage, the template's `sglang` entry
these and hugepages-*. The GPU budget (`maxGPUs`) counts the GPUs parallelism gives the main container, of
`resources.gpuResourceName`; a container asking for any other extended resource (`nvidia.com/mig-1g.10gb` on a fleet
of `nvidia.com/gpu`, `amd.com/gpu`, `google.com/tpu`, ...) would take accelerators outside that budget. Which
extended resources a cluster treats as accelerators is known to its device plugins, not to the operator, so the
template names none: the worker's GPUs follow from parallelism, its RDMA device from the operator's settings
(`--rdma-resource`, one per prefill/decode pod), and a helper process needs no device. (The fleet's own GPU resource
is refused by name in `tenant_rules` as well for init containers, which then get both errors.)

A path given twice by one projected source's items is refused by the schema (a list keyed by path, `podtypes`); the
same path from two sources of one volume is not refused at admission: every pairwise CEL check over 32 volumes of 16
sources of up to 160 items each is estimated far above the API server's per-rule cost limit, and the list functions
that would make it linear (`distinct`, `flatten`) need Kubernetes 1.34's CEL while the chart supports 1.30.

Each rule reads as few fields as it can (the template alone where possible): a worker group's template replaces the
fleet's, so every rule is checked once more per group, and the API server bounds the estimated cost of each.
"""

from .limits import TEMPLATE_ANNOTATION_BYTES
from .podtemplate import Container, EnvVar, ProjectedSource
from .reserved import MAIN_CONTAINER
from .rule import Rule
from .spec import SGLangDeploymentSpec

SHARED_MEMORY_PATH = "/dev/shm"
"""Where every worker pod mounts its shared memory (`render.workers`); the model cache is at model.cache.mountPath."""
SIDECAR_RESOURCES = ("cpu", "memory", "ephemeral-storage")
HUGEPAGES = "hugepages-"
"""The prefix of the hugepages resources, which the main container may request beside `SIDECAR_RESOURCES`."""

TEMPLATE_CEL = "self.template.spec"
CONTAINERS_CEL = f"{TEMPLATE_CEL}.containers"
INIT_CONTAINERS_CEL = f"{TEMPLATE_CEL}.initContainers"
_T, _C, _I = TEMPLATE_CEL, CONTAINERS_CEL, INIT_CONTAINERS_CEL
_META = "self.template.metadata"
_SIDECAR_RESOURCES_CEL = "[" + ", ".join(f"'{name}'" for name in SIDECAR_RESOURCES) + "]"


def template_containers(spec: SGLangDeploymentSpec) -> list[Container]:
    return list(spec.template.spec.containers or [])


def template_init_containers(spec: SGLangDeploymentSpec) -> list[Container]:
    return list(spec.template.spec.init_containers or [])


def _unique_mount_paths(container: Container) -> bool:
    paths = [mount.mount_path for mount in container.volume_mounts or []]
    return len(set(paths)) == len(paths)


def _unique_mount_paths_cel(container: str) -> str:
    return (
        f"(!has({container}.volumeMounts) || {container}.volumeMounts.all(m, "
        f"{container}.volumeMounts.exists_one(n, n.mountPath == m.mountPath)))"
    )


def _operator_paths(spec: SGLangDeploymentSpec) -> set[str]:
    return {SHARED_MEMORY_PATH, spec.model.cache.mount_path}


def _main_mounts_clear(spec: SGLangDeploymentSpec) -> bool:
    taken = _operator_paths(spec)
    return all(
        mount.mount_path not in taken
        for container in template_containers(spec)
        if container.name == MAIN_CONTAINER
        for mount in container.volume_mounts or []
    )


def main_resource(name: str) -> bool:
    """A resource the template's `sglang` entry may request: cpu, memory, ephemeral-storage, hugepages-*. Its GPUs
    and its RDMA device are the operator's to set (`render.overrides` keeps them whatever a stored CR says)."""
    return name in SIDECAR_RESOURCES or name.startswith(HUGEPAGES)


def _resources_only(container: Container, main: bool = False) -> bool:
    """The container's requests and limits name only what it may request: `SIDECAR_RESOURCES`, and with `main`
    hugepages-* too where it is the `sglang` entry (`_resources_cel`)."""
    if container.resources is None:
        return True
    names = {*container.resources.requests, *container.resources.limits}
    if main and container.name == MAIN_CONTAINER:
        return all(main_resource(name) for name in names)
    return names <= set(SIDECAR_RESOURCES)


def _resources_cel(container: str, main: bool = False) -> str:
    """`_resources_only`'s twin. The container's name is compared once, outside the loops over its resources: the
    API server's cost estimate of a loop that reads the outer loop's variable is over its limit a hundredfold."""

    def names(allowed: str) -> str:
        resources = f"{container}.resources"
        return (
            f"(!has({resources}.requests) || {resources}.requests.all(r, {allowed})) && "
            f"(!has({resources}.limits) || {resources}.limits.all(r, {allowed}))"
        )

    sidecar = f"r in {_SIDECAR_RESOURCES_CEL}"
    if not main:
        return f"(!has({container}.resources) || ({names(sidecar)}))"
    is_main, main_names = f"{container}.name == '{MAIN_CONTAINER}'", names(f"{sidecar} || r.startsWith('{HUGEPAGES}')")
    return f"(!has({container}.resources) || ({is_main} ? ({main_names}) : ({names(sidecar)})))"


def _one_env_source(var: EnvVar) -> bool:
    source = var.value_from
    if source is None:
        return True
    count = sum(ref is not None for _, ref in source)
    return count == 1 and not var.value


_UNIQUE_MOUNTS = (
    "volumeMounts must not use a mountPath twice in one container: the API server refuses the pod otherwise."
)
_ENV_SOURCES = ("secretKeyRef", "configMapKeyRef", "fieldRef", "resourceFieldRef")


def _one_env_source_cel(var: str) -> str:
    present = ", ".join(f"has({var}.valueFrom.{name})" for name in _ENV_SOURCES)
    return (
        f"(!has({var}.valueFrom) || ([{present}].filter(x, x).size() == 1 && (!has({var}.value) || {var}.value == '')))"
    )


def _container_envs_hold(containers: list[Container]) -> bool:
    return all(_one_env_source(var) for c in containers for var in c.env or []) and all(
        (ref.config_map_ref is None) != (ref.secret_ref is None) for c in containers for ref in c.env_from or []
    )


def _container_envs_cel(containers: str) -> str:
    return (
        f"!has({containers}) || {containers}.all(c, (!has(c.env) || c.env.all(e, {_one_env_source_cel('e')})) && "
        "(!has(c.envFrom) || c.envFrom.all(f, has(f.configMapRef) != has(f.secretRef))))"
    )


_ENV_MESSAGE = (
    "each env entry takes its value from value or from exactly one of valueFrom's secretKeyRef, configMapKeyRef, "
    "fieldRef and resourceFieldRef (not both), and each envFrom entry names exactly one of configMapRef and "
    "secretRef (a whole Secret or ConfigMap, no key; use env with secretKeyRef for one key): the API server refuses "
    "the pod otherwise."
)


def _one_projection(source: ProjectedSource) -> bool:
    return sum(value is not None for _, value in source) == 1


def _annotation_bytes(spec: SGLangDeploymentSpec) -> int:
    return sum(len(k.encode()) + len(v.encode()) for k, v in spec.template.metadata.annotations.items())


POD_RULES: tuple[Rule, ...] = (
    Rule(
        field="spec.template.spec.initContainers",
        message=f"an init container must not be named '{MAIN_CONTAINER}': that is the worker container's name, and "
        "a pod's container names are unique across containers and initContainers; choose another name.",
        cel=f"!has({_I}) || {_I}.all(c, c.name != '{MAIN_CONTAINER}')",
        holds=lambda s: all(c.name != MAIN_CONTAINER for c in template_init_containers(s)),
    ),
    Rule(
        field="spec.template.spec.containers",
        message=f"the '{MAIN_CONTAINER}' container's volumeMounts must not use {SHARED_MEMORY_PATH} or "
        "model.cache.mountPath, where the operator mounts shared memory and the model cache: the API server "
        "refuses the pod otherwise; choose another mountPath.",
        cel=f"!has({_C}) || {_C}.all(c, c.name != '{MAIN_CONTAINER}' || !has(c.volumeMounts) || "
        f"c.volumeMounts.all(m, m.mountPath != '{SHARED_MEMORY_PATH}' && m.mountPath != self.model.cache.mountPath))",
        holds=_main_mounts_clear,
    ),
    Rule(
        field="spec.template.spec.containers",
        message=_UNIQUE_MOUNTS,
        cel=f"!has({_C}) || {_C}.all(c, {_unique_mount_paths_cel('c')})",
        holds=lambda s: all(_unique_mount_paths(c) for c in template_containers(s)),
    ),
    Rule(
        field="spec.template.spec.initContainers",
        message=_UNIQUE_MOUNTS,
        cel=f"!has({_I}) || {_I}.all(c, {_unique_mount_paths_cel('c')})",
        holds=lambda s: all(_unique_mount_paths(c) for c in template_init_containers(s)),
    ),
    Rule(
        field="spec.model.cache.mountPath",
        message=f"must not be {SHARED_MEMORY_PATH}: the operator mounts the worker's shared memory there; keep the "
        "default or choose another directory.",
        cel=f"self.model.cache.mountPath != '{SHARED_MEMORY_PATH}'",
        holds=lambda s: s.model.cache.mount_path != SHARED_MEMORY_PATH,
    ),
    Rule(
        field="spec.template.metadata.annotations",
        message=f"keys and values together must not exceed {TEMPLATE_ANNOTATION_BYTES} bytes: a pod's annotations "
        "are limited to 256 KiB and the operator adds its own; keep large data in a ConfigMap.",
        cel=f"!has({_META}.annotations) || {_META}.annotations.map(k, size(bytes(k)) + "
        f"size(bytes({_META}.annotations[k]))).sum() <= {TEMPLATE_ANNOTATION_BYTES}",
        holds=lambda s: _annotation_bytes(s) <= TEMPLATE_ANNOTATION_BYTES,
    ),
    Rule(
        field="spec.template.spec.containers",
        message=f"a container may request only {', '.join(SIDECAR_RESOURCES)} (the '{MAIN_CONTAINER}' entry "
        f"{HUGEPAGES}* too): it must not request the GPU resource (resources.gpuResourceName) nor any other extended "
        "resource (nvidia.com/*, amd.com/gpu, google.com/tpu, rdma/*, ...); the operator gives the worker its GPUs "
        "from parallelism (counted by autoscaling.maxGPUs) and an RDMA device from its settings.",
        cel=f"!has({_C}) || {_C}.all(c, {_resources_cel('c', main=True)})",
        holds=lambda s: all(_resources_only(c, main=True) for c in template_containers(s)),
    ),
    Rule(
        field="spec.template.spec.initContainers",
        message=f"an init container may request only {', '.join(SIDECAR_RESOURCES)}: GPUs and every other extended "
        "resource are the worker container's, counted by parallelism and autoscaling.maxGPUs.",
        cel=f"!has({_I}) || {_I}.all(c, {_resources_cel('c')})",
        holds=lambda s: all(_resources_only(c) for c in template_init_containers(s)),
    ),
    Rule(
        field="spec.engine.env",
        message="each entry takes its value from value or from exactly one of valueFrom's secretKeyRef, "
        "configMapKeyRef, fieldRef and resourceFieldRef (not both): the API server refuses the pod otherwise.",
        cel=f"!has(self.engine.env) || self.engine.env.all(e, {_one_env_source_cel('e')})",
        holds=lambda s: all(_one_env_source(var) for var in s.engine.env),
    ),
    Rule(
        field="spec.template.spec.containers",
        message=_ENV_MESSAGE,
        cel=_container_envs_cel(_C),
        holds=lambda s: _container_envs_hold(template_containers(s)),
    ),
    Rule(
        field="spec.template.spec.initContainers",
        message=_ENV_MESSAGE,
        cel=_container_envs_cel(_I),
        holds=lambda s: _container_envs_hold(template_init_containers(s)),
    ),
    Rule(
        field="spec.template.spec.volumes",
        message="each projected source names exactly one of secret, configMap and downwardAPI: the API server "
        "refuses the pod otherwise; use one source entry per Secret or ConfigMap.",
        cel=f"!has({_T}.volumes) || {_T}.volumes.all(v, !has(v.projected) || !has(v.projected.sources) || "
        "v.projected.sources.all(p, [has(p.secret), has(p.configMap), has(p.downwardAPI)].filter(x, x).size() == 1))",
        holds=lambda s: all(
            _one_projection(source)
            for volume in s.template.spec.volumes or []
            if volume.projected is not None
            for source in volume.projected.sources
        ),
    ),
)
