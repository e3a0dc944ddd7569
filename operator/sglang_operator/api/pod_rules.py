"""Rules that keep every worker pod a CR renders acceptable to the API server, and sidecars off the accelerators.

A spec the CRD accepts but whose pods the API server refuses leaves a fleet with no pod and a status that can only
repeat the API server's 422. Kubernetes' pod validation (`pkg/apis/core/validation`) is the reference: what the
typed template can say as a pattern is in `podtypes`/`podtemplate` (paths without `..`, Secret keys, the fieldRef
paths pods have, env names); what needs two fields at once is here, each a `Rule` with its CEL twin, so `validate`
and the API server refuse the spec when it is written, naming the field, instead of the pod at every pass.

Sidecars and init containers may request only cpu, memory and ephemeral-storage. The GPU budget (`maxGPUs`) counts
the GPUs parallelism gives the main container, of `resources.gpuResourceName`; a sidecar asking for any other
extended resource (`nvidia.com/mig-1g.10gb` on a fleet of `nvidia.com/gpu`, `amd.com/gpu`, `google.com/tpu`, ...)
would take accelerators outside that budget. Which extended resources a cluster treats as accelerators is known to
its device plugins, not to the operator, so a sidecar gets none: a helper process needs no device. (The fleet's own
GPU resource is refused by name in `tenant_rules` as well; a sidecar asking for it gets both errors.)

A path given twice by one projected source's items is refused by the schema (a list keyed by path, `podtypes`); the
same path from two sources of one volume is not refused at admission: every pairwise CEL check over 32 volumes of 16
sources of up to 160 items each is estimated far above the API server's per-rule cost limit, and the list functions
that would make it linear (`distinct`, `flatten`) need Kubernetes 1.34's CEL while the chart supports 1.30.

Each rule reads as few fields as it can (the template alone where possible): a worker group's template replaces the
fleet's, so every rule is checked once more per group, and the API server bounds the estimated cost of each.
"""

import re
from collections.abc import Iterable, Mapping
from decimal import Decimal

from .limits import TEMPLATE_ANNOTATION_BYTES
from .podtemplate import CPU_DIVISORS, Container, EnvVar, PodSpecOverrides, ProjectedSource, Toleration
from .podtypes import LabelRequirement, LabelSelector, PodAffinity, PodAffinityTerm, Requirement
from .reserved import MAIN_CONTAINER
from .rule import Rule
from .spec import SGLangDeploymentSpec

SHARED_MEMORY_PATH = "/dev/shm"
"""Where every worker pod mounts its shared memory (`render.workers`); the model cache is at model.cache.mountPath."""
SIDECAR_RESOURCES = ("cpu", "memory", "ephemeral-storage")

_T = "self.template.spec"
_C = f"{_T}.containers"
_I = f"{_T}.initContainers"
_META = "self.template.metadata"
_SIDECAR_RESOURCES_CEL = "[" + ", ".join(f"'{name}'" for name in SIDECAR_RESOURCES) + "]"


def _containers(spec: SGLangDeploymentSpec) -> list[Container]:
    return list(spec.template.spec.containers or [])


def _init_containers(spec: SGLangDeploymentSpec) -> list[Container]:
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
        for container in _containers(spec)
        if container.name == MAIN_CONTAINER
        for mount in container.volume_mounts or []
    )


def _sidecar_resources_only(container: Container) -> bool:
    if container.resources is None:
        return True
    return {*container.resources.requests, *container.resources.limits} <= set(SIDECAR_RESOURCES)


def _sidecar_resources_cel(container: str) -> str:
    allowed = f"r in {_SIDECAR_RESOURCES_CEL}"
    return (
        f"(!has({container}.resources) || "
        f"((!has({container}.resources.requests) || {container}.resources.requests.all(r, {allowed})) && "
        f"(!has({container}.resources.limits) || {container}.resources.limits.all(r, {allowed}))))"
    )


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


# -- tolerations ----------------------------------------------------------------------------------------------------

_TOL = f"{_T}.tolerations"


def _tolerations(spec: SGLangDeploymentSpec) -> list[Toleration]:
    return list(spec.template.spec.tolerations or [])


# -- selector requirements: how many values each operator takes -----------------------------------------------------

_TAKE_SOME = ("In", "NotIn")
_TAKE_NONE = ("Exists", "DoesNotExist")


