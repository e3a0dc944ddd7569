"""Hostile specs, round two (issue 29):
Prometheus URLs and headers, and other specs that steer the operator's HTTP calls.
"""

from __future__ import annotations

from .model import Hostile

# fmt: off
CASES: list[Hostile] = [
]
# fmt: on
