"""The one base class of every spec model: frozen, camelCase on the wire, tolerant of unknown fields.

Unknown fields are ignored rather than fatal so that an older operator keeps working on a CR written for a newer one;
`validation.unknown_fields` reports them for `sglang-operator validate`, as `kubectl --validate=strict` does.
Types are strict: nothing is coerced.

Beside it, the character classes the string patterns share (`CONTROL`), written so that every regex engine that
reads them agrees.
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


# -- characters a string may hold, as regex classes every engine reads alike -------------------------------------------

CONTROL = r"\x00-\x1f\x7f"
"""The C0 control characters and DEL, as the inside of a regex character class: what no value that reaches a
command line, a path, a URL or a header may hold. Spelled out code point by code point, so that the API server
(RE2, for the CRD's `pattern` and CEL's `matches`), pydantic (Rust's regex) and Python's `re` read one set, which
`\\s` and `\\S` are not: RE2's `\\s` is ASCII `[\\t\\n\\f\\r ]`, the others' is Unicode (U+00A0, U+2028 and `\\v`
were refused by `validate` and admitted by the API server)."""
SPACE_OR_CONTROL = r"\x00-\x20\x7f"
"""`CONTROL` and the space (0x20): the inside of the class a single command-line word, an image or a URL may not
hold."""
NO_SPACE = rf"^[^{SPACE_OR_CONTROL}]+$"
"""One word: no space, no control character (an image reference, a value after a flag)."""
NO_NUL = r"^[^\x00]*$"
"""What exec passes: any string without NUL. The kubelet hands a container's command and env to the runtime as C
strings, so a NUL fails the container at every start (`exec: invalid argument`), while Kubernetes' own validation
checks nothing in an env value or an argument. Tabs, newlines and the other control characters pass verbatim."""
