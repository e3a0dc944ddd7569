"""The fleet doctor: the DP troubleshooting table (uneven load, slow replicas, cache-hit spread, slow starts, slow
scale-ups) and, in a disaggregated fleet, what breaks the KV handoff between prefill and decode (a bootstrap port
that does not answer, rendezvous failures, skew between the roles, a role without a ready replica, a stuck handoff),
as findings with evidence and a suggested action.

- `model.py`: what is observed (per-replica metrics, pods, routers, scale-ups, bootstrap probes) and what is found;
  plain values.
- `diagnose.py`: pure functions from observations and thresholds to candidate findings; `pd_diagnose.py` those of a
  disaggregated fleet.
- `hysteresis.py`: pure: previous `status.diagnostics` + candidates -> new `status.diagnostics`, what appeared and
  what cleared.
- `observe.py`: the only I/O of reading: Prometheus (the autoscaler's client and credentials), the routers' worker
  lists, the prefills' bootstrap servers; every call under one total deadline, an unexpected answer is "unknown".
  `pd_observe.py`: the pure part of what a disaggregated fleet adds (pod roles and launch flags, the PD PromQL).
- `doctor_pass.py`: one evaluation of one fleet for the operator (writes `status.diagnostics`, events, the metric);
  `report.py`: the same for `sglang-operator doctor` (prints).
- `loop.py`: one coroutine per fleet at `spec.diagnostics.intervalSeconds`, started by the supervisor.
"""
