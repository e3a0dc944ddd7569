"""Volume contents, mount binds, /etc/hosts, IP allocation and node objects."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from localcluster.nodeagent.envvars import PodFacts
from localcluster.nodeagent.ipam import Allocations, block_candidates, network, next_ip, pick_gpus
from localcluster.nodeagent.layout import Layout
from localcluster.nodeagent.nodes import HostFacts, NodeShape, allocatable, micro_time, node_labels, node_status
from localcluster.nodeagent.process import command_line, mount_script
from localcluster.nodeagent.volumes import (
    Bind,
    Sources,
    VolumeError,
    container_binds,
    etc_hosts,
    plan_volume,
    token_requests,
)
from localcluster.paths import MARKER_ENV

FACTS = PodFacts(pod_ip="127.1.0.9", host_ip="127.0.0.1", node_allocatable={})
KUBE_API_ACCESS = {
    "name": "kube-api-access-abcde",
    "projected": {
        "defaultMode": 420,
        "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {
                "downwardAPI": {
                    "items": [
                        {"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}
                    ]
                }
            },
        ],
    },
}


def pod(volumes: list[dict[str, Any]], mounts: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": "w-0", "namespace": "ns", "uid": "u-1", "labels": {"b": "2", "a": "1"}},
        "spec": {"volumes": volumes, "containers": [{"name": "c", "volumeMounts": mounts or []}], "subdomain": "sub"},
    }


def test_service_account_volume() -> None:
    p = pod([KUBE_API_ACCESS])
    assert token_requests(p) == {("", 3607)}
    sources = Sources(config_maps={"kube-root-ca.crt": {"ca.crt": b"PEM"}}, tokens={("", 3607): "jwt"})
    plan = plan_volume(p, KUBE_API_ACCESS, FACTS, sources)
    files = {f.path: (f.content, f.mode) for f in plan.files}
    assert files == {"token": (b"jwt", 0o644), "ca.crt": (b"PEM", 0o644), "namespace": (b"ns", 0o644)}


def test_secret_volume_items_and_missing() -> None:
    volume = {
        "name": "s",
        "secret": {"secretName": "api", "defaultMode": 0o400, "items": [{"key": "k", "path": "dir/key"}]},
    }
    plan = plan_volume(pod([volume]), volume, FACTS, Sources(secrets={"api": {"k": b"v", "other": b"x"}}))
    assert [(f.path, f.content, f.mode) for f in plan.files] == [("dir/key", b"v", 0o400)]
    with pytest.raises(VolumeError, match='secret "api" not found'):
        plan_volume(pod([volume]), volume, FACTS, Sources(secrets={"api": None}))
    volume["secret"]["optional"] = True
    assert plan_volume(pod([volume]), volume, FACTS, Sources(secrets={"api": None})).files == ()


def test_downward_labels_format() -> None:
    volume = {"name": "d", "downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}}
    plan = plan_volume(pod([volume]), volume, FACTS, Sources())
    assert plan.files[0].content == b'a="1"\nb="2"'


def test_item_paths_cannot_escape() -> None:
    volume = {"name": "s", "secret": {"secretName": "api", "items": [{"key": "k", "path": "../../etc/passwd"}]}}
    with pytest.raises(VolumeError, match="invalid volume item path"):
        plan_volume(pod([volume]), volume, FACTS, Sources(secrets={"api": {"k": b"v"}}))


def test_unsupported_volume() -> None:
    volume = {"name": "data", "persistentVolumeClaim": {"claimName": "x"}}
    with pytest.raises(VolumeError, match="persistentVolumeClaim volumes are not supported"):
        plan_volume(pod([volume]), volume, FACTS, Sources())


def test_empty_dir_kinds() -> None:
    assert plan_volume(pod([]), {"name": "shm", "emptyDir": {"medium": "Memory"}}, FACTS, Sources()).kind == "memory"
    assert plan_volume(pod([]), {"name": "tmp", "emptyDir": {}}, FACTS, Sources()).kind == "dir"


def test_binds_order_read_only_and_subpath() -> None:
    volumes = [
        KUBE_API_ACCESS,
        {"name": "shm", "emptyDir": {"medium": "Memory"}},
        {"name": "cfg", "configMap": {"name": "c"}},
    ]
    mounts = [
        {"name": "cfg", "mountPath": "/etc/app/conf.yaml", "subPath": "conf.yaml"},
        {"name": "shm", "mountPath": "/dev/shm"},
        {
            "name": "kube-api-access-abcde",
            "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
            "readOnly": True,
        },
    ]
    dirs = {"kube-api-access-abcde": "/s/sa", "shm": "/dev/shm/x/shm", "cfg": "/s/cfg"}
    binds = container_binds(pod(volumes, mounts), pod(volumes, mounts)["spec"]["containers"][0], dirs, {}, "/s/hosts")
    assert binds == [
        Bind("/dev/shm/x/shm", "/dev/shm", False),
        Bind("/s/cfg/conf.yaml", "/etc/app/conf.yaml", True),
        Bind("/s/sa", "/var/run/secrets/kubernetes.io/serviceaccount", True),
        Bind("/s/hosts", "/etc/hosts", False),
    ]
    script = mount_script(binds, "/work")
    assert "mount --bind /s/sa /var/run/secrets/kubernetes.io/serviceaccount" in script
    assert "mount -o remount,bind,ro /etc/app/conf.yaml" in script
    assert script.endswith('exec "$@"')


def test_mounts_that_would_hide_the_host_checkout_are_skipped() -> None:
    binds = [Bind("/tmp/co/state/pods/u/tmp", "/tmp", False), Bind("/tmp/co/state/pods/u/sa", "/run/sa", True)]
    script = mount_script(binds, "/work", keep_visible=("/tmp/co",))
    assert "mount --bind /tmp/co/state/pods/u/tmp /tmp" not in script
    assert "not mounting /tmp: it would hide /tmp/co on this host" in script
    assert "mount --bind /tmp/co/state/pods/u/sa /run/sa" in script
    assert "mount --bind /tmp/x /tmpfoo" in mount_script([Bind("/tmp/x", "/tmpfoo", False)], "/w", ("/tmp/co",))
    # its own source may live below the target (a memory emptyDir under /dev/shm mounted on /dev/shm)
    assert "mount --bind /dev/shm/p/shm /dev/shm" in mount_script([Bind("/dev/shm/p/shm", "/dev/shm", False)], "/w")


def test_etc_hosts() -> None:
    p = pod([])
    p["spec"]["hostAliases"] = [{"ip": "127.1.0.2", "hostnames": ["leader"]}]
    text = etc_hosts(p, "127.1.0.9")
    assert "127.1.0.9\tw-0.sub.ns.svc.cluster.local w-0\n" in text
    assert "127.1.0.2\tleader\n" in text


def test_next_ip_round_robin_and_skips() -> None:
    pods = network(1)
    assert next_ip([], 0, pods) == ("127.1.0.1", 1)
    assert next_ip(["127.1.0.1"], 0, pods) == ("127.1.0.2", 2)
    assert next_ip([], 254, pods) == ("127.1.1.1", 257)  # .255 and .0 skipped
    assert next_ip([], 65535, pods)[0] == "127.1.0.1"  # wraps


def test_pick_gpus() -> None:
    assert pick_gpus([0, 2], 2, 8) == [1, 3]
    assert pick_gpus(range(7), 2, 8) is None


def test_agents_claim_distinct_blocks(tmp_path: Path) -> None:
    locks = tmp_path / "locks"
    first = Allocations(Layout(tmp_path / "a"), locks)
    second = Allocations(Layout(tmp_path / "b"), locks)
    try:
        assert first.block != second.block
        assert first.ip("u", "n").startswith(f"127.{first.block}.")
    finally:
        first.close()
        second.close()
    remembered = block_candidates(tmp_path / "a", 200)
    assert remembered[0] == 200 and sorted(remembered) == list(range(1, 255))


def test_allocations_persist(tmp_path: Path) -> None:
    layout, locks = Layout(tmp_path / "state"), tmp_path / "locks"
    first = Allocations(layout, locks)
    ip = first.ip("u1", "n0")
    assert first.gpus("u1", "c", 4, 8) == [0, 1, 2, 3]
    first.close()
    again = Allocations(layout, locks)
    assert again.block == first.block
    assert again.ip("u1", "n0") == ip
    assert again.ip("u2", "n0") != ip
    assert again.gpus("u2", "c", 8, 8) is None  # only 4 left on n0
    again.release("u1")
    again.close()
    assert Allocations(layout, locks).uids() == ["u2"]


def test_node_objects() -> None:
    shape = NodeShape()
    labels = node_labels("gpu-node-1", 1, shape)
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H200" and labels["nvidia.com/gpu.count"] == "8"
    assert labels["topology.kubernetes.io/zone"] == "local-1b"
    assert allocatable(shape)["nvidia.com/gpu"] == "8"
    status = node_status(shape, HostFacts(kubelet_version="v1.37.2"), False, 1e9, (), "cut off")
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "False" and ready["message"] == "cut off"
    assert status["nodeInfo"]["kubeletVersion"] == "v1.37.2"
    assert status["addresses"] == [{"type": "InternalIP", "address": "127.0.0.1"}]
    assert micro_time(1e9 + 0.25) == "2001-09-09T01:46:40.250000Z"


def test_a_cluster_state_dir_outside_the_checkout_stays_visible(monkeypatch: pytest.MonkeyPatch) -> None:
    """A router's emptyDir on /tmp must not hide a state dir under /tmp (LOCALCLUSTER_STATE_DIR=/tmp/...): the
    pod's /etc/hosts and volume sources live there, and the container would fail to start. Checked with explicit
    host paths, so the answer does not depend on where this checkout and its virtualenv live."""
    binds = [Bind("/tmp/bench-state/nodeagent/pods/u/tmp", "/tmp", False)]
    elsewhere = ("/opt/venv", "/srv/checkout")
    hidden = mount_script(binds, "/w", keep_visible=(*elsewhere, "/tmp/bench-state"))
    assert "not mounting /tmp: it would hide /tmp/bench-state" in hidden
    assert "mount --bind /tmp/bench-state/nodeagent/pods/u/tmp /tmp" in mount_script(
        binds, "/w", keep_visible=elsewhere
    )
    monkeypatch.setenv(MARKER_ENV, "/tmp/bench-state")  # command_line keeps the state dir the agent was told about
    assert "not mounting /tmp" in command_line(["smg"], binds, "/w", True)[-3]
