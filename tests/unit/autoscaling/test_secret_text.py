"""Issue 29, gap 12: what the operator says about a Secret that a CR names tells nothing of what the Secret holds.

A missing Secret, a forbidden one, a missing key, a value that is not base64, not UTF-8 text, or empty: the
autoscaler (prometheusAuth), the reconciler (the API keys) and the doctor (the router's key) each report the same
text for all of them, byte for byte (`secretref.unusable_credential`), and never a byte of the value."""

import base64
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from sglang_operator.api.spec import PrometheusAuth, SGLangDeploymentSpec
from sglang_operator.controller.reconcile import Reconciler
from sglang_operator.doctor.doctor_pass import _router_api_key
from sglang_operator.prometheus.credentials import resolve_credentials
from sglang_operator.runtime.state import TtlCache
from sglang_operator.secretref import secret_key_text, unusable_credential
from sglang_operator.settings import OperatorSettings


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


# Each way a Secret can be unusable: the Secret's `data`, or the status the API server answers instead.
UNUSABLE: dict[str, Mapping[str, str] | int] = {
    "secret-missing": 404,
    "secret-forbidden": 403,
    "key-missing": {"other": b64(b"fine")},
    "not-base64": {"token": "!!!not base64!!!"},
    "not-utf8": {"token": b64(b"ab\xff\xfe\xc3cd")},
    "empty": {"token": ""},
    "no-data": {},
}


class Core:
    """A CoreV1Api stand-in serving one Secret, or an error status."""

    def __init__(self, answer: Mapping[str, str] | int) -> None:
        self.answer = answer

    def read_namespaced_secret(self, name: str, namespace: str, **kwargs: Any) -> Any:
        if isinstance(self.answer, int):
            raise ApiException(status=self.answer, reason="Forbidden" if self.answer == 403 else "Not Found")
        return client.V1Secret(data=dict(self.answer) or None)


def all_same(texts: dict[str, str | None]) -> str:
    distinct = set(texts.values())
    assert len(distinct) == 1, texts
    (text,) = distinct
    assert text is not None
    return text


@pytest.mark.parametrize(
    ("auth", "field", "key"),
    [
        ({"bearerTokenSecretRef": {"name": "prom"}}, "bearerTokenSecretRef", "token"),
        ({"caSecretRef": {"name": "prom", "key": "token"}}, "caSecretRef", "token"),
        ({"basicAuthSecretRef": {"name": "prom", "usernameKey": "token", "passwordKey": "token"}},
         "basicAuthSecretRef", "token and token"),
    ],
    ids=["bearer", "ca", "basic"],
)  # fmt: skip
def test_prometheus_auth_reports_every_unusable_secret_in_the_same_words(
    tmp_path: Path, auth: dict[str, Any], field: str, key: str
) -> None:
    parsed = PrometheusAuth.model_validate(auth)
    texts = {}
    for case, answer in UNUSABLE.items():
        credentials, texts[case] = resolve_credentials(Core(answer), "team-a", parsed, tmp_path)  # type: ignore[arg-type]
        assert credentials is None
    text = all_same(texts)
    assert text == (
        f"spec.autoscaling.prometheusAuth.{field}: the credential in Secret prom, key {key}, is unusable (it must "
        "exist in this namespace and hold UTF-8 text)"
    )
    credentials, error = resolve_credentials(Core({"token": b64(b"fine")}), "team-a", parsed, tmp_path)  # type: ignore[arg-type]
    assert error is None and credentials is not None  # the same reference with a good value works


def test_basic_auth_does_not_tell_which_of_its_two_keys_is_there(tmp_path: Path) -> None:
    parsed = PrometheusAuth.model_validate({"basicAuthSecretRef": {"name": "prom"}})
    texts = {
        "no-username": resolve_credentials(Core({"password": b64(b"pw")}), "team-a", parsed, tmp_path)[1],  # type: ignore[arg-type]
        "no-password": resolve_credentials(Core({"username": b64(b"u")}), "team-a", parsed, tmp_path)[1],  # type: ignore[arg-type]
        "missing": resolve_credentials(Core(404), "team-a", parsed, tmp_path)[1],  # type: ignore[arg-type]
    }
    all_same(texts)


def test_a_slow_api_server_is_told_apart_without_naming_the_secrets_state(tmp_path: Path) -> None:
    parsed = PrometheusAuth.model_validate({"bearerTokenSecretRef": {"name": "prom"}})
    _, error = resolve_credentials(Core(500), "team-a", parsed, tmp_path)  # type: ignore[arg-type]
    field = "spec.autoscaling.prometheusAuth.bearerTokenSecretRef"
    assert error == f"{field}: Secret prom could not be read now (HTTP 500); retrying"


class Cache(TtlCache):
    """The reconciler's Secret cache, always reading (no TTL)."""

    def __init__(self) -> None:
        super().__init__(ttl=0.0)


def test_the_reconciler_logs_every_unusable_api_key_in_the_same_words(caplog: pytest.LogCaptureFixture) -> None:
    ref = SGLangDeploymentSpec.model_validate(
        {"model": {"path": "m"}, "router": {"apiKeySecretRef": {"name": "router-key"}}}
    ).router.api_key_secret_ref
    texts = {}
    for case, answer in UNUSABLE.items():
        reconciler = Reconciler(client.ApiClient(), OperatorSettings(), secrets=Cache(), kinds=Cache())
        reconciler.core = Core(answer)  # type: ignore[assignment]
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="sglang_operator.controller.reconcile"):
            assert reconciler._secret_text(ref, "team-a", "spec.router.apiKeySecretRef") is None
        (record,) = caplog.records
        texts[case] = record.getMessage().split(": ", 1)[1]
    assert all_same(texts) == unusable_credential("spec.router.apiKeySecretRef", "router-key", "token")


def test_the_doctor_reports_every_unusable_router_key_in_the_same_words() -> None:
    spec = SGLangDeploymentSpec.model_validate(
        {"model": {"path": "m"}, "router": {"apiKeySecretRef": {"name": "router-key"}}}
    )

    def reader(answer: Mapping[str, str] | int) -> Callable[[str, str], Mapping[str, Any] | None]:
        def read(namespace: str, name: str) -> Mapping[str, Any] | None:
            if answer == 404:
                return None  # the doctor's reader: None for a missing Secret
            if isinstance(answer, int):
                raise client.ApiException(status=answer)
            return {"data": dict(answer)}

        return read

    texts = {case: _router_api_key(spec, "team-a", reader(answer))[1] for case, answer in UNUSABLE.items()}
    assert all_same(texts) == unusable_credential("spec.router.apiKeySecretRef", "router-key", "token")


def test_no_byte_of_the_value_and_no_offset_reaches_the_message() -> None:
    message = unusable_credential("spec.engine.apiKeySecretRef", "k", "token")
    for leaked in ("0xff", "\\xff", "position", "byte", "codec"):
        assert leaked not in message
    assert secret_key_text({"token": b64(b"ab\xff")}, "token") is None
    assert secret_key_text({"token": b64("héllo".encode())}, "token") == "héllo"
