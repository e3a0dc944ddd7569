"""Rules that keep a tenant's CR inside its fleet: owned flags, env names, keys, volumes and container fields.

Each is a `Rule` with its Python check and CEL twin, part of `validation.RULES`, so `validate` and the API server
refuse the same specs with the same message. The typed template (`podtemplate`) already leaves out every pod field
that could escalate (privilege, host namespaces, hostPath, service accounts); these rules cover what types cannot
say: which names inside a free-form list belong to the operator, and which strings the kubelet expands.

`$(` is refused in every CR string the renderer places into the command or the env values of the worker's main
container or the router's container (`reserved.EXPANSION`): there the kubelet would expand it with the environment
the operator filled (owned flags' values, HF_TOKEN, the workers' API key). Sidecars and init containers need no such
rule: the kubelet expands their command, args and env with their own environment only, which holds nothing but what
the tenant wrote there (Secrets under the same namespace policy as any env), and the operator adds nothing to it.
"""

import re
from collections.abc import Callable, Iterable

from .podtemplate import LABEL_KEY, Container, EnvVar, Volume
from .reserved import (
    ENGINE_ENV,
    ENGINE_FLAGS,
    EXPANSION,
    MAIN_CONTAINER,
    MAIN_CONTAINER_FIELDS,
    RESERVED_KEY_PREFIX,
    RESERVED_VOLUMES,
    ROUTER_FLAGS,
    SECURITY_ANNOTATION_PREFIXES,
    describe,
    owned_flag,
    owned_flag_cel,
)
from .rule import Rule
from .spec import PROMETHEUS_TENANT_HEADERS, SGLangDeploymentSpec

_TEMPLATE = "self.template.spec"
_CONTAINERS = f"{_TEMPLATE}.containers"
_META = "self.template.metadata"
# The names of both container lists as one CEL list (the two lists have distinct CEL types and cannot be added).
_CONTAINER_NAMES = (
    f"((has({_CONTAINERS}) ? {_CONTAINERS}.map(c, c.name) : []) + "
    f"(has({_TEMPLATE}.initContainers) ? {_TEMPLATE}.initContainers.map(c, c.name) : []))"
)


def _mounts_declared_cel(containers: str) -> str:
    """CEL: every volumeMount of the containers at `containers` names a template volume."""
    return (
        f"(!has({containers}) || {containers}.all(c, !has(c.volumeMounts) || c.volumeMounts.all(m, "
        f"has({_TEMPLATE}.volumes) && {_TEMPLATE}.volumes.exists(v, v.name == m.name))))"
    )


def _flags_rule(field: str, owned: dict[str, str], args: Callable[[SGLangDeploymentSpec], list[str]]) -> Rule:
    return Rule(
        field=field,
        message=f"must not contain flags the operator sets; where each comes from: {describe(owned)}. Set that "
        "field instead.",
        cel=owned_flag_cel("self" + field.removeprefix("spec"), owned),
        holds=lambda s: all(owned_flag(arg, owned) is None for arg in args(s)),
    )


def _main_container(spec: SGLangDeploymentSpec) -> Container | None:
    return next((c for c in spec.template.spec.containers or [] if c.name == MAIN_CONTAINER), None)


def _main_env(spec: SGLangDeploymentSpec) -> list[EnvVar]:
    """The env the template adds to the main container (appended after the operator's and engine.env)."""
    main = _main_container(spec)
    return (main.env or []) if main is not None else []


def _env_values(env: Iterable[EnvVar]) -> list[str]:
    return [var.value for var in env if var.value is not None]


def _main_env_cel(condition: str) -> str:
    """CEL: every env var `e` of the template's main container satisfies `condition`."""
    return (
        f"!has({_CONTAINERS}) || {_CONTAINERS}.all(c, c.name != '{MAIN_CONTAINER}' || !has(c.env) || "
        f"c.env.all(e, {condition}))"
    )


