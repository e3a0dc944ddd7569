"""Where the local cluster keeps its binaries and state, and which versions it pins.

Everything lives under `e2e/` of the checkout (`.bin/` for build outputs, `.state/` for PKI, data, logs and
pidfiles; both git-ignored), so several checkouts on one machine never share a cluster by accident.
Set `LOCALCLUSTER_STATE_DIR` / `LOCALCLUSTER_BIN_DIR` to move them (e.g. for a benchmark's cold build).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]  # testing/localcluster/paths.py
E2E_DIR = REPO_ROOT / "e2e"
GO_MODULE_DIR = E2E_DIR / "cluster"

# Environment variable set on every process the cluster starts; `down` uses it to find stragglers.
MARKER_ENV = "LOCALCLUSTER_STATE"


@dataclass(frozen=True)
class StateLayout:
    """File names inside one cluster's state directory (a pure naming scheme, no I/O)."""

    root: Path

    @property
    def pki(self) -> Path:
        return self.root / "pki"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def etcd_data(self) -> Path:
        return self.root / "etcd"

    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig (group system:masters) that tests, the operator and the node agent use."""
        return self.root / "kubeconfig"

    @property
    def prometheus_url_file(self) -> Path:
        return self.root / "prometheus-url"

    @property
    def prometheus_dir(self) -> Path:
        return self.root / "prometheus"

    @property
    def nodeagent_dir(self) -> Path:
        return self.root / "nodeagent"

    @property
    def ports_file(self) -> Path:
        return self.root / "ports.json"

    @property
    def timings_file(self) -> Path:
        return self.root / "timings.json"

    def pidfile(self, name: str) -> Path:
        return self.root / f"{name}.pid"

    def logfile(self, name: str) -> Path:
        return self.logs / f"{name}.log"


def state_dir() -> Path:
    return Path(os.environ.get("LOCALCLUSTER_STATE_DIR", str(E2E_DIR / ".state"))).resolve()


def bin_dir() -> Path:
    return Path(os.environ.get("LOCALCLUSTER_BIN_DIR", str(E2E_DIR / ".bin"))).resolve()


def default_layout() -> StateLayout:
    return StateLayout(state_dir())


def as_layout(state: StateLayout | Path | str | None = None) -> StateLayout:
    """Accept a layout, a state directory, or None (the default state directory)."""
    if isinstance(state, StateLayout):
        return state
    return StateLayout(Path(state).resolve()) if state is not None else default_layout()
