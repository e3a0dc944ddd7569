"""The pod policy the operator enforces on every pod it renders, whatever the CR's template says.

A tenant who may create an SGLangDeployment must not get, through the operator's account, a pod their own RBAC and
the namespace's Pod Security admission would refuse. So the last step of rendering a pod is `harden_pod_spec`,
applied to the *final* spec (after the template's merge, so sidecars the template adds are covered too):

- Pod Security "baseline" always: no privileged containers, no host namespaces (hostNetwork/hostPID/hostIPC set
  explicitly false), no host ports, no added capabilities, seccomp `RuntimeDefault` (never `Unconfined`), no
  procMount, sysctls, SELinux or AppArmor overrides, no Windows host-process.
- From "restricted", what any image allows: `allowPrivilegeEscalation: false` and `capabilities: {drop: [ALL]}` on
  every container. Plain GPU serving needs no Linux capability: the GPUs reach the container as device nodes the
  device plugin / container runtime grant through the device cgroup, and NCCL and SGLang's custom all-reduce over
  NVLink/PCIe/TCP use CUDA IPC handles and sockets. The capabilities a container gets by default (CHOWN,
  DAC_OVERRIDE, SETUID, NET_RAW, ...) serve none of that. Paths that import another process's file descriptor
  with `pidfd_getfd` (some cuMem/NVLS and FlashInfer MNNVL exchanges) need SYS_PTRACE, which is not a default
  capability either, so dropping ALL takes nothing away from them. The one exception: a prefill/decode worker whose
  KV moves over RDMA gets IPC_LOCK (to pin memory for the NIC) and one device of the RDMA device plugin's resource,
  where the admin's settings name that resource (`--rdma-resource`); never `privileged`, host network or `/dev`.
  IPC_LOCK is beyond Pod Security "baseline": such a namespace needs a policy that admits it.
- No service-account token (`automountServiceAccountToken: false`): SGLang and smg never call the Kubernetes API,
  and a mounted token would hand the namespace's default account to every process in the pod.
- No Service environment variables (`enableServiceLinks: false`): hundreds of fleets in one namespace would give
  every new pod thousands of variables, and they leak the namespace's Service layout.

`runAsNonRoot` is not forced on workers: the lmsysorg/sglang images run as root (HF caches under /root/.cache) and
would not start. Without CAP_DAC_OVERRIDE that root still cannot write files owned by other users, and with
`privileged: false`, no capabilities and no privilege escalation it is an unprivileged process in its namespaces.
The router image (smg, a static Rust binary with a Python launcher) runs as a non-root user and meets
"restricted" in full: `router_pod_security_context` / `router_container_security_context`.
"""

from collections.abc import Mapping
from typing import Any

SECCOMP_RUNTIME_DEFAULT: dict[str, str] = {"type": "RuntimeDefault"}
NON_ROOT_ID = 65532
"""The conventional "nonroot" user and group of distroless images; any non-zero id meets "restricted"."""

# Keys of a securityContext kept from the rendered pod: identities and filesystem options. Everything else
# (sysctls, seLinuxOptions, appArmorProfile, seccompProfile, procMount, windowsOptions, privileged, capabilities,
# allowPrivilegeEscalation) is dropped, then the operator's own values are set.
_POD_CONTEXT_KEYS = frozenset(
    {"runAsUser", "runAsGroup", "runAsNonRoot", "fsGroup", "fsGroupChangePolicy", "supplementalGroups"}
)
_CONTAINER_CONTEXT_KEYS = frozenset({"runAsUser", "runAsGroup", "runAsNonRoot", "readOnlyRootFilesystem"})
_CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")


def hardened_container_security_context(
    existing: dict[str, Any] | None = None, added: tuple[str, ...] = ()
) -> dict[str, Any]:
    """A container's securityContext: identities and a read-only root kept, privilege always removed; `added`: the
    capabilities the operator itself grants (never the template's)."""
    kept = {key: value for key, value in (existing or {}).items() if key in _CONTAINER_CONTEXT_KEYS}
    capabilities: dict[str, list[str]] = {"drop": ["ALL"], **({"add": list(added)} if added else {})}
    return {**kept, "allowPrivilegeEscalation": False, "privileged": False, "capabilities": capabilities}


def _harden_container(container: dict[str, Any], added: tuple[str, ...] = ()) -> dict[str, Any]:
    context = hardened_container_security_context(container.get("securityContext"), added)
    hardened = {**container, "securityContext": context}
    if "ports" in container:
        # A host port is a host-network listener in all but name (baseline forbids it).
        hardened["ports"] = [
            {key: value for key, value in port.items() if key not in ("hostPort", "hostIP")}
            for port in container["ports"]
        ]
    return hardened


def harden_pod_spec(pod_spec: dict[str, Any], granted: Mapping[str, tuple[str, ...]] | None = None) -> dict[str, Any]:
    """The pod spec with the operator's pod policy applied (a new dict; the argument is not changed). `granted`:
    container name -> the capabilities the operator grants that container (RDMA's IPC_LOCK), applied to the
    regular containers only.

    Idempotent, and the last step of every pod the operator renders: call it on the merged spec, so neither the
    template nor a future field added to the render can reintroduce what it removes.
    """
    granted = granted or {}
    hardened = dict(pod_spec)
    context = {key: value for key, value in (pod_spec.get("securityContext") or {}).items() if key in _POD_CONTEXT_KEYS}
    hardened["securityContext"] = {**context, "seccompProfile": dict(SECCOMP_RUNTIME_DEFAULT)}
    hardened.update(
        hostNetwork=False, hostPID=False, hostIPC=False, automountServiceAccountToken=False, enableServiceLinks=False
    )
    for key in _CONTAINER_LISTS:
        if key in pod_spec:
            hardened[key] = [
                _harden_container(c, granted.get(c.get("name", ""), ()) if key == "containers" else ())
                for c in pod_spec[key]
            ]
    return hardened


def router_pod_security_context() -> dict[str, Any]:
    """Pod Security "restricted" for the router: a fixed non-root identity (smg needs no particular user)."""
    return {
        "runAsNonRoot": True,
        "runAsUser": NON_ROOT_ID,
        "runAsGroup": NON_ROOT_ID,
        "seccompProfile": dict(SECCOMP_RUNTIME_DEFAULT),
    }


def router_container_security_context() -> dict[str, Any]:
    """The router container: read-only root (smg logs to stdout; /tmp is an emptyDir), no privilege."""
    return hardened_container_security_context({"readOnlyRootFilesystem": True, "runAsNonRoot": True})
