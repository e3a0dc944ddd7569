"""Rules that keep a CR's placement fields (tolerations, affinity, topology spread) in the forms pods accept.

Kubernetes' pod validation (`pkg/apis/core/validation`) refuses a toleration with `Exists` and a value, one without a
key unless `Exists`, `tolerationSeconds` without `NoExecute`, and a selector requirement with the wrong number of
values for its operator. The CRD's types cannot say these (two fields at once), so each is a `Rule` with its CEL
twin: `validate` and the API server refuse the spec when it is written, naming the field, instead of every pod of
the fleet at every pass with a 422.
"""

from .pod_rules import TEMPLATE_CEL as _T
from .podtemplate import PodSpecOverrides, Toleration
from .podtypes import LabelRequirement, LabelSelector, PodAffinity, PodAffinityTerm, Requirement
from .rule import Rule
from .spec import SGLangDeploymentSpec

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


PLACEMENT_RULES: tuple[Rule, ...] = (
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
)
