"""Certificates and keys for the local control plane, made with the `openssl` CLI, plus kubeconfigs.

One CA signs the API server's serving certificate (127.0.0.1, localhost and the in-cluster DNS names) and one
client certificate per identity: the admin (group system:masters) and the controller-manager and scheduler
under the names the bootstrap RBAC policy already grants. A separate RSA key signs service-account tokens.
A second CA, the front proxy's, signs the client certificate the API server's aggregator presents to extension
API servers (prometheus-adapter): they trust the user it names only from that CA and that name.
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
FRONT_PROXY_CA = "front-proxy-ca"
FRONT_PROXY_CLIENT = "front-proxy-client"
"""The aggregator's client certificate's CN: the one name `--requestheader-allowed-names` admits."""
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

    @property
    def front_proxy_ca_crt(self) -> Path:
        return self.dir / f"{FRONT_PROXY_CA}.crt"

    def front_proxy_files(self) -> list[Path]:
        stems = (FRONT_PROXY_CA, FRONT_PROXY_CLIENT)
        return [p for stem in stems for p in (self.crt(stem), self.key(stem))]


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
    """Create the CA, leaf certificates and service-account key pair unless all of them already exist, and the
    front proxy's CA and client certificate unless they exist (made apart, so a PKI made before they existed keeps
    its CA)."""
    pki = Pki(directory)
    if not all(path.exists() for path in pki.files()):
        _make_main(pki)
    if not all(path.exists() for path in pki.front_proxy_files()):
        _make_front_proxy(pki)
    return pki


def _make_ca(directory: Path, stem: str, subject: str) -> None:
    _openssl(
        "req", "-x509", "-new", "-nodes", "-newkey", "rsa:2048", "-sha256", "-days", DAYS,
        "-keyout", f"{stem}.key", "-out", f"{stem}.crt", "-subj", subject,
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
        cwd=directory,
    )  # fmt: skip


def sign_leaf(directory: Path, stem: str, subject: str, usage: str, sans: tuple[str, ...], ca: str = "ca") -> None:
    """`<stem>.key` and `<stem>.crt` in `directory`, signed by the CA `<ca>.crt`/`<ca>.key` there."""
    ext = directory / f"{stem}.ext"
    ext.write_text(leaf_extensions(usage, sans))
    _openssl(
        "req", "-new", "-nodes", "-newkey", "rsa:2048", "-keyout", f"{stem}.key", "-out", f"{stem}.csr",
        "-subj", subject, cwd=directory,
    )  # fmt: skip
    _openssl(
        "x509", "-req", "-in", f"{stem}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key", "-CAcreateserial",
        "-sha256", "-days", DAYS, "-extfile", f"{stem}.ext", "-out", f"{stem}.crt", cwd=directory,
    )  # fmt: skip
    (directory / f"{stem}.csr").unlink()
    ext.unlink()


def _make_front_proxy(pki: Pki) -> None:
    _make_ca(pki.dir, FRONT_PROXY_CA, "/CN=localcluster-front-proxy-ca")
    sign_leaf(pki.dir, FRONT_PROXY_CLIENT, f"/CN={FRONT_PROXY_CLIENT}", "clientAuth", (), ca=FRONT_PROXY_CA)


def _make_main(pki: Pki) -> None:
    directory = pki.dir
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)
    _make_ca(directory, "ca", "/CN=localcluster-ca")
    for stem, (subject, usage) in LEAVES.items():
        sign_leaf(directory, stem, subject, usage, SERVING_SANS if usage == "serverAuth" else ())
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=directory)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=directory)


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
