"""A validation rule and the error it reports: the shape every rule module shares (see `validation`)."""

from collections.abc import Callable
from dataclasses import dataclass

from .spec import SGLangDeploymentSpec

SpecCheck = Callable[[SGLangDeploymentSpec], bool]


@dataclass(frozen=True)
class FieldError:
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


@dataclass(frozen=True)
class Rule:
    """`holds(spec)` and `cel` must agree; `field` is the dotted path the error points at."""

    field: str
    message: str
    cel: str
    holds: SpecCheck

    @property
    def field_path(self) -> str:
        """The CEL `fieldPath`, relative to `.spec` where the rule is attached."""
        return self.field.removeprefix("spec")
