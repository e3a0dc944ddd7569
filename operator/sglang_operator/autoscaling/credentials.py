"""`spec.autoscaling.prometheusAuth` resolved into the `Credentials` the Prometheus client presents.

Credentials live in Secrets of the CR's namespace, read on every pass (a rotated token is used at the next
interval, with no restart). A CA bundle is written once to a file named after its content, because `requests`
verifies against a path. A missing Secret or key is an error string, like every other autoscaler failure: the
pass holds the replica count and `MetricsAvailable` says which Secret is wrong.
"""

import base64
import hashlib
import os
import tempfile
from pathlib import Path

from kubernetes import client
from kubernetes.client.rest import ApiException

from ..api.spec import PrometheusAuth
from ..controller.kube import API_TIMEOUT
from .prometheus import Credentials

CA_DIR = Path(tempfile.gettempdir()) / "sglang-operator-prometheus-ca"
TOKEN_FILE_ENV = "SGLANG_OPERATOR_PROMETHEUS_TOKEN_FILE"  # set by `run --prometheus-bearer-token-file`
CA_FILE_ENV = "SGLANG_OPERATOR_PROMETHEUS_CA_FILE"  # set by `run --prometheus-ca-file`


class CredentialsError(Exception):
    """A Secret that prometheusAuth names cannot be read or lacks the key."""


def resolve_credentials(
    core: client.CoreV1Api, namespace: str, auth: PrometheusAuth, ca_dir: Path = CA_DIR
) -> tuple[Credentials | None, str | None]:
    """(credentials, None), or (None, why not); never raises."""
    try:
        headers = dict(auth.headers)
        basic = None
        verify: bool | str = not auth.insecure_skip_tls_verify
        if (bearer := auth.bearer_token_secret_ref) is not None:
            headers["Authorization"] = f"Bearer {_secret_value(core, namespace, bearer.name, bearer.key).strip()}"
        if (user := auth.basic_auth_secret_ref) is not None:
            data = _secret_data(core, namespace, user.name)  # one read for both keys
            basic = (
                _text(data, namespace, user.name, user.username_key),
                _text(data, namespace, user.name, user.password_key),
            )
        if (ca := auth.ca_secret_ref) is not None:
            verify = str(ca_file(_secret_value(core, namespace, ca.name, ca.key), ca_dir))
    except CredentialsError as e:
        return None, str(e)
    return Credentials(tuple(sorted(headers.items())), basic, verify), None


def operator_credentials(token_file: str | None, ca_bundle: str | None) -> tuple[Credentials | None, str | None]:
    """The operator's own credentials for its default Prometheus (`--prometheus-bearer-token-file`,
    `--prometheus-ca-file`), e.g. its service account's token for an OpenShift Thanos querier. The token file is
    read on every pass, since a projected service-account token rotates. Only the operator's default URL gets them:
    a CR that names its own prometheusURL never receives the operator's token."""
    headers: tuple[tuple[str, str], ...] = ()
    if token_file:
        try:
            token = Path(token_file).read_text().strip()
        except OSError as e:
            return None, f"--prometheus-bearer-token-file: cannot read {token_file}: {e.strerror}"
        headers = (("Authorization", f"Bearer {token}"),)
    return Credentials(headers, None, ca_bundle or True), None


def ca_file(pem: str, ca_dir: Path) -> Path:
    """The bundle's file, written once: its name is the content's hash, so a rotated CA gets a new file."""
    path = ca_dir / f"{hashlib.sha256(pem.encode()).hexdigest()[:16]}.pem"
    if not path.exists():
        ca_dir.mkdir(parents=True, exist_ok=True)
        handle, partial = tempfile.mkstemp(dir=ca_dir, suffix=".tmp")  # one per writer: daemons run in threads
        with os.fdopen(handle, "w") as f:
            f.write(pem)
        os.replace(partial, path)  # another pass never reads half a file
    return path


def _secret_value(core: client.CoreV1Api, namespace: str, name: str, key: str) -> str:
    return _text(_secret_data(core, namespace, name), namespace, name, key)


def _secret_data(core: client.CoreV1Api, namespace: str, name: str) -> dict[str, str]:
    try:
        secret = core.read_namespaced_secret(name, namespace, _request_timeout=API_TIMEOUT)
    except ApiException as e:
        raise CredentialsError(f"prometheusAuth: cannot read Secret {namespace}/{name}: {e.status} {e.reason}") from e
    except Exception as e:  # the API server unreachable or too slow
        raise CredentialsError(f"prometheusAuth: cannot read Secret {namespace}/{name}: {type(e).__name__}") from e
    return dict(secret.data or {})


def _text(data: dict[str, str], namespace: str, name: str, key: str) -> str:
    """One key of a Secret's data, decoded."""
    encoded = data.get(key)
    if encoded is None:
        raise CredentialsError(f"prometheusAuth: Secret {namespace}/{name} has no key {key!r}")
    try:
        return base64.b64decode(encoded).decode()
    except ValueError as e:  # not base64, or not UTF-8 text
        raise CredentialsError(f"prometheusAuth: Secret {namespace}/{name} key {key!r} is not text: {e}") from e
