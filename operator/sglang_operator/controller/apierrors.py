"""What the API server said when it refused a write, in words safe for status and events.

A refused child (422 Invalid) is only actionable with the field the API server names: "422 Unprocessable Entity"
alone leaves the CR's author guessing which of the pod's fields is wrong. The API's `Status` carries that in
`details.causes` (`field`, `reason`, `message`). The message often quotes the rejected value (`Invalid value:
"x": ...`), which a tenant wrote and which can be long; the value is left out, the rule that refused it is kept.
Everything is bounded: at most `MAX_CAUSES` causes, each field and detail cut to `MAX_CHARS`.
"""

import json
import re
from dataclasses import dataclass
from typing import Any, Final

MAX_CAUSES: Final = 3
MAX_CHARS: Final = 200
MAX_BODY_CHARS: Final = 64 * 1024
"""A Status longer than this is not read: no refusal the API server writes comes near it."""

# `Invalid value: "...": why`, `Unsupported value: 3: supported values: ...`, `Duplicate value: "x"`: the quoted or
# bare value after the kind of problem, up to the next ": " (a JSON string may hold escaped quotes).
_VALUE = re.compile(r'^(?P<kind>[A-Z][a-z]+ value): (?:"(?:[^"\\]|\\.)*"|[^:]*?)(?:: (?P<why>.*))?$', re.S)


@dataclass(frozen=True)
class Cause:
    field: str
    reason: str
    detail: str

    def __str__(self) -> str:
        detail = f": {self.detail}" if self.detail else ""
        return f"{self.field or '(object)'}{detail} ({self.reason})" if self.reason else f"{self.field}{detail}"


def _cut(text: str) -> str:
    return text if len(text) <= MAX_CHARS else text[: MAX_CHARS - 3] + "..."


def without_value(message: str) -> str:
    """The cause's message without the value it quotes: `Invalid value: "..": must not contain '..'` ->
    `Invalid value: must not contain '..'`."""
    match = _VALUE.match(message)
    if match is None:
        return message
    why = match.group("why")
    return f"{match.group('kind')}: {why}" if why else match.group("kind")


def _details(body: Any) -> dict[str, Any]:
    """`details` of an API `Status` body (JSON text), or {} when it is not one."""
    if not isinstance(body, str | bytes) or len(body) > MAX_BODY_CHARS:
        return {}
    try:
        status = json.loads(body)
    except (ValueError, RecursionError):
        return {}
    details = status.get("details") if isinstance(status, dict) else None
    return details if isinstance(details, dict) else {}


def causes(body: Any) -> list[Cause]:
    """The causes in an API `Status` body (JSON text), or [] when it has none or is not a Status."""
    items = _details(body).get("causes")
    if not isinstance(items, list):
        return []
    found = []
    for item in items[:MAX_CAUSES]:
        if not isinstance(item, dict):
            continue
        field, reason, message = (item.get(key) for key in ("field", "reason", "message"))
        found.append(
            Cause(
                field=_cut(field) if isinstance(field, str) else "",
                reason=_cut(reason) if isinstance(reason, str) else "",
                detail=_cut(without_value(message)) if isinstance(message, str) else "",
            )
        )
    return found


def describe_causes(body: Any) -> str:
    """`: <kind> <name>: field: detail (reason); ...` for the causes in `body`, or "" when it names none. The kind
    and name say which child (one step writes many pods); they are the operator's, never the tenant's words."""
    found = causes(body)
    if not found:
        return ""
    details = _details(body)
    kind, name = details.get("kind"), details.get("name")
    which = f" {_cut(kind)} {_cut(name)}" if isinstance(kind, str) and isinstance(name, str) and kind and name else ""
    return f":{which}: " + "; ".join(str(cause) for cause in found)
