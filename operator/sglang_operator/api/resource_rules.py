"""Rules that keep the resources a CR sets on its containers, and its resourceFieldRef divisors, in the forms pods
accept.

Each request must be at most its limit, and equal to it (a whole number) for resources that cannot be overcommitted
(hugepages: the only ones the template may name beside cpu, memory and ephemeral-storage, `pod_rules`); the main
container's are counted as the pod gets them, `resources.cpu` and `resources.memory` merged with the template's
`sglang` entry. A divisor must be one Kubernetes allows for its resource. Each is a `Rule` with its CEL twin (CEL's
`quantity()` library), so `validate` and the API server refuse the spec naming the field, instead of every pod of the
fleet at every pass with a 422.
"""

import re
from collections.abc import Iterable, Mapping
from decimal import Decimal

from .pod_rules import CONTAINERS_CEL as _C
from .pod_rules import HUGEPAGES
from .pod_rules import INIT_CONTAINERS_CEL as _I
from .pod_rules import template_containers as _containers
from .pod_rules import template_init_containers as _init_containers
from .podtemplate import CPU_DIVISORS, Container, EnvVar
from .reserved import MAIN_CONTAINER
from .rule import Rule
from .spec import SGLangDeploymentSpec

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
    """Kubernetes' IsOvercommitAllowed over what the template may request (`pod_rules.main_resource`): all but
    hugepages, whose request must equal its limit, and needs one. (Extended resources, the others Kubernetes does not
    overcommit, are refused by name there.)"""
    return not resource.startswith(HUGEPAGES)


_OVERCOMMITTABLE_CEL = f"!{{k}}.startsWith('{HUGEPAGES}')"


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

    # cpu and memory are overcommitted: a request at most resources.cpu or .memory, the limit it gets there
    request_ok = set_by_resources(
        "k", f"quantity({req}[k]).compareTo(quantity(self.resources.{{r}})) <= 0", _OVERCOMMITTABLE_CEL.format(k="k")
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


RESOURCE_RULES: tuple[Rule, ...] = (
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
        "hugepages): the API server refuses the pod otherwise.",
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
