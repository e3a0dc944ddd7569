"""The pure parts of the local cluster's prometheus-adapter (testing/localcluster/adapter.py): its external metric rule,
its arguments, and the APIService that puts it behind the aggregator. e2e/tests/test_hpa.py runs them for real."""

import base64
from pathlib import Path

from localcluster import adapter


def test_the_rule_serves_the_fleets_request_rate_by_namespace_and_selector() -> None:
    rule = adapter.requests_rate_rule("sglang_requests_per_second", "30s")
    assert rule["name"] == {"matches": "^sglang:num_requests_total$", "as": "sglang_requests_per_second"}
    assert rule["resources"] == {"overrides": {"namespace": {"resource": "namespace"}}}  # the HPA's namespace
    # The HPA's selector (sglang_deployment: NAME) and namespace become <<.LabelMatchers>>: one fleet's total.
    assert rule["metricsQuery"] == "sum(rate(<<.Series>>{<<.LabelMatchers>>}[30s]))"
    assert adapter.render_config([rule]) == {"rules": [], "externalRules": [rule]}


def test_arguments_delegate_to_the_api_server_and_serve_tls_on_loopback() -> None:
    argv = adapter.adapter_args(Path("/bin/a"), Path("/k"), Path("/pki"), 6543, "http://127.0.0.1:9090", Path("/c"))
    assert argv[0] == "/bin/a"
    for flag in ("--secure-port=6543", "--bind-address=127.0.0.1", "--prometheus-url=http://127.0.0.1:9090",
                 "--tls-cert-file=/pki/prometheus-adapter.crt", "--authentication-kubeconfig=/k",
                 "--authorization-kubeconfig=/k", "--lister-kubeconfig=/k", "--config=/c"):  # fmt: skip
        assert flag in argv


def test_the_apiservice_reaches_the_adapter_through_an_externalname_service() -> None:
    service, api_service = adapter.registration("metrics", 6543, b"PEM")
    assert service["spec"] == {"type": "ExternalName", "externalName": "localhost"}  # no kube-proxy for a ClusterIP
    assert api_service["metadata"]["name"] == "v1beta1.external.metrics.k8s.io"
    assert api_service["spec"]["service"] == {"namespace": "metrics", "name": service["metadata"]["name"],
                                              "port": 6543}  # fmt: skip
    assert base64.b64decode(api_service["spec"]["caBundle"]) == b"PEM"
    assert "insecureSkipTLSVerify" not in api_service["spec"]
    assert adapter.service_host("metrics") == "prometheus-adapter.metrics.svc"  # the name its certificate carries
