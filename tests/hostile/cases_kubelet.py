"""Hostile specs, round two (issue 29):
strings the kubelet expands ($(VAR)), reserved env names, monitoring bounds, releases.
"""

from __future__ import annotations

from .model import Hostile

# fmt: off
CASES: list[Hostile] = [
]
# fmt: on
