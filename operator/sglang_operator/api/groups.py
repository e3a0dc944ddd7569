"""Worker groups: what each group of a fleet runs (its effective spec), and how every rule applies to each group.

A group states its parallelism; each other field it sets replaces the top level's whole (`resources`, `template`,
`updateStrategy`), and its `engine` replaces the top level's engine fields one by one (`args`, `env`,
`maxRunningRequests`, `memFractionStatic`). The model, image, version, router and autoscaler are the fleet's. A spec
without `workerGroups` is one group named "" whose effective spec is the spec itself, so every existing CR means
what it meant.

Every rule that reads a field a group can set is checked once per group against the group's effective spec: in
Python with `group_spec`, and as CEL by `group_variants`, in two places. Where the rule reads only what a group can
set and the group sets all of it, the rule sits on the `workerGroups` items of the CRD, so the API server names
`spec.workerGroups[i].engine.args` as `validate` does. Where the group's values mix with the top level's (a group
that sets its parallelism but not its resources) or the fleet's version decides, the CEL on the spec rewrites the
rule over `self.workerGroups.all(g, ...)`, choosing for each field the group's value where the group sets it and
the top level's where not; a fieldPath there cannot carry an index, so the field is `spec.workerGroups` and the
message names the group, in `validate` and at the API server alike. Pure.
"""

import json
import re
from dataclasses import dataclass

from .disaggregation_rules import sglang_dp_size
from .limits import MAX_REPLICAS
from .releases import PD_DECODE_SHAPE_UNTIL, parse_version
from .rule import FieldError, Rule, SpecCheck
from .spec import Role, SGLangDeploymentSpec, WorkerGroupSpec

GROUP_ENGINE_FIELDS = ("max_running_requests", "mem_fraction_static", "args", "env")
_WHOLE_FIELDS = ("resources", "template", "update_strategy")
LABEL_VALUE_NONE = ""
"""The implicit group's name: its pods carry no group label and keep the names they had before groups existed."""


@dataclass(frozen=True)
class PdRole:
    """A group's part in a disaggregated fleet, as its pods are launched."""

    role: Role
    decode_shape: tuple[int, int] | None = None
    """A prefill group's, where the release tells each prefill server the decode shape (SGLang 0.5.9's
    `--disaggregation-decode-tp/-dp`): the decode groups' (tp, DP size), one shape there (`disaggregation_rules`).
    None where the release negotiates it per transfer, so a decode change does not restart prefill."""


@dataclass(frozen=True)
class WorkerGroup:
    name: str
    spec: SGLangDeploymentSpec
    """The group's effective spec: the top level with the group's fields in place, `replicas` its own count."""
    elastic: bool
    """Sized by `spec.replicas` (kubectl scale, /scale) rather than a count of its own."""
    min_replicas: int
    max_replicas: int
    pd: PdRole | None = None
    """Its role in a disaggregated fleet; None in a colocated one."""

    @property
    def role(self) -> Role | None:
        return self.pd.role if self.pd is not None else None


def group_spec(spec: SGLangDeploymentSpec, group: WorkerGroupSpec) -> SGLangDeploymentSpec:
    """The spec one group's replicas run: the top level with the group's fields in place."""
    engine = spec.engine
    if group.engine is not None:
        chosen = {f: getattr(group.engine, f) for f in GROUP_ENGINE_FIELDS if getattr(group.engine, f) is not None}
        engine = engine.model_copy(update=chosen)
    update: dict[str, object] = {
        "parallelism": group.parallelism,
        "engine": engine,
        "replicas": spec.replicas if group.replicas is None else group.replicas,
        "worker_groups": [],
    }
    for name in _WHOLE_FIELDS:
        if getattr(group, name) is not None:
            update[name] = getattr(group, name)
    return spec.model_copy(update=update)


def worker_groups(spec: SGLangDeploymentSpec) -> list[WorkerGroup]:
    """The fleet's groups in spec order: the declared ones, or the implicit one."""
    if not spec.worker_groups:
        scaling = spec.autoscaling
        return [WorkerGroup(LABEL_VALUE_NONE, spec, True, scaling.min_replicas, scaling.max_replicas)]
    return [
        WorkerGroup(g.name, group_spec(spec, g), g.replicas is None, g.autoscaling.min_replicas,
                    g.autoscaling.max_replicas, _pd_role(spec, g))
        for g in spec.worker_groups
    ]  # fmt: skip


def replica_shape(spec: SGLangDeploymentSpec) -> str:
    """One replica's parallelism in a few characters: `tp4`, `tp2 dp2`, `tp16 adp16 ep16 2n` (2 nodes)."""
    par = spec.parallelism
    parts = [f"tp{par.tp}"]
    parts += [
        f"{name}{value}" for name, value in (("dp", par.dp), ("adp", par.attention_dp), ("ep", par.ep)) if value > 1
    ]
    if par.nnodes > 1:
        parts.append(f"{par.nnodes}n")
    return " ".join(parts)


