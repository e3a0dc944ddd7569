"""The fleet doctor: the DP troubleshooting table (uneven load, slow replicas, cache-hit spread, slow starts, slow
scale-ups) as findings with evidence and a suggested action.

- `model.py`: what is observed (per-replica metrics, pods, routers, scale-ups) and what is found; plain values.
- `diagnose.py`: pure functions from observations and thresholds to candidate findings.
- `hysteresis.py`: pure: previous `status.diagnostics` + candidates -> new `status.diagnostics`, what appeared and
  what cleared.
- `observe.py`: the only I/O of reading: Prometheus (the autoscaler's client and credentials), the routers' worker
  lists; every call under one total deadline, an unexpected answer is "unknown".
- `run.py`: one evaluation of one fleet for the operator (writes `status.diagnostics`, events, the metric) and for
  `sglang-operator doctor` (prints).
- `daemon.py`: the kopf wiring, one coroutine per fleet at `spec.diagnostics.intervalSeconds`.
"""
