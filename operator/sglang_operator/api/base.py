"""The one base class of every spec model: frozen, camelCase on the wire, tolerant of unknown fields.

Unknown fields are ignored rather than fatal so that an older operator keeps working on a CR written for a newer one.
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
    )