def fleet_shape(spec: SGLangDeploymentSpec) -> str:
    """The fleet's shapes for the SHAPE printer column: one replica's, or each group's (with its role), so a fleet of
    several shapes says so instead of printing the unused top-level parallelism."""
    groups = worker_groups(spec)
    if not spec.worker_groups:
        return replica_shape(spec)
    return ", ".join(
        f"{g.name}{f' ({g.role})' if g.role and g.role != g.name else ''}: {replica_shape(g.spec)}" for g in groups
    )


def _pd_role(spec: SGLangDeploymentSpec, group: WorkerGroupSpec) -> PdRole | None:
    if spec.disaggregation is None or group.role is None:
        return None
    if group.role == "decode":
        return PdRole("decode")
    decode = next((g for g in spec.worker_groups if g.role == "decode"), None)
    version = spec.engine.sglang_version
    if decode is None or not version or parse_version(version) > PD_DECODE_SHAPE_UNTIL:
        return PdRole("prefill")
    return PdRole("prefill", (decode.parallelism.tp, sglang_dp_size(decode)))


# -- rules, per group ----------------------------------------------------------------------------------------------

# What a group can set, as CEL paths: parallelism always (a group states it), the whole objects when the group has
# them, the engine's fields one by one.
_GROUP_OBJECTS = ("parallelism", "resources", "template", "updateStrategy")
_GROUP_ENGINE = ("args", "env", "maxRunningRequests", "memFractionStatic")
_SELF_REF = re.compile(r"\bself\.([A-Za-z]+)(?:\.([A-Za-z]+))?")
_FLEET_ONLY = frozenset({"spec.autoscaling.maxGPUs"})
"""Rules of the whole fleet that read parallelism: the GPU budget is checked over all groups (`FLEET_RULES`)."""


def _reads(expression: str) -> tuple[tuple[str, ...], bool]:
    """The paths a group can set that `expression` (over `self` = .spec) reads, and whether it reads anything else
    of the spec (the fleet's image or version, the model, the router: what only the top level has)."""
    paths: set[str] = set()
    other = False
    for top, sub in _SELF_REF.findall(expression):
        if top in _GROUP_OBJECTS:
            paths.add(top)
        elif top == "engine" and sub in _GROUP_ENGINE:
            paths.add(f"engine.{sub}")
        else:
            other = True
    return tuple(sorted(paths)), other


def _sets(group: WorkerGroupSpec, path: str) -> bool:
    if path == "parallelism":
        return True
    if path.startswith("engine."):
        return group.engine is not None and getattr(group.engine, _snake(path.split(".")[1])) is not None
    return getattr(group, _snake(path)) is not None


def _sets_cel(group: str, path: str) -> str:
    return f"has({group}.engine) && has({group}.{path})" if path.startswith("engine.") else f"has({group}.{path})"


def _item_path(field: str) -> str | None:
    """`field` inside one worker group (`.engine.args` for spec.engine.args), None where a group has no such field."""
    rest = field.removeprefix("spec.")
    top, _, sub = rest.partition(".")
    return f".{rest}" if top in _GROUP_OBJECTS or (top == "engine" and sub.split(".")[0] in _GROUP_ENGINE) else None


def _on_item(rule: Rule) -> bool:
    """Whether the rule can be checked on a group alone: it reads nothing only the top level has, and points at a
    field a group has. Then, for a group that sets every field the rule reads, the API server checks it on the
    `workerGroups` item and names `spec.workerGroups[i].<field>` itself, as `validate` does."""
    _, other = _reads(rule.cel)
    return not other and _item_path(rule.field) is not None


def _checks(rule: Rule, on_item: bool, group: WorkerGroupSpec) -> bool:
    """Whether the `on_item` variant of `rule` checks `group`. A group that sets none of the fields the rule reads
    runs the top level's values, which the top level's own rule checks already. One that sets all of them, where
    the rule can be checked on the group alone, is the item variant's; every other mix (some fields the group's,
    some the top level's, or a rule that reads the fleet's version) is the fleet-level variant's."""
    paths, _ = _reads(rule.cel)
    own = {path for path in paths if _sets(group, path)}
    if not own:
        return False
    return (own == set(paths) and _on_item(rule)) == on_item


def group_message(name: str, message: str) -> str:
    """A fleet-level group rule's message: the API server cannot name the group's index there (a rule that reads
    the top level's fields sits on the spec, and a fieldPath takes no index), so both name the group."""
    return f"worker group '{name}': {message}"


