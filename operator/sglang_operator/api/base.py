"""The one base class of every spec model: frozen, camelCase on the wire, tolerant of unknown fields.

Unknown fields are ignored rather than fatal so that an older operator keeps working on a CR written for a newer one;
`validation.unknown_fields` reports them for `sglang-operator validate`, as `kubectl --validate=strict` does.
Types are strict: nothing is coerced.
"""

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class SpecModel(BaseModel):
    model_config = ConfigDict(
        frozen=True,
        alias_generator=to_camel,
        populate_by_name=True,
        extra="ignore",
        use_enum_values=True,
        strict=True,  # `replicas: "3"` or `true` is an error, never coerced (the API server agrees)
        allow_inf_nan=False,  # YAML's .inf and .nan are no quantity of anything
    )
