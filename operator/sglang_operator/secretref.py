"""The text of a key of a Secret that a CR names, and the one message for every way it can be unusable.

The operator reads Secrets with its own rights, which may be wider than the tenant's: a CR's author may name a Secret
of the namespace that they cannot read themselves. What the operator reports (status, events, logs) must then tell
them nothing about that Secret beyond "unusable": not whether it exists, whether the operator may read it, whether it
has the key, nor any byte of the value (a decoding error quotes the offending byte and its offset). So a missing
Secret, a forbidden one, a missing key, a value that is not base64, not UTF-8 text, or empty, all give the same
text, from `unusable_credential`; the reconciler, the autoscaler and the doctor all use it.
"""

import base64
import binascii
from collections.abc import Mapping
from typing import Any


def unusable_credential(field: str, secret: str, key: str) -> str:
    """The one message for a credential that cannot be used, naming the CR's reference and what it must be."""
    return (
        f"{field}: the credential in Secret {secret}, key {key}, is unusable (it must exist in this namespace and "
        "hold UTF-8 text)"
    )


def secret_key_text(data: Mapping[str, Any] | None, key: str) -> str | None:
    """The decoded text of `key` in a Secret's `data` (base64 values, as the API serves them); None when the data
    or the key is missing, or the value is empty, not base64 or not UTF-8 text. Pure."""
    encoded = (data or {}).get(key)
    if not isinstance(encoded, str) or not encoded:
        return None
    try:
        text = base64.b64decode(encoded, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
    return text or None