@dataclass(frozen=True)
class GroupRule(Rule):
    """A rule of the top level, checked for the worker groups (`holds` over the whole spec), in one of two places.

    `on_item`: in the CRD on the `workerGroups` items, for groups that set every field the rule reads; the API
    server names `spec.workerGroups[i]` + the rule's field, and so does `validate`. Otherwise on the spec, over
    `self.workerGroups`, for groups whose effective values mix their own fields with the top level's (or that the
    fleet's version decides): the field is `spec.workerGroups` and the message names the group (`validations`)."""

    base: Rule | None = None
    on_item: bool = False

    @property
    def field_path(self) -> str:
        """The CEL `fieldPath`: relative to the item for an item rule, else to `.spec`."""
        assert self.base is not None
        return (_item_path(self.base.field) or "") if self.on_item else super().field_path

    def failures(self, spec: SGLangDeploymentSpec) -> list[FieldError]:
        """The groups this variant checks that fail, named as the API server names them."""
        base = self.base
        assert base is not None
        failing = [
            (index, group)
            for index, group in enumerate(spec.worker_groups)
            if _checks(base, self.on_item, group) and not base.holds(group_spec(spec, group))
        ]
        if self.on_item:
            return [
                FieldError(f"spec.workerGroups[{index}]{_item_path(base.field)}", base.message) for index, _ in failing
            ]
        # One error, naming the first group that fails, as the CRD's one entry over the groups does.
        return [FieldError(self.field, group_message(group.name, base.message)) for _, group in failing[:1]]

    def validations(self) -> list[dict[str, str]]:
        """The CRD's `x-kubernetes-validations` entry. An item rule sits on the items. A fleet-level one is one entry
        over `self.workerGroups.all(...)`, whose `messageExpression` names the first group that fails (the rule once
        more, evaluated only when the rule failed): written once, not once per possible group index, so
        the CRD stays within what client-side apply can store (docs/decisions.md, "The CRD's size")."""
        if self.on_item:
            return [{"rule": self.cel, "message": self.message, "fieldPath": self.field_path}]
        assert self.base is not None
        group_all = self.cel.removeprefix(_ALL_GROUPS).removesuffix(")")
        # map, then filter the names: the API server's cost estimate refuses a filter over the rule itself (>100x).
        # A group's name is never '' (minLength 1).
        failing = f"self.workerGroups.map({_G}, ({group_all}) ? '' : {_G}.name).filter(n, n != '')[0]"
        return [{
            "rule": self.cel,
            "message": self.message,
            "fieldPath": self.field_path,
            "messageExpression": f"\"worker group '\" + {failing} + \"': \" + {json.dumps(self.base.message)}",
        }]  # fmt: skip


def group_variants(rule: Rule) -> list[GroupRule]:
    """`rule` for the worker groups: the item variant and the fleet-level variant, each where some group could need
    it; none for a rule that reads nothing a group sets."""
    paths, _ = _reads(rule.cel)
    if not paths or rule.field in _FLEET_ONLY:
        return []

    def holds(on_item: bool) -> SpecCheck:
        return lambda s: all(rule.holds(group_spec(s, g)) for g in s.worker_groups if _checks(rule, on_item, g))

    variants = []
    if _on_item(rule):
        guard = " && ".join(_sets_cel("self", path) for path in paths if path != "parallelism")
        cel = f"!({guard}) || ({rule.cel})" if guard else rule.cel
        item = f"spec.workerGroups[]{_item_path(rule.field)}"
        variants.append(GroupRule(item, rule.message, cel, holds(True), base=rule, on_item=True))
    mixed = _mixed_cel(rule, paths)
    if mixed is not None:
        cel = f"{_ALL_GROUPS}{mixed})"
        variants.append(GroupRule("spec.workerGroups", f"a worker group: {rule.message}", cel, holds(False), base=rule))
    return variants


_G = "wg"
"""The group's variable in a fleet-level rule: a name no rule uses for its own loops."""
_ALL_GROUPS = f"!has(self.workerGroups) || self.workerGroups.all({_G}, "


def _mixed_cel(rule: Rule, paths: tuple[str, ...]) -> str | None:
    """The rule over one group `g` for the mixes of the group's and the top level's fields that the item variant
    leaves out, as nested conditionals over booleans (so the two branches always have one type); `true` where the
    group sets none of them (the top level's own rule checks exactly that) or all of them on an item. None when no
    mix is left."""
    whole_on_item = _on_item(rule)
    left = False

    def choose(expr: str, pending: list[str], own: int) -> str:
        nonlocal left
        if not pending:
            if own == 0 or (whole_on_item and own == len(paths)):
                return "true"
            left = True
            return expr
        path, rest = pending[0], pending[1:]
        mine = re.sub(rf"\bself\.{re.escape(path)}\b", f"{_G}.{path}", expr)
        if path == "parallelism":
            return choose(mine, rest, own + 1)
        return f"(({_sets_cel(_G, path)}) ? ({choose(mine, rest, own + 1)}) : ({choose(expr, rest, own)}))"

    expression = choose(rule.cel, list(paths), 0)
    return expression if left else None


