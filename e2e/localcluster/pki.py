"""Certificates and keys for the local control plane, made with the `openssl` CLI, plus kubeconfigs.

One CA signs the API server's serving certificate (127.0.0.1, localhost and the in-cluster DNS names) and one
client certificate per identity: the admin (group system:masters) and the controller-manager and scheduler
under the names the bootstrap RBAC policy already grants. A separate RSA key signs service-account tokens.
Extensions (key identifiers, critical basic constraints) satisfy Python's strict X.509 verification.
"""

from __future__ import annotations

import base64
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

DAYS = "3650"
SERVING_SANS = (
    "IP:127.0.0.1",
    "IP:10.96.0.1",
    "DNS:localhost",
    "DNS:kubernetes",
    "DNS:kubernetes.default",
    "DNS:kubernetes.default.svc",
    "DNS:kubernetes.default.svc.cluster.local",
)
# file stem -> (subject, extendedKeyUsage)
LEAVES = {
    "apiserver": ("/CN=kube-apiserver", "serverAuth"),
    "admin": ("/O=system:masters/CN=localcluster-admin", "clientAuth"),
    "controller-manager": ("/CN=system:kube-controller-manager", "clientAuth"),
    "scheduler": ("/CN=system:kube-scheduler", "clientAuth"),
}


@dataclass(frozen=True)
class Pki:
    dir: Path

    @property
    def ca_crt(self) -> Path:
        return self.dir / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.dir / "ca.key"

    @property
    def sa_key(self) -> Path:
        return self.dir / "sa.key"

    @property
    def sa_pub(self) -> Path:
        return self.dir / "sa.pub"

    def crt(self, stem: str) -> Path:
        return self.dir / f"{stem}.crt"

    def key(self, stem: str) -> Path:
        return self.dir / f"{stem}.key"

    def files(self) -> list[Path]:
        leaves = [p for stem in LEAVES for p in (self.crt(stem), self.key(stem))]
        return [self.ca_crt, self.ca_key, self.sa_key, self.sa_pub, *leaves]


def _openssl(*args: str, cwd: Path) -> None:
    proc = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args)} failed:\n{proc.stderr}")


def leaf_extensions(usage: str, sans: tuple[str, ...]) -> str:
    lines = [
        "basicConstraints=critical,CA:FALSE",
        "keyUsage=critical,digitalSignature,keyEncipherment",
        f"extendedKeyUsage={usage}",
        "subjectKeyIdentifier=hash",
        "authorityKeyIdentifier=keyid,issuer",
    ]
    if sans:
        lines.append("subjectAltName=" + ",".join(sans))
    return "\n".join(lines) + "\n"


def ensure_pki(directory: Path) -> Pki:
    """Create the CA, leaf certificates and service-account key pair unless all of them already exist."""
    pki = Pki(directory)
    if all(path.exists() for path in pki.files()):
        return pki
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)
    _openssl(
        "req", "-x509", "-new", "-nodes", "-newkey", "rsa:2048", "-sha256", "-days", DAYS,
        "-keyout", "ca.key", "-out", "ca.crt", "-subj", "/CN=localcluster-ca",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
        cwd=directory,
    )  # fmt: skip
    for stem, (subject, usage) in LEAVES.items():
        ext = directory / f"{stem}.ext"
        ext.write_text(leaf_extensions(usage, SERVING_SANS if usage == "serverAuth" else ()))
        _openssl(
            "req", "-new", "-nodes", "-newkey", "rsa:2048", "-keyout", f"{stem}.key", "-out", f"{stem}.csr",
            "-subj", subject, cwd=directory,
        )  # fmt: skip
        _openssl(
            "x509", "-req", "-in", f"{stem}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
            "-sha256", "-days", DAYS, "-extfile", f"{stem}.ext", "-out", f"{stem}.crt", cwd=directory,
        )  # fmt: skip
        (directory / f"{stem}.csr").unlink()
        ext.unlink()
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=directory)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=directory)
    return pki


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def render_kubeconfig(server: str, ca_pem: str, cert_pem: str, key_pem: str, user: str) -> dict[str, Any]:
    """A single-context kubeconfig with embedded (base64) credentials, so it stays valid if copied."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "localcluster", "cluster": {"server": server, "certificate-authority-data": ca_pem}}],
        "users": [{"name": user, "user": {"client-certificate-data": cert_pem, "client-key-data": key_pem}}],
        "contexts": [{"name": "localcluster", "context": {"cluster": "localcluster", "user": user}}],
        "current-context": "localcluster",
        "preferences": {},
    }


def write_kubeconfig(path: Path, pki: Pki, server: str, stem: str) -> Path:
    config = render_kubeconfig(server, _b64(pki.ca_crt), _b64(pki.crt(stem)), _b64(pki.key(stem)), stem)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(yaml.safe_dump(config, sort_keys=False))
    tmp.chmod(0o600)
    tmp.replace(path)
    return path