_NOT_EXPANDED = f"!e.value.contains('{EXPANSION}')"


def _expansion_rule(field: str, where: str, cel: str, values: Callable[[SGLangDeploymentSpec], Iterable[str]]) -> Rule:
    """`$(` in a string the kubelet expands in `where` (see the module's docstring)."""
    return Rule(
        field=field,
        message=f"must not contain '{EXPANSION}': the kubelet expands $(NAME) in {where} with that container's "
        "environment, which holds the values of flags the operator owns and its Secrets (HF_TOKEN, the API keys); "
        "write the value itself.",
        cel=cel,
        holds=lambda s: not any(EXPANSION in value for value in values(s)),
    )


def _volume_sources(volume: Volume) -> int:
    return sum(value is not None for name, value in volume if name != "name")


def _keys(spec: SGLangDeploymentSpec) -> list[str]:
    return [*spec.template.metadata.labels, *spec.template.metadata.annotations]


def _containers_and_mounts_consistent(spec: SGLangDeploymentSpec) -> bool:
    template = spec.template.spec
    containers = [*(template.containers or []), *(template.init_containers or [])]
    volumes = {volume.name for volume in template.volumes or []}
    names = [container.name for container in containers]
    mounts = [mount.name for container in containers for mount in container.volume_mounts or []]
    return len(set(names)) == len(names) and all(name in volumes for name in mounts)


def _snake(camel: str) -> str:
    return "".join(f"_{ch.lower()}" if ch.isupper() else ch for ch in camel)


_TENANT_HEADERS = tuple(name.lower() for name in PROMETHEUS_TENANT_HEADERS)
_TENANT_HEADERS_CEL = "[" + ", ".join(f"'{name}'" for name in _TENANT_HEADERS) + "]"


def _tenant_header(name: str) -> bool:
    """CEL's `lowerAscii()` changes ASCII letters only; so must this (Python's `lower` maps some others to ASCII)."""
    return name.isascii() and name.lower() in _TENANT_HEADERS


def _is_label_key(key: str) -> bool:
    return re.fullmatch(LABEL_KEY, key) is not None and len(key.partition("/")[0]) <= 253


_ENV_LIST = ", ".join(f"'{name}'" for name in ENGINE_ENV)
_ENV_SOURCES = (
    "where each comes from: "
    + "; ".join(f"{name}: {field}" for name, field in ENGINE_ENV.items())
    + ". Use that field (a token belongs in a Secret, never in a plain value)."
)
_VOLUME_SOURCES = ("configMap", "secret", "emptyDir", "persistentVolumeClaim", "downwardAPI", "projected")
_MAIN_ONLY = [f for f in ("image", "command", "args", "workingDir", "ports") if f not in MAIN_CONTAINER_FIELDS]
_GPU_IN = "(has(c.resources.{kind}) && self.resources.gpuResourceName in c.resources.{kind})"

