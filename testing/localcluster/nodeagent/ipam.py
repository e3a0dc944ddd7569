"""Pod IPs and GPU indices, persisted so a restarted agent gives running pods the same ones.

Loopback addresses are all local on Linux, so every pod can bind its own address while sharing the host's
network stack. Several agents (one per local cluster) may run on one machine, so each claims a /16 block
127.B.0.0/16 (B in 1..254, first choice derived from its state dir, remembered in ipam.json) by holding an
flock on `/tmp/localcluster-nodeagent-nets/127.B.lock` while it runs. Inside the block addresses are handed
out round-robin (not lowest-free), so a deleted pod's address is not reused at once: a router that still
lists the old pod then fails loudly instead of reaching a stranger.
"""

from __future__ import annotations

import fcntl
import hashlib
import ipaddress
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from localcluster.nodeagent.layout import Layout, read_json, write_json

LOCK_DIR = Path("/tmp/localcluster-nodeagent-nets")
BLOCKS = range(1, 255)  # 127.0.0.0/16 is left to host services (apiserver, etcd on 127.0.0.1)


def network(block: int) -> ipaddress.IPv4Network:
    return ipaddress.IPv4Network(f"127.{block}.0.0/16")


def block_candidates(root: Path, remembered: int | None) -> list[int]:
    """Blocks to try in order: the remembered one, then one derived from the state dir, then the rest."""
    first = BLOCKS[int(hashlib.sha256(str(root).encode()).hexdigest(), 16) % len(BLOCKS)]
    order = [BLOCKS[(BLOCKS.index(first) + i) % len(BLOCKS)] for i in range(len(BLOCKS))]
    if remembered is not None and remembered in BLOCKS:
        order.remove(remembered)
        order.insert(0, remembered)
    return order


def claim_block(candidates: Iterable[int], lock_dir: Path = LOCK_DIR) -> tuple[int, int]:
    """(block, fd of the held lock) for the first block no other running agent holds."""
    lock_dir.mkdir(parents=True, exist_ok=True)
    for block in candidates:
        fd = os.open(lock_dir / f"127.{block}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        return block, fd
    raise RuntimeError("every 127.B.0.0/16 block is held by another node agent")


def next_ip(used: Iterable[str], cursor: int, pods: ipaddress.IPv4Network) -> tuple[str, int]:
    """The first free address after offset `cursor` in `pods` (wrapping), and its offset.

    Offsets whose last octet is 0 or 255 are skipped: they look like network/broadcast addresses to tools.
    """
    taken = set(used)
    size = pods.num_addresses
    for step in range(1, size + 1):
        offset = (cursor + step) % size
        address = pods.network_address + offset
        if offset % 256 in (0, 255):
            continue
        if str(address) not in taken:
            return str(address), offset
    raise RuntimeError(f"pod network {pods} is exhausted")


def pick_gpus(used: Iterable[int], count: int, total: int) -> list[int] | None:
    """The lowest `count` free GPU indices of a node with `total` GPUs, or None when not enough are free."""
    taken = set(used)
    free = [index for index in range(total) if index not in taken]
    return free[:count] if len(free) >= count else None


@dataclass
class PodAllocation:
    ip: str
    node: str
    gpus: dict[str, list[int]] = field(default_factory=dict)  # container name -> GPU indices on `node`


class Allocations:
    """The allocation table, written through to `<state>/ipam.json` on every change."""

    def __init__(self, layout: Layout, lock_dir: Path = LOCK_DIR) -> None:
        self._layout = layout
        raw: dict[str, Any] = read_json(layout.ipam) or {}
        remembered = int(raw["block"]) if isinstance(raw.get("block"), int) else None
        self.block, self._lock = claim_block(block_candidates(layout.root, remembered), lock_dir)
        self.network = network(self.block)
        self._cursor = int(raw.get("cursor", 0)) if remembered == self.block else 0
        self._pods = {
            uid: PodAllocation(ip=entry["ip"], node=entry["node"], gpus=dict(entry.get("gpus", {})))
            for uid, entry in raw.get("pods", {}).items()
        }

    def _save(self) -> None:
        pods = {uid: {"ip": a.ip, "node": a.node, "gpus": a.gpus} for uid, a in self._pods.items()}
        write_json(self._layout.ipam, {"block": self.block, "cursor": self._cursor, "pods": pods})

    def ip(self, uid: str, node: str) -> str:
        """The pod's address, allocating one on first use."""
        existing = self._pods.get(uid)
        if existing is not None:
            return existing.ip
        address, self._cursor = next_ip((a.ip for a in self._pods.values()), self._cursor, self.network)
        self._pods[uid] = PodAllocation(ip=address, node=node)
        self._save()
        return address

    def gpus(self, uid: str, container: str, count: int, total: int) -> list[int] | None:
        """GPU indices for one container (stable across calls), or None when the node has too few free."""
        pod = self._pods[uid]
        if container in pod.gpus:
            return pod.gpus[container]
        used = [i for a in self._pods.values() if a.node == pod.node for ids in a.gpus.values() for i in ids]
        picked = pick_gpus(used, count, total)
        if picked is not None:
            pod.gpus[container] = picked
            self._save()
        return picked

    def release(self, uid: str) -> None:
        if self._pods.pop(uid, None) is not None:
            self._save()

    def uids(self) -> list[str]:
        return list(self._pods)

    def close(self) -> None:
        """Give the address block back (the agent is stopping)."""
        os.close(self._lock)
