"""`spec.autoscaling.prometheusAuth` resolved into the `Credentials` the Prometheus client presents.

Credentials live in Secrets of the CR's namespace, read on every pass (a rotated token is used at the next
interval, with no restart). A CA bundle is written once to a file named after its content, because `requests`
verifies against a path. A Secret or key that cannot be used is an error string, like every other autoscaler
failure: the pass holds the replica count and `MetricsAvailable` names the reference, in the same words whatever is
wrong with it (`secretref.unusable_credential`: never a byte of the value, nor whether the Secret or key exists).
"""

import hashlib
import os
import tempfile
from pathlib import Path

from kubernetes import client
from kubernetes.client.rest import ApiException

from ..api.spec import PrometheusAuth
from ..runtime.kube import API_TIMEOUT
from ..secretref import secret_key_text, unusable_credential
from .client import Credentials

CA_DIR = Path(tempfile.gettempdir()) / "sglang-operator-prometheus-ca"
_AUTH_FIELD = "spec.autoscaling.prometheusAuth"


class CredentialsError(Exception):
    """A Secret that prometheusAuth names cannot be used (see `secretref`), or could not be read just now."""


def resolve_credentials(
    core: client.CoreV1Api, namespace: str, auth: PrometheusAuth, ca_dir: Path = CA_DIR
) -> tuple[Credentials | None, str | None]:
    """(credentials, None), or (None, why not); never raises."""
    try:
        headers = dict(auth.headers)
        basic = None
        verify: bool | str = not auth.insecure_skip_tls_verify
        if (bearer := auth.bearer_token_secret_ref) is not None:
            field = f"{_AUTH_FIELD}.bearerTokenSecretRef"
            token = _secret_value(core, namespace, field, bearer.name, bearer.key).strip()
            if not token:
                raise CredentialsError(unusable_credential(field, bearer.name, bearer.key))
            headers["Authorization"] = f"Bearer {token}"
        if (user := auth.basic_auth_secret_ref) is not None:
            # One read for both keys, and one message for both: naming the key that failed would tell that the
            # other one is there.
            field, keys = f"{_AUTH_FIELD}.basicAuthSecretRef", f"{user.username_key} and {user.password_key}"
            data = _secret_data(core, namespace, field, user.name, keys)
            username, password = secret_key_text(data, user.username_key), secret_key_text(data, user.password_key)
            if username is None or password is None:
                raise CredentialsError(unusable_credential(field, user.name, keys))
            basic = (username, password)
        if (ca := auth.ca_secret_ref) is not None:
            pem = _secret_value(core, namespace, f"{_AUTH_FIELD}.caSecretRef", ca.name, ca.key)
            verify = str(ca_file(pem, ca_dir))
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


def _secret_value(core: client.CoreV1Api, namespace: str, field: str, name: str, key: str) -> str:
    return _text(_secret_data(core, namespace, field, name, key), field, name, key)


def _secret_data(core: client.CoreV1Api, namespace: str, field: str, name: str, key: str) -> dict[str, str]:
    """The Secret's data. Missing (404) and forbidden (403) read as an unusable credential, in the same words as a
    bad key; only a failure that says nothing about the Secret (the API server slow or erring) is told apart."""
    try:
        secret = core.read_namespaced_secret(name, namespace, _request_timeout=API_TIMEOUT)
    except ApiException as e:
        if e.status in (403, 404):
            raise CredentialsError(unusable_credential(field, name, key)) from e
        raise CredentialsError(f"{field}: Secret {name} could not be read now (HTTP {e.status}); retrying") from e
    except Exception as e:  # the API server unreachable or too slow
        raise CredentialsError(f"{field}: Secret {name} could not be read now ({type(e).__name__}); retrying") from e
    return dict(secret.data or {})


def _text(data: dict[str, str], field: str, name: str, key: str) -> str:
    """One key of a Secret's data, decoded; the same error for a missing key and for a value that is not text."""
    text = secret_key_text(data, key)
    if text is None:
        raise CredentialsError(unusable_credential(field, name, key))
    return text