TENANT_RULES: tuple[Rule, ...] = (
    _flags_rule("spec.engine.args", ENGINE_FLAGS, lambda s: s.engine.args),
    _flags_rule("spec.router.args", ROUTER_FLAGS, lambda s: s.router.args),
    Rule(
        field="spec.engine.env",
        message=f"must not set env the operator sets; {_ENV_SOURCES}",
        cel=f"!has(self.engine.env) || self.engine.env.all(e, !(e.name in [{_ENV_LIST}]))",
        holds=lambda s: not any(var.name in ENGINE_ENV for var in s.engine.env),
    ),
    Rule(
        field="spec.template.spec.containers",
        message=f"the '{MAIN_CONTAINER}' entry's env must not set env the operator sets; {_ENV_SOURCES}",
        cel=_main_env_cel(f"!(e.name in [{_ENV_LIST}])"),
        holds=lambda s: not any(var.name in ENGINE_ENV for var in _main_env(s)),
    ),
    _expansion_rule(
        "spec.model.path",
        "the worker's command",
        f"!self.model.path.contains('{EXPANSION}')",
        lambda s: [s.model.path],
    ),
    _expansion_rule(
        "spec.model.servedName",
        "the worker's command",
        f"!has(self.model.servedName) || !self.model.servedName.contains('{EXPANSION}')",
        lambda s: [s.model.served_name or ""],
    ),
    _expansion_rule(
        "spec.disaggregation.ibDevice",
        "the worker's command",
        f"!has(self.disaggregation) || !has(self.disaggregation.ibDevice) || "
        f"!self.disaggregation.ibDevice.contains('{EXPANSION}')",
        lambda s: [s.disaggregation.ib_device or ""] if s.disaggregation is not None else [],
    ),
    _expansion_rule(
        "spec.model.revision",
        "the worker's command",
        f"!has(self.model.revision) || !self.model.revision.contains('{EXPANSION}')",
        lambda s: [s.model.revision or ""],
    ),
    _expansion_rule(
        "spec.model.cache.mountPath",
        "the worker's env (it is HF_HOME)",
        f"!has(self.model.cache) || !has(self.model.cache.mountPath) || "
        f"!self.model.cache.mountPath.contains('{EXPANSION}')",
        lambda s: [s.model.cache.mount_path],
    ),
    _expansion_rule(
        "spec.engine.args",
        "the worker's command",
        f"!has(self.engine.args) || self.engine.args.all(a, !a.contains('{EXPANSION}'))",
        lambda s: s.engine.args,
    ),
    _expansion_rule(
        "spec.engine.env",
        "the worker's env values",
        f"!has(self.engine.env) || self.engine.env.all(e, !has(e.value) || {_NOT_EXPANDED})",
        lambda s: _env_values(s.engine.env),
    ),
    _expansion_rule(
        "spec.template.spec.containers",
        f"the '{MAIN_CONTAINER}' entry's env values (the worker's env)",
        _main_env_cel(f"!has(e.value) || {_NOT_EXPANDED}"),
        lambda s: _env_values(_main_env(s)),
    ),
    _expansion_rule(
        "spec.router.args",
        "the router's command",
        f"!has(self.router.args) || self.router.args.all(a, !a.contains('{EXPANSION}'))",
        lambda s: s.router.args,
    ),
    Rule(
        field="spec.template.metadata",
        message=f"labels and annotations must not use the operator's prefix {RESERVED_KEY_PREFIX} (it keeps replica "
        "and drain state there) nor loosen the pod's confinement ("
        + ", ".join(f"{p}*" for p in SECURITY_ANNOTATION_PREFIXES)
        + "), and keys must be valid Kubernetes label keys (prefix/name, prefix a DNS name of at most 253 "
        "characters, name at most 63 characters of letters, digits, '-', '_' and '.').",
        cel=f"(!has({_META}.labels) || {_META}.labels.all(k, !k.startsWith('{RESERVED_KEY_PREFIX}') && "
        f"k.matches(r'{LABEL_KEY}') && size(k.split('/')[0]) <= 253)) && "
        f"(!has({_META}.annotations) || {_META}.annotations.all(k, "
        f"!k.startsWith('{RESERVED_KEY_PREFIX}') && "
        + " && ".join(f"!k.startsWith('{p}')" for p in SECURITY_ANNOTATION_PREFIXES)
        + f" && k.matches(r'{LABEL_KEY}') && size(k.split('/')[0]) <= 253))",
        holds=lambda s: (
            all(_is_label_key(key) and not key.startswith(RESERVED_KEY_PREFIX) for key in _keys(s))
            and not any(key.startswith(SECURITY_ANNOTATION_PREFIXES) for key in s.template.metadata.annotations)
        ),
    ),
    Rule(
        field="spec.template.spec.containers",
        message=f"the '{MAIN_CONTAINER}' entry may only add {', '.join(MAIN_CONTAINER_FIELDS[1:])} (its image, "
        "command and ports come from engine and model); any other entry is a sidecar and needs an image.",
        cel=f"!has({_CONTAINERS}) || {_CONTAINERS}.all(c, c.name == '{MAIN_CONTAINER}' ? "
        + "("
        + " && ".join(f"!has(c.{f})" for f in _MAIN_ONLY)
        + ")"
        + " : has(c.image))",
        holds=lambda s: all(
            all(getattr(c, _snake(f)) is None for f in _MAIN_ONLY) if c.name == MAIN_CONTAINER else c.image is not None
            for c in s.template.spec.containers or []
        ),
    ),
    Rule(
        field="spec.template.spec.initContainers",
        message="each init container needs an image and must not request the GPU resource.",
        cel=f"!has({_TEMPLATE}.initContainers) || {_TEMPLATE}.initContainers.all(c, has(c.image) && "
        f"(!has(c.resources) || !({_GPU_IN.format(kind='requests')} || {_GPU_IN.format(kind='limits')})))",
        holds=lambda s: all(
            c.image is not None
            and (
                c.resources is None
                or s.resources.gpu_resource_name not in {**c.resources.requests, **c.resources.limits}
            )
            for c in s.template.spec.init_containers or []
        ),
    ),
    Rule(
        field="spec.template.spec.volumes",
        message=f"each volume needs exactly one source ({', '.join(_VOLUME_SOURCES)}), and the names "
        f"{', '.join(RESERVED_VOLUMES)} are the operator's (shared memory, model.cache).",
        cel=f"!has({_TEMPLATE}.volumes) || {_TEMPLATE}.volumes.all(v, !(v.name in "
        f"[{', '.join(repr(n) for n in RESERVED_VOLUMES)}]) && "
        f"[{', '.join(f'has(v.{src})' for src in _VOLUME_SOURCES)}].filter(x, x).size() == 1)",
        holds=lambda s: all(
            v.name not in RESERVED_VOLUMES and _volume_sources(v) == 1 for v in s.template.spec.volumes or []
        ),
    ),
    Rule(
        field="spec.template.spec.containers",
        message="container names must be unique across containers and initContainers, and every volumeMount must "
        f"name a volume of template.spec.volumes (the operator's own {', '.join(RESERVED_VOLUMES)} are mounted by "
        "the operator only, read-only where they hold a node directory).",
        cel=f"{_CONTAINER_NAMES}.all(n, {_CONTAINER_NAMES}.exists_one(m, m == n)) && "
        f"{_mounts_declared_cel(_CONTAINERS)} && {_mounts_declared_cel(_TEMPLATE + '.initContainers')}",
        holds=_containers_and_mounts_consistent,
    ),
    Rule(
        field="spec.template.spec.volumes",
        message="volume names must be unique.",
        cel=f"!has({_TEMPLATE}.volumes) || "
        f"{_TEMPLATE}.volumes.all(v, {_TEMPLATE}.volumes.exists_one(w, w.name == v.name))",
        holds=lambda s: len({v.name for v in s.template.spec.volumes or []}) == len(s.template.spec.volumes or []),
    ),
    Rule(
        field="spec.autoscaling.prometheusAuth.headers",
        message=f"header names must be one of {', '.join(PROMETHEUS_TENANT_HEADERS)} (case-insensitive), the "
        "tenant headers of Cortex, Mimir and Thanos; credentials belong in bearerTokenSecretRef or "
        "basicAuthSecretRef, and other headers (Host, Content-Length, Cookie, X-Forwarded-For, ...) would change "
        "the request itself.",
        cel="!has(self.autoscaling.prometheusAuth) || !has(self.autoscaling.prometheusAuth.headers) || "
        f"self.autoscaling.prometheusAuth.headers.all(h, h.lowerAscii() in {_TENANT_HEADERS_CEL})",
        holds=lambda s: all(_tenant_header(h) for h in s.autoscaling.prometheus_auth.headers),
    ),
)
