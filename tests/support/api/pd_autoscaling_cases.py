"""The prefill/decode autoscaler's rules: (field, message fragment, failing patch, passing patch), one case per rule
of `autoscaling_pd_rules`. `test_validation.CASES` includes it, so `validate`, the per-group derivation and the real
API server (`e2e/tests/test_crd_admission.py`) all check these, with the same field and message."""

from __future__ import annotations

from typing import Any

from tests.support.api.pd_cases import pd


def _scaling(**autoscaling: Any) -> dict[str, Any]:
    return {"enabled": True, **autoscaling}


def _targets(**targets: Any) -> dict[str, Any]:
    return _scaling(targets=targets)


PD_AUTOSCALING_CASES: list[tuple[str, str, dict[str, Any], dict[str, Any]]] = [
    ("spec.autoscaling.targets.prefillTokensPerSecondPerGPU", "must be at least 1",
     pd(autoscaling=_targets(prefillTokensPerSecondPerGPU=0)),
     pd(autoscaling=_targets(prefillTokensPerSecondPerGPU=12000))),
    ("spec.autoscaling.targets.decodeTokenUsage", "must be at least 0.01",
     pd(autoscaling=_targets(decodeTokenUsage=1.5)), pd(autoscaling=_targets(decodeTokenUsage=0.9))),
    ("spec.autoscaling.targets.interTokenLatencySeconds", "must be at least 0.001",
     pd(autoscaling=_targets(interTokenLatencySeconds=0.0)),
     pd(autoscaling=_targets(interTokenLatencySeconds=0.05))),
    ("spec.autoscaling.targets.timeToFirstTokenSeconds", "must be at least 0.001",
     pd(autoscaling=_targets(timeToFirstTokenSeconds=900.0)),
     pd(autoscaling=_targets(timeToFirstTokenSeconds=0.5))),
    # Issue 37: a target of 5e-324 passed "> 0", and a reading divided by it is infinite; the floor refuses it.
    ("spec.autoscaling.targets.decodeTokenUsage", "must be at least 0.01",
     pd(autoscaling=_targets(decodeTokenUsage=5e-324)), pd(autoscaling=_targets(decodeTokenUsage=0.01))),
    ("spec.autoscaling.targets.interTokenLatencySeconds", "must be at least 0.001",
     pd(autoscaling=_targets(interTokenLatencySeconds=5e-324)),
     pd(autoscaling=_targets(interTokenLatencySeconds=0.001))),
    ("spec.autoscaling.targets.timeToFirstTokenSeconds", "must be at least 0.001",
     pd(autoscaling=_targets(timeToFirstTokenSeconds=0.0005)),
     pd(autoscaling=_targets(timeToFirstTokenSeconds=0.001))),
    ("spec.autoscaling.prefillGPUShare.min", "must be at least 0 and at most 1",
     pd(autoscaling=_scaling(prefillGPUShare={"min": -0.1})), pd(autoscaling=_scaling(prefillGPUShare={"min": 0.2}))),
    ("spec.autoscaling.prefillGPUShare.max", "must be at least 0 and at most 1",
     pd(autoscaling=_scaling(prefillGPUShare={"max": 1.5})), pd(autoscaling=_scaling(prefillGPUShare={"max": 0.6}))),
    ("spec.autoscaling.prefillGPUShare", "min cannot be above max",
     pd(autoscaling=_scaling(prefillGPUShare={"min": 0.7, "max": 0.5})),
     pd(autoscaling=_scaling(prefillGPUShare={"min": 0.3, "max": 0.5}))),
    ("spec.autoscaling.prefillGPUShare", "applies only to a disaggregated fleet",
     {"autoscaling": _scaling(prefillGPUShare={"max": 0.5})}, pd(autoscaling=_scaling(prefillGPUShare={"max": 0.5}))),
    ("spec.autoscaling.targets.prefillTokensPerSecondPerGPU", "applies only to a disaggregated fleet",
     {"autoscaling": _targets(prefillTokensPerSecondPerGPU=9000)},
     pd(autoscaling=_targets(prefillTokensPerSecondPerGPU=9000))),
    ("spec.autoscaling.targets.interTokenLatencySeconds", "applies only to a disaggregated fleet",
     {"autoscaling": _targets(interTokenLatencySeconds=0.05)},
     pd(autoscaling=_targets(interTokenLatencySeconds=0.05))),
    ("spec.autoscaling.targets.timeToFirstTokenSeconds", "applies only to a disaggregated fleet",
     {"autoscaling": _targets(timeToFirstTokenSeconds=0.5)},
     pd(autoscaling=_targets(timeToFirstTokenSeconds=0.5))),
]  # fmt: skip
