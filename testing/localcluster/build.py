"""Build the local cluster's binaries from the Go modules in e2e/cluster, only when a module changed.

Two targets, each its own Go module so neither moves the other's dependency versions:
- `kubernetes` (e2e/cluster): etcd, kube-apiserver, kube-controller-manager, kube-scheduler, in one
  `go build` so the packages they share compile once;
- `prometheus` (e2e/cluster/prometheus): Prometheus with Kubernetes service discovery, which Debian's package
  has patched out.

A stamp per target (`<target>.stamp.json` next to the binaries) records a hash of the module's files, the Go
version and the build command: a matching stamp means the binaries are current and nothing runs. A build goes
to a temporary folder that is moved into place only when it succeeded; a file lock serialises concurrent `up`s.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from localcluster.paths import GO_MODULE_DIR

PROMETHEUS_MODULE_DIR = GO_MODULE_DIR / "prometheus"
KUBE_VERSION_PACKAGES = ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version")


def _required_version(module_dir: Path, module: str) -> str:
    text = (module_dir / "go.mod").read_text()
    match = re.search(rf"^\s*(?:require\s+)?{re.escape(module)}\s+(v\d+\.\d+\.\d+)\s*(//.*)?$", text, re.M)
    if not match:
        raise RuntimeError(f"{module} is not required in {module_dir / 'go.mod'}")
    return match.group(1)


def kube_version(module_dir: Path = GO_MODULE_DIR) -> str:
    """The k8s.io/kubernetes release pinned in go.mod: the one source of truth for the version."""
    return _required_version(module_dir, "k8s.io/kubernetes")


def prometheus_version(module_dir: Path = PROMETHEUS_MODULE_DIR) -> str:
    """Prometheus X.Y.Z is published as the Go module version v0.<X*100+Y>.Z."""
    _, combined, patch = _required_version(module_dir, "github.com/prometheus/prometheus").lstrip("v").split(".")
    return f"{int(combined) // 100}.{int(combined) % 100}.{patch}"


def kube_ldflags(version: str) -> list[str]:
    """`-X` flags so `/version` and client user agents report the pinned release (not v0.0.0-master)."""
    major, minor, _ = version.lstrip("v").split(".")
    values = {"gitVersion": version, "gitMajor": major, "gitMinor": minor, "gitTreeState": "clean"}
    return [f"-X {pkg}.{key}={val}" for pkg in KUBE_VERSION_PACKAGES for key, val in values.items()]


@dataclass(frozen=True)
class Target:
    name: str
    module_dir: Path
    packages: dict[str, str]  # output binary name -> Go main package
    ldflags: list[str] = field(default_factory=list)
    tags: str = ""
    # `go build -o dir/` names a binary after the package path's last element (a /vN suffix skipped).
    go_names: dict[str, str] = field(default_factory=dict)

    def command(self, out_dir: Path) -> list[str]:
        tags = ["-tags", self.tags] if self.tags else []
        ldflags = " ".join(["-s", "-w", *self.ldflags])
        return ["go", "build", "-trimpath", *tags, "-ldflags", ldflags, "-o", f"{out_dir}/", *self.packages.values()]


def kubernetes_target() -> Target:
    return Target(
        name="kubernetes",
        module_dir=GO_MODULE_DIR,
        packages={
            "etcd": "go.etcd.io/etcd/server/v3",  # etcd's server module root is its `main` package
            "kube-apiserver": "k8s.io/kubernetes/cmd/kube-apiserver",
            "kube-controller-manager": "k8s.io/kubernetes/cmd/kube-controller-manager",
            "kube-scheduler": "k8s.io/kubernetes/cmd/kube-scheduler",
        },
        ldflags=kube_ldflags(kube_version()),
        go_names={"etcd": "server"},
    )


def prometheus_target() -> Target:
    version = prometheus_version()
    pkg = "github.com/prometheus/common/version"
    return Target(
        name="prometheus",
        module_dir=PROMETHEUS_MODULE_DIR,
        packages={"prometheus": "github.com/prometheus/prometheus/cmd/prometheus"},
        ldflags=[f"-X {pkg}.Version={version}", f"-X {pkg}.Branch=localcluster", f"-X {pkg}.BuildUser=localcluster"],
        tags="remove_all_sd,enable_kubernetes_sd",  # only Kubernetes (plus file/HTTP/static) discovery
    )


def build_env() -> dict[str, str]:
    # GOTOOLCHAIN=local: use the installed Go, never download another toolchain.
    return {**os.environ, "CGO_ENABLED": "0", "GOTOOLCHAIN": "local", "GOFLAGS": "-buildvcs=false -mod=readonly"}


def _go_version() -> str:
    return subprocess.run(["go", "env", "GOVERSION"], capture_output=True, text=True, check=True).stdout.strip()


def module_files(module_dir: Path) -> list[Path]:
    """The module's .go, go.mod and go.sum files, excluding nested modules."""
    nested = {p.parent for p in module_dir.rglob("go.mod") if p.parent != module_dir}
    return sorted(
        p
        for p in module_dir.rglob("*")
        if p.is_file()
        and (p.suffix == ".go" or p.name in ("go.mod", "go.sum"))
        and not any(n == p.parent or n in p.parents for n in nested)
    )