def _values_fit(requirement: Requirement | LabelRequirement) -> bool:
    """Kubernetes' ValidateNodeSelectorRequirement and ValidateLabelSelectorRequirement: In and NotIn need values,
    Exists and DoesNotExist take none, Gt and Lt (node selectors only) exactly one."""
    count = len(requirement.values or [])
    if requirement.operator in _TAKE_SOME:
        return count > 0
    if requirement.operator in _TAKE_NONE:
        return count == 0
    return count == 1


def _values_fit_cel(requirements: str) -> str:
    count = "(has(r.values) ? size(r.values) : 0)"
    return (
        f"(!has({requirements}) || {requirements}.all(r, r.operator in {list(_TAKE_SOME)} ? {count} > 0 : "
        f"(r.operator in {list(_TAKE_NONE)} ? {count} == 0 : {count} == 1)))"
    )


def _selector_fits(selector: LabelSelector | None) -> bool:
    return selector is None or all(_values_fit(r) for r in selector.match_expressions or [])


def _selector_fits_cel(selector: str) -> str:
    return f"(!has({selector}) || {_values_fit_cel(f'{selector}.matchExpressions')})"


def _pod_terms(affinity: PodAffinity | None) -> list[PodAffinityTerm]:
    if affinity is None:
        return []
    required = affinity.required_during_scheduling_ignored_during_execution or []
    preferred = affinity.preferred_during_scheduling_ignored_during_execution or []
    return [*required, *(weighted.pod_affinity_term for weighted in preferred)]


def _affinity_fits(template: PodSpecOverrides) -> bool:
    affinity = template.affinity
    if affinity is None:
        return True
    node = affinity.node_affinity
    terms = []
    if node is not None:
        required = node.required_during_scheduling_ignored_during_execution
        terms = [*(required.node_selector_terms if required is not None else [])]
        terms += [p.preference for p in node.preferred_during_scheduling_ignored_during_execution or []]
    pod_terms = [*_pod_terms(affinity.pod_affinity), *_pod_terms(affinity.pod_anti_affinity)]
    return all(_values_fit(r) for t in terms for r in t.match_expressions or []) and all(
        _selector_fits(t.label_selector) and _selector_fits(t.namespace_selector) for t in pod_terms
    )


_AFF = f"{_T}.affinity"
_NODE = f"{_AFF}.nodeAffinity"
_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
_PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


def _pod_affinity_cel(kind: str) -> str:
    path = f"{_AFF}.{kind}"
    term = "{t}"
    fits = f"{_selector_fits_cel(f'{term}.labelSelector')} && {_selector_fits_cel(f'{term}.namespaceSelector')}"
    return (
        f"(!has({path}) || ((!has({path}.{_REQUIRED}) || {path}.{_REQUIRED}.all(t, {fits.format(t='t')})) && "
        f"(!has({path}.{_PREFERRED}) || {path}.{_PREFERRED}.all(w, {fits.format(t='w.podAffinityTerm')}))))"
    )


_AFFINITY_CEL = (
    f"!has({_AFF}) || ((!has({_NODE}) || ((!has({_NODE}.{_REQUIRED}) || "
    f"{_NODE}.{_REQUIRED}.nodeSelectorTerms.all(t, {_values_fit_cel('t.matchExpressions')})) && "
    f"(!has({_NODE}.{_PREFERRED}) || "
    f"{_NODE}.{_PREFERRED}.all(p, {_values_fit_cel('p.preference.matchExpressions')})))) "
    f"&& {_pod_affinity_cel('podAffinity')} && {_pod_affinity_cel('podAntiAffinity')})"
)
_VALUES_MESSAGE = (
    "needs values for In and NotIn, none for Exists and DoesNotExist, and exactly one for Gt and Lt: the API server "
    "refuses the pod otherwise."
)


# -- resources: requests within limits -------------------------------------------------------------------------------

_SUFFIXES = {
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
    "k": Decimal("1e3"), "M": Decimal("1e6"), "G": Decimal("1e9"), "T": Decimal("1e12"), "P": Decimal("1e15"),
    "E": Decimal("1e18"), "Ki": Decimal(2**10), "Mi": Decimal(2**20), "Gi": Decimal(2**30), "Ti": Decimal(2**40),
    "Pi": Decimal(2**50), "Ei": Decimal(2**60),
}  # fmt: skip
_QUANTITY_PARTS = re.compile(r"^\+?([0-9]*\.?[0-9]*)(?:[eE]([-+]?[0-9]+)|([a-zA-Z]*))$")


