"""A pure checker of the Kubernetes Pod Security Standards (v1.34), for tests.

`baseline(pod_spec, annotations)` and `restricted(...)` return the list of violations (empty: the pod passes), with
the rule names of https://kubernetes.io/docs/concepts/security/pod-security-standards/. Only what a pod spec can
say is checked; the rules are the admission controller's, not a re-interpretation.
"""

from collections.abc import Iterator, Mapping
from typing import Any

BASELINE_CAPABILITIES = frozenset(
    {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE", "SETFCAP",
     "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}
)  # fmt: skip
SAFE_SYSCTLS = frozenset(
    {"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
     "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
     "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
     "net.ipv4.tcp_keepalive_probes"}
)  # fmt: skip
SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"})
RESTRICTED_VOLUME_TYPES = frozenset(
    {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"}
)
APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"


def containers(pod_spec: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    for key in ("initContainers", "containers", "ephemeralContainers"):
        yield from pod_spec.get(key) or []


def _contexts(pod_spec: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(where, securityContext) for the pod and every container."""
    yield "pod", pod_spec.get("securityContext") or {}
    for container in containers(pod_spec):
        yield f"container {container.get('name')}", container.get("securityContext") or {}


def baseline(pod_spec: Mapping[str, Any], annotations: Mapping[str, str] | None = None) -> list[str]:
    found: list[str] = []
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if pod_spec.get(key):
            found.append(f"host namespaces: {key}")
    for where, context in _contexts(pod_spec):
        if (context.get("windowsOptions") or {}).get("hostProcess"):
            found.append(f"hostProcess: {where}")
        if context.get("privileged"):
            found.append(f"privileged: {where}")
        added = set((context.get("capabilities") or {}).get("add") or [])
        if added - BASELINE_CAPABILITIES:
            found.append(f"capabilities: {where} adds {sorted(added - BASELINE_CAPABILITIES)}")
        apparmor = (context.get("appArmorProfile") or {}).get("type")
        if apparmor not in (None, "RuntimeDefault", "Localhost"):
            found.append(f"AppArmor: {where} {apparmor}")
        selinux = context.get("seLinuxOptions") or {}
        if selinux.get("type", "") not in SELINUX_TYPES or selinux.get("user") or selinux.get("role"):
            found.append(f"SELinux: {where} {selinux}")
        if context.get("procMount") not in (None, "Default"):
            found.append(f"/proc mount type: {where}")
        seccomp = (context.get("seccompProfile") or {}).get("type")
        if seccomp not in (None, "RuntimeDefault", "Localhost"):
            found.append(f"seccomp: {where} {seccomp}")
    for sysctl in (pod_spec.get("securityContext") or {}).get("sysctls") or []:
        if sysctl.get("name") not in SAFE_SYSCTLS:
            found.append(f"sysctls: {sysctl.get('name')}")
    for volume in pod_spec.get("volumes") or []:
        if "hostPath" in volume:
            found.append(f"hostPath volumes: {volume['name']}")
    for container in containers(pod_spec):
        for port in container.get("ports") or []:
            if port.get("hostPort"):
                found.append(f"host ports: container {container.get('name')} {port['hostPort']}")
    for key, value in (annotations or {}).items():
        if key.startswith(APPARMOR_ANNOTATION) and value != "runtime/default" and not value.startswith("localhost/"):
            found.append(f"AppArmor: annotation {key}={value}")
    return found


def restricted(pod_spec: Mapping[str, Any], annotations: Mapping[str, str] | None = None) -> list[str]:
    found = baseline(pod_spec, annotations)
    pod_context = pod_spec.get("securityContext") or {}
    for volume in pod_spec.get("volumes") or []:
        kinds = set(volume) - {"name"}
        if not kinds <= RESTRICTED_VOLUME_TYPES:
            found.append(f"volume types: {volume['name']} {sorted(kinds)}")
    for container in containers(pod_spec):
        name, context = container.get("name"), container.get("securityContext") or {}
        if context.get("allowPrivilegeEscalation") is not False:
            found.append(f"privilege escalation: container {name}")
        if context.get("runAsNonRoot", pod_context.get("runAsNonRoot")) is not True:
            found.append(f"running as non-root: container {name}")
        if context.get("runAsUser", pod_context.get("runAsUser")) == 0:
            found.append(f"running as non-root user: container {name}")
        seccomp = (context.get("seccompProfile") or pod_context.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            found.append(f"seccomp: container {name} {seccomp}")
        capabilities = context.get("capabilities") or {}
        if "ALL" not in (capabilities.get("drop") or []):
            found.append(f"capabilities: container {name} does not drop ALL")
        if set(capabilities.get("add") or []) - {"NET_BIND_SERVICE"}:
            found.append(f"capabilities: container {name} adds {capabilities['add']}")
    if pod_context.get("runAsUser") == 0:
        found.append("running as non-root user: pod")
    return found
