"""Worker groups: what each group of a fleet runs (its effective spec), and how every rule applies to each group.

A group states its parallelism; each other field it sets replaces the top level's whole (`resources`, `template`,
`updateStrategy`), and its `engine` replaces the top level's engine fields one by one (`args`, `env`,
`maxRunningRequests`, `memFractionStatic`). The model, image, version, router and autoscaler are the fleet's. A spec
without `workerGroups` is one group named "" whose effective spec is the spec itself, so every existing CR means
what it meant.

Every rule that reads a field a group can set is checked once per group against the group's effective spec: in
Python with `group_spec`, and as CEL by `group_cel`, which rewrites the rule over `self.workerGroups.all(g, ...)`
choosing, for each field the rule reads, the group's value where the group sets it and the top level's where not.
Pure.
"""

import re
from dataclasses import dataclass

from .limits import MAX_REPLICAS
from .rule import FieldError, Rule
from .spec import SGLangDeploymentSpec, WorkerGroupSpec

GROUP_ENGINE_FIELDS = ("max_running_requests", "mem_fraction_static", "args", "env")
_WHOLE_FIELDS = ("resources", "template", "update_strategy")
LABEL_VALUE_NONE = ""
"""The implicit group's name: its pods carry no group label and keep the names they had before groups existed."""


@dataclass(frozen=True)
class WorkerGroup:
    name: str
    spec: SGLangDeploymentSpec
    """The group's effective spec: the top level with the group's fields in place, `replicas` its own count."""
    elastic: bool
    """Sized by `spec.replicas` (kubectl scale, /scale) rather than a count of its own."""
    min_replicas: int
    max_replicas: int


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
                    g.autoscaling.max_replicas)
        for g in spec.worker_groups
    ]  # fmt: skip


# -- rules, per group ----------------------------------------------------------------------------------------------

# The CEL paths a group can set: parallelism always (a group states it), the whole objects when the group has them,
# the engine's fields one by one.
_GROUP_PATH = re.compile(
    r"self\.(parallelism|resources|template|updateStrategy|engine\.(?:args|env|maxRunningRequests|memFractionStatic))\b"
)
_FLEET_ONLY = frozenset({"spec.autoscaling.maxGPUs"})
"""Rules of the whole fleet that read parallelism: the GPU budget is checked over all groups (`FLEET_RULES`)."""


def group_cel(expression: str) -> str | None:
    """`expression` (over `self` = .spec) checked for every worker group, or None when it reads nothing a group
    sets. Each field the rule reads is the group's where the group sets it: nested conditionals over booleans, so
    the two branches always have one type. The branch where the group sets none of them is the top level's own
    rule, already checked: `true`, which keeps the rule's cost within the API server's budget."""
    paths = sorted(set(_GROUP_PATH.findall(expression)))
    if not paths:
        return None

    def choose(expr: str, pending: list[str]) -> str:
        if not pending:  # every field the top level's: the top level's own rule checks exactly this
            return "true" if expr == expression else expr
        path, rest = pending[0], pending[1:]
        own = expr.replace(f"self.{path}", f"g.{path}")
        if path == "parallelism":
            return choose(own, rest)
        present = f"has(g.engine) && has(g.{path})" if path.startswith("engine.") else f"has(g.{path})"
        return f"(({present}) ? ({choose(own, rest)}) : ({choose(expr, rest)}))"

    return f"!has(self.workerGroups) || self.workerGroups.all(g, {choose(expression, paths)})"


@dataclass(frozen=True)
class GroupRule(Rule):
    """A rule of the top level, checked for every worker group (`holds` over the whole spec)."""

    base: Rule | None = None

    def failures(self, spec: SGLangDeploymentSpec) -> list[FieldError]:
        """One error per failing group, at the group's own field where the group sets it."""
        assert self.base is not None
        errors = []
        for index, group in enumerate(spec.worker_groups):
            if not self.base.holds(group_spec(spec, group)):
                errors.append(FieldError(_group_field(self.base.field, group, index), self.base.message))
        return errors


def group_variant(rule: Rule) -> GroupRule | None:
    cel = group_cel(rule.cel)
    if cel is None or rule.field in _FLEET_ONLY:
        return None
    return GroupRule(
        field="spec.workerGroups",
        message=rule.message,
        cel=cel,
        holds=lambda s: all(rule.holds(group_spec(s, g)) for g in s.worker_groups),
        base=rule,
    )


def _group_field(field: str, group: WorkerGroupSpec, index: int) -> str:
    """The group's own field when the group sets what the rule points at, else the group itself."""
    rest = field.removeprefix("spec.")
    top = rest.split(".", 1)[0]
    sets = top == "parallelism" or (
        top in ("resources", "template", "updateStrategy") and getattr(group, _snake(top)) is not None
    )
    if top == "engine" and group.engine is not None:
        leaf = _snake(rest.split(".")[1]) if "." in rest else ""
        sets = leaf in GROUP_ENGINE_FIELDS and getattr(group.engine, leaf) is not None
    return f"spec.workerGroups[{index}].{rest}" if sets else f"spec.workerGroups[{index}]"


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
)
