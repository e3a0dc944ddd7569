"""Hostile specs, round two (issue 29):
pod fields the API server refuses (init container names, paths, annotations, envFrom, sidecar accelerators).
"""

from __future__ import annotations

from .model import Hostile

# fmt: off
CASES: list[Hostile] = [
]
# fmt: on