def quantity(text: str) -> Decimal:
    """A Kubernetes quantity's value (`podtypes.QUANTITY` has already checked its form), as CEL's `quantity()`."""
    match = _QUANTITY_PARTS.match(text)
    assert match is not None, text
    number, exponent, suffix = match.groups()
    value = Decimal(number if number not in ("", ".") else "0")
    return value.scaleb(int(exponent)) if exponent is not None else value * _SUFFIXES[suffix or ""]


def _overcommittable(resource: str) -> bool:
    """Kubernetes' IsOvercommitAllowed: a native resource (no domain, or a kubernetes.io one) other than hugepages.
    Any other's request must equal its limit, and needs one."""
    return ("/" not in resource or "kubernetes.io/" in resource) and not resource.startswith("hugepages-")


_OVERCOMMITTABLE_CEL = "((!{k}.contains('/') || {k}.contains('kubernetes.io/')) && !{k}.startsWith('hugepages-'))"


def _request_fits(resource: str, request: str, limit: str) -> bool:
    order = quantity(request).compare(quantity(limit))
    return order <= 0 if _overcommittable(resource) else order == 0


def _request_fits_cel(resource: str, request: str, limit: str) -> str:
    order = f"quantity({request}).compareTo(quantity({limit}))"
    return f"({_OVERCOMMITTABLE_CEL.format(k=resource)} ? {order} <= 0 : {order} == 0)"


def _within_limits(requests: Mapping[str, str], limits: Mapping[str, str]) -> bool:
    """Each request at most its limit (equal for a resource that cannot be overcommitted, which needs a limit). A
    limit without a request is fine: the API server defaults the request to it."""
    return all(_request_fits(k, v, limits[k]) if k in limits else _overcommittable(k) for k, v in requests.items())


def _sidecar_within_limits_cel(resources: str) -> str:
    """A sidecar's or init container's requests within their limits. Their resources are cpu, memory and
    ephemeral-storage only (the sidecar resource rules), all of which may go without a limit."""
    req, lim = f"{resources}.requests", f"{resources}.limits"
    return (
        f"(!has({resources}) || !has({req}) || !has({lim}) || {req}.all(k, !(k in {lim}) || "
        f"quantity({req}[k]).compareTo(quantity({lim}[k])) <= 0))"
    )


def _containers_within_limits(containers: Iterable[Container]) -> bool:
    return all(
        quantity(request).compare(quantity(c.resources.limits[k])) <= 0
        for c in containers
        if c.resources is not None
        for k, request in c.resources.requests.items()
        if k in c.resources.limits
    )


_WITHIN_LIMITS = "each request must be at most its limit: the API server refuses the pod otherwise."
_MAIN_SET = ("cpu", "memory")
"""What `resources` sets on the main container, as both its request and its limit (`render.workers`)."""


def _main_within_limits(spec: SGLangDeploymentSpec) -> bool:
    """The main container's requests and limits as the pod gets them: resources.cpu and resources.memory as both,
    the template's `sglang` entry replacing either one by one (`render.overrides`)."""
    rendered = {k: v for k, v in (("cpu", spec.resources.cpu), ("memory", spec.resources.memory)) if v}
    for c in _containers(spec):
        if c.name != MAIN_CONTAINER or c.resources is None:
            continue
        requests = {**rendered, **c.resources.requests}
        limits = {**rendered, **c.resources.limits}
        defaulted = {**limits, **requests}  # the API server defaults a missing request to the limit
        if not _within_limits(defaulted, limits):
            return False
        extended = [v for k, v in {**requests, **limits}.items() if not _overcommittable(k)]
        if any(quantity(v) != quantity(v).to_integral_value() for v in extended):
            return False
    return True