def input_hash(target: Target, go_version: str) -> str:
    digest = hashlib.sha256()
    for path in module_files(target.module_dir):
        digest.update(str(path.relative_to(target.module_dir)).encode() + b"\0" + path.read_bytes() + b"\0")
    digest.update(json.dumps([target.command(Path("OUT")), go_version]).encode())
    return digest.hexdigest()


@dataclass(frozen=True)
class BuildResult:
    target: str
    bin_dir: Path
    built: bool  # False when the stamp matched and nothing ran
    seconds: float  # this build's duration, or the recorded duration of the build that made the binaries


def stamp_path(bin_dir: Path, target: str) -> Path:
    return bin_dir / f"{target}.stamp.json"


def read_stamp(bin_dir: Path, target: str = "kubernetes") -> dict[str, object]:
    try:
        stamp: dict[str, object] = json.loads(stamp_path(bin_dir, target).read_text())
    except (FileNotFoundError, ValueError):
        return {}
    return stamp


def ensure_built(bin_dir: Path, target: Target, log: bool = True) -> BuildResult:
    """Build `target`'s binaries into `bin_dir` unless its stamp matches the module; idempotent."""
    if shutil.which("go") is None:
        raise RuntimeError("the Go toolchain (`go`) is needed to build the local cluster's binaries")
    bin_dir.mkdir(parents=True, exist_ok=True)
    with (bin_dir / f".{target.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        wanted = input_hash(target, _go_version())
        stamp = read_stamp(bin_dir, target.name)
        if stamp.get("hash") == wanted and all((bin_dir / name).exists() for name in target.packages):
            return BuildResult(target.name, bin_dir, False, float(str(stamp.get("seconds", 0.0))))
        tmp = bin_dir / f"tmp-{target.name}-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        if log:
            print(f"building {target.name} ({', '.join(target.packages)}) from Go modules (cold: 10-30 min)...")
        logfile = bin_dir / f"{target.name}-build.log"
        start = time.monotonic()
        with logfile.open("w") as out:
            command = ["nice", "-n", "5", *target.command(tmp)]
            proc = subprocess.run(command, cwd=target.module_dir, env=build_env(), stdout=out, stderr=out)
        seconds = time.monotonic() - start
        if proc.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            raise RuntimeError(f"go build failed ({proc.returncode}); see {logfile}:\n{logfile.read_text()[-4000:]}")
        for name in target.packages:
            (tmp / target.go_names.get(name, name)).replace(bin_dir / name)
        shutil.rmtree(tmp, ignore_errors=True)
        history = [*list(stamp.get("history", []) or []), round(seconds, 1)][-10:]  # type: ignore[call-overload]
        record = {"hash": wanted, "seconds": round(seconds, 1), "history": history, "go": _go_version()}
        record["built_at"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        stamp_path(bin_dir, target.name).write_text(json.dumps(record, indent=1) + "\n")
        if log:
            print(f"built {target.name} in {seconds:.0f}s -> {bin_dir}")
        return BuildResult(target.name, bin_dir, True, seconds)


def ensure_all_built(bin_dir: Path, log: bool = True) -> list[BuildResult]:
    return [ensure_built(bin_dir, target, log) for target in (kubernetes_target(), prometheus_target())]
