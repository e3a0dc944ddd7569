"""The wake-up map holds running loops only; `run` flags reach the operator's settings."""

import asyncio

from sglang_operator.controller import handlers
from sglang_operator.controller.runner import operator_environment
from sglang_operator.settings import load_settings


def test_the_wakeup_map_holds_running_loops_only() -> None:
    handlers._wakeups.clear()
    handlers._wake("team-a", "gone")  # a pod event of a CR with no loop: adds nothing
    assert handlers._wakeups == {}
    event = handlers._register("team-a", "chat")
    handlers._wake("team-a", "chat")
    assert event.is_set()
    handlers._unregister("team-a", "chat", asyncio.Event())  # someone else's entry: kept
    assert ("team-a", "chat") in handlers._wakeups
    handlers._unregister("team-a", "chat", event)
    assert handlers._wakeups == {}


def test_run_flags_become_the_operators_settings() -> None:
    env = operator_environment(
        allowed_prometheus_urls=["http://prom:9090", "https://thanos"],
        allowed_host_paths=["/models"],
        operator_namespace="ops",
        operator_pod_labels="app=sgo,tier=control",
        prometheus_namespace_labels="name=monitoring",
        prometheus_pod_labels="app=prometheus",
    )
    settings = load_settings(env)
    assert settings.prometheus_url_allowed("http://prom:9090/api") and not settings.prometheus_url_allowed("http://x")
    assert settings.pod_policy.host_path_allowed("/models/llama") and not settings.pod_policy.host_path_allowed("/")
    assert settings.network.operator_namespace == "ops"
    assert dict(settings.network.operator_pod_labels) == {"app": "sgo", "tier": "control"}
    assert dict(settings.network.prometheus_namespace_labels) == {"name": "monitoring"}
    assert dict(settings.network.prometheus_pod_labels) == {"app": "prometheus"}
    assert operator_environment() == {}  # no flag, no variable: whatever the environment says stays


def test_the_autoscaler_interval_never_breaks_its_daemon() -> None:
    from sglang_operator.autoscaling.daemon import MAX_INTERVAL_SECONDS, interval_seconds

    assert interval_seconds({"autoscaling": {"intervalSeconds": 30}}) == 30.0
    assert interval_seconds({"autoscaling": {"intervalSeconds": 2**33}}) == MAX_INTERVAL_SECONDS
    assert interval_seconds({"autoscaling": {"intervalSeconds": "abc"}}) == 15.0
    assert interval_seconds({"autoscaling": {"intervalSeconds": 0.001}}) == 1.0
    assert interval_seconds({}) == 15.0