def _main_within_limits_cel() -> str:
    req, lim = "c.resources.requests", "c.resources.limits"

    def set_by_resources(k: str, then: str, otherwise: str) -> str:
        for name in reversed(_MAIN_SET):
            otherwise = f"(({k} == '{name}' && has(self.resources.{name})) ? {then.format(r=name)} : {otherwise})"
        return otherwise

    request_ok = set_by_resources(
        "k",
        f"{_request_fits_cel('k', f'{req}[k]', 'self.resources.{r}')}",
        _OVERCOMMITTABLE_CEL.format(k="k"),
    )
    limit_ok = set_by_resources("k", f"quantity(self.resources.{{r}}).compareTo(quantity({lim}[k])) <= 0", "true")
    integer = "(" + _OVERCOMMITTABLE_CEL.format(k="k") + " || quantity({m}[k]).isInteger())"
    return (
        f"!has({_C}) || {_C}.all(c, c.name != '{MAIN_CONTAINER}' || !has(c.resources) || ("
        f"(!has({req}) || {req}.all(k, ((has({lim}) && k in {lim}) ? "
        f"{_request_fits_cel('k', f'{req}[k]', f'{lim}[k]')} : {request_ok}) && {integer.format(m=req)})) && "
        f"(!has({lim}) || {lim}.all(k, ((has({req}) && k in {req}) || {limit_ok}) && {integer.format(m=lim)}))))"
    )


# -- resourceFieldRef divisors ----------------------------------------------------------------------------------------


def _divisor_fits(var: EnvVar) -> bool:
    ref = var.value_from.resource_field_ref if var.value_from is not None else None
    if ref is None or ref.divisor is None:
        return True
    return (ref.divisor in CPU_DIVISORS) if ref.resource.endswith(".cpu") else ref.divisor != "1m"


def _divisor_fits_cel(var: str) -> str:
    ref = f"{var}.valueFrom.resourceFieldRef"
    return (
        f"(!has({var}.valueFrom) || !has({ref}) || !has({ref}.divisor) || "
        f"({ref}.resource.endsWith('.cpu') ? {ref}.divisor in {list(CPU_DIVISORS)} : {ref}.divisor != '1m'))"
    )


def _divisors_cel(containers: str) -> str:
    return f"!has({containers}) || {containers}.all(c, !has(c.env) || c.env.all(e, {_divisor_fits_cel('e')}))"


_DIVISOR = (
    "a resourceFieldRef's divisor must be 1m or 1 for cpu, and one of 1, 1k, 1M, 1G, 1T, 1P, 1E, 1Ki, 1Mi, 1Gi, "
    "1Ti, 1Pi, 1Ei for memory, ephemeral-storage and hugepages: the API server refuses the pod otherwise."
)


