"""The machinery every per-CR loop runs on: kopf wiring and the watch caches, the per-CR supervisor and the shared
work queue, leader election, the Kubernetes client with its keepalive, the one HTTP client, the one writer, events
and conditions. It knows nothing of what a loop decides: `controller/`, `autoscaling/` and `doctor/` sit above it and
hand it their loops; the entry point (`app.py`) composes them (docs/architecture.md).
"""
