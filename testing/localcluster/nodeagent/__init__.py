"""A kubelet stand-in for the local cluster: GPU nodes whose pods run as local processes.

The real control plane (apiserver, scheduler, controller manager) needs nodes that register, heartbeat and run
what is bound to them. This package does that without containers: each pod gets its own 127.x.y.z address,
each container becomes a process group (in its own mount namespace, so the pod's volumes and service account
token appear at their usual paths), probes run against the pod IP, and the status is reported the way a
kubelet reports it. Images map to local programs (`images.py`): SGLang runs the simulator, the router image
runs the real `smg`, the operator image runs `sglang-operator`.

Entry point: `python -m localcluster.nodeagent --kubeconfig PATH --state-dir DIR`; fault injection for tests:
`localcluster.nodeagent.faults`.
"""