def _snake(camel: str) -> str:
    return re.sub(r"(?<!^)([A-Z])", lambda m: "_" + m.group(1).lower(), camel)


_GROUPS = "!has(self.workerGroups) || "


def _total_replicas(spec: SGLangDeploymentSpec) -> int:
    return sum(spec.replicas if g.replicas is None else g.replicas for g in spec.worker_groups)


FLEET_RULES: tuple[Rule, ...] = (
    Rule(
        field="spec.workerGroups",
        message="group names must be unique: pod names and labels carry them; rename one of the groups.",
        cel=_GROUPS + "self.workerGroups.all(g, self.workerGroups.exists_one(h, h.name == g.name))",
        holds=lambda s: len({g.name for g in s.worker_groups}) == len(s.worker_groups),
    ),
    Rule(
        field="spec.workerGroups",
        message="at most one group may leave out replicas: that group follows spec.replicas (kubectl scale); give "
        "the others a replica count.",
        cel=_GROUPS + "size(self.workerGroups.filter(g, !has(g.replicas))) <= 1",
        holds=lambda s: sum(g.replicas is None for g in s.worker_groups) <= 1,
    ),
    Rule(
        field="spec.workerGroups",
        message=f"a group's replicas must be at least 0 and at most {MAX_REPLICAS}, and the groups' together at "
        f"most {MAX_REPLICAS}: lower the counts.",
        cel=_GROUPS + f"self.workerGroups.all(g, !has(g.replicas) || (g.replicas >= 0 && g.replicas <= "
        f"{MAX_REPLICAS})) && self.workerGroups.map(g, has(g.replicas) ? g.replicas : self.replicas).sum() <= "
        f"{MAX_REPLICAS}",
        holds=lambda s: (
            all(g.replicas is None or 0 <= g.replicas <= MAX_REPLICAS for g in s.worker_groups)
            and _total_replicas(s) <= MAX_REPLICAS
        ),
    ),
    Rule(
        field="spec.workerGroups",
        message=f"a group's autoscaling bounds must satisfy 0 <= minReplicas <= maxReplicas <= {MAX_REPLICAS}; fix "
        "the group's bounds.",
        cel=_GROUPS + "self.workerGroups.all(g, !has(g.autoscaling) || (g.autoscaling.minReplicas >= 0 && "
        f"g.autoscaling.minReplicas <= g.autoscaling.maxReplicas && g.autoscaling.maxReplicas <= {MAX_REPLICAS}))",
        holds=lambda s: all(
            0 <= g.autoscaling.min_replicas <= g.autoscaling.max_replicas <= MAX_REPLICAS for g in s.worker_groups
        ),
    ),
    Rule(
        field="spec.autoscaling.maxGPUs",
        message="the GPU budget cannot hold every group's minReplicas (sum of minReplicas x tp x dp over the "
        "groups); raise maxGPUs or lower the groups' minReplicas.",
        cel="!has(self.autoscaling.maxGPUs) || !has(self.workerGroups) || size(self.workerGroups) == 0 || "
        "self.workerGroups.map(g, g.parallelism.tp * g.parallelism.dp * (has(g.autoscaling) ? "
        "g.autoscaling.minReplicas : 0)).sum() <= self.autoscaling.maxGPUs",
        holds=lambda s: (
            s.autoscaling.max_gpus is None
            or sum(g.parallelism.tp * g.parallelism.dp * g.autoscaling.min_replicas for g in s.worker_groups)
            <= s.autoscaling.max_gpus
        ),
    ),
    Rule(
        field="spec.workerGroups",
        message=f"the groups' autoscaling maxReplicas may add up to {MAX_REPLICAS} at most, the replicas one fleet may "
        "run (the autoscaler splits the fleet's count across its groups); lower the groups' maxReplicas.",
        cel=_GROUPS + "self.workerGroups.map(g, has(g.autoscaling) ? g.autoscaling.maxReplicas : "
        f"{WorkerGroupSpec.model_fields['autoscaling'].get_default(call_default_factory=True).max_replicas}).sum() "
        f"<= {MAX_REPLICAS}",
        holds=lambda s: sum(g.autoscaling.max_replicas for g in s.worker_groups) <= MAX_REPLICAS,
    ),
)