POD_RULES: tuple[Rule, ...] = (
    Rule(
        field="spec.template.spec.initContainers",
        message=f"an init container must not be named '{MAIN_CONTAINER}': that is the worker container's name, and "
        "a pod's container names are unique across containers and initContainers; choose another name.",
        cel=f"!has({_I}) || {_I}.all(c, c.name != '{MAIN_CONTAINER}')",
        holds=lambda s: all(c.name != MAIN_CONTAINER for c in _init_containers(s)),
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
        holds=lambda s: all(_unique_mount_paths(c) for c in _containers(s)),
    ),
    Rule(
        field="spec.template.spec.initContainers",
        message=_UNIQUE_MOUNTS,
        cel=f"!has({_I}) || {_I}.all(c, {_unique_mount_paths_cel('c')})",
        holds=lambda s: all(_unique_mount_paths(c) for c in _init_containers(s)),
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
        message=f"a sidecar may request only {', '.join(SIDECAR_RESOURCES)}: GPUs and every other extended resource "
        "(nvidia.com/*, amd.com/gpu, google.com/tpu, ...) are the worker container's, counted by parallelism and "
        "autoscaling.maxGPUs.",
        cel=f"!has({_C}) || {_C}.all(c, c.name == '{MAIN_CONTAINER}' || {_sidecar_resources_cel('c')})",
        holds=lambda s: all(c.name == MAIN_CONTAINER or _sidecar_resources_only(c) for c in _containers(s)),
    ),
    Rule(
        field="spec.template.spec.initContainers",
        message=f"an init container may request only {', '.join(SIDECAR_RESOURCES)}: GPUs and every other extended "
        "resource are the worker container's, counted by parallelism and autoscaling.maxGPUs.",
        cel=f"!has({_I}) || {_I}.all(c, {_sidecar_resources_cel('c')})",
        holds=lambda s: all(_sidecar_resources_only(c) for c in _init_containers(s)),
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
        holds=lambda s: _container_envs_hold(_containers(s)),
    ),
    Rule(
        field="spec.template.spec.initContainers",
        message=_ENV_MESSAGE,
        cel=_container_envs_cel(_I),
        holds=lambda s: _container_envs_hold(_init_containers(s)),
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
    Rule(
        field="spec.template.spec.tolerations",
        message="a toleration with operator Exists must not have a value (Exists matches every value of the key): "
        "the API server refuses the pod otherwise; leave value out.",
        cel=f"!has({_TOL}) || {_TOL}.all(t, !has(t.operator) || t.operator != 'Exists' || !has(t.value) || "
        "t.value == '')",
        holds=lambda s: all(t.operator != "Exists" or not t.value for t in _tolerations(s)),
    ),
    Rule(
        field="spec.template.spec.tolerations",
        message="a toleration without a key must have operator Exists (it then tolerates every taint): the API "
        "server refuses the pod otherwise.",
        cel=f"!has({_TOL}) || {_TOL}.all(t, (has(t.key) && t.key != '') || (has(t.operator) && "
        "t.operator == 'Exists'))",
        holds=lambda s: all(t.key or t.operator == "Exists" for t in _tolerations(s)),
    ),
    Rule(
        field="spec.template.spec.tolerations",
        message="a toleration with tolerationSeconds must have effect NoExecute (only eviction has a delay): the "
        "API server refuses the pod otherwise.",
        cel=f"!has({_TOL}) || {_TOL}.all(t, !has(t.tolerationSeconds) || (has(t.effect) && t.effect == 'NoExecute'))",
        holds=lambda s: all(t.toleration_seconds is None or t.effect == "NoExecute" for t in _tolerations(s)),
    ),
    Rule(
        field="spec.template.spec.affinity",
        message=f"each matchExpressions entry of a node selector term, a label selector or a namespace selector "
        f"{_VALUES_MESSAGE}",
        cel=_AFFINITY_CEL,
        holds=lambda s: _affinity_fits(s.template.spec),
    ),
    Rule(
        field="spec.template.spec.topologySpreadConstraints",
        message=f"each matchExpressions entry of a labelSelector {_VALUES_MESSAGE}",
        cel=f"!has({_T}.topologySpreadConstraints) || {_T}.topologySpreadConstraints.all(s, "
        f"{_selector_fits_cel('s.labelSelector')})",
        holds=lambda s: all(
            _selector_fits(c.label_selector) for c in s.template.spec.topology_spread_constraints or []
        ),
    ),
    Rule(
        field="spec.template.spec.containers",
        message=f"in each sidecar's resources, {_WITHIN_LIMITS}",
        cel=f"!has({_C}) || {_C}.all(c, c.name == '{MAIN_CONTAINER}' || {_sidecar_within_limits_cel('c.resources')})",
        holds=lambda s: _containers_within_limits(c for c in _containers(s) if c.name != MAIN_CONTAINER),
    ),
    Rule(
        field="spec.template.spec.initContainers",
        message=f"in each init container's resources, {_WITHIN_LIMITS}",
        cel=f"!has({_I}) || {_I}.all(c, {_sidecar_within_limits_cel('c.resources')})",
        holds=lambda s: _containers_within_limits(_init_containers(s)),
    ),
    Rule(
        field="spec.template.spec.containers",
        message=f"the '{MAIN_CONTAINER}' entry's resources, with resources.cpu and resources.memory (both the "
        "worker's request and its limit), must keep each request at most its limit (equal, and a whole number, for "
        "hugepages and extended resources such as rdma/ib): the API server refuses the pod otherwise.",
        cel=_main_within_limits_cel(),
        holds=_main_within_limits,
    ),
    Rule(
        field="spec.engine.env",
        message=_DIVISOR,
        cel=f"!has(self.engine.env) || self.engine.env.all(e, {_divisor_fits_cel('e')})",
        holds=lambda s: all(_divisor_fits(var) for var in s.engine.env),
    ),
    Rule(
        field="spec.template.spec.containers",
        message=_DIVISOR,
        cel=_divisors_cel(_C),
        holds=lambda s: all(_divisor_fits(var) for c in _containers(s) for var in c.env or []),
    ),
    Rule(
        field="spec.template.spec.initContainers",
        message=_DIVISOR,
        cel=_divisors_cel(_I),
        holds=lambda s: all(_divisor_fits(var) for c in _init_containers(s) for var in c.env or []),
    ),
)
