"""Restart policy, crash-loop back-off and the probe state machine."""

from __future__ import annotations

import pytest

from localcluster.nodeagent.probes import ProbeSpec, container_probes, initial_state, observe, resolve_port
from localcluster.nodeagent.restarts import BackOff, after_exit, should_restart


@pytest.mark.parametrize(
    ("policy", "code", "init", "expected"),
    [
        ("Always", 0, False, True),
        ("Always", 1, False, True),
        ("OnFailure", 0, False, False),
        ("OnFailure", 1, False, True),
        ("Never", 1, False, False),
        ("Always", 0, True, False),  # a finished init container is done
        ("Always", 1, True, True),
        ("Never", 1, True, False),
    ],
)
def test_should_restart(policy: str, code: int, init: bool, expected: bool) -> None:
    assert should_restart(policy, code, init) is expected


def test_backoff_doubles_caps_and_resets() -> None:
    state, delays, t = BackOff(), [], 0.0
    for _ in range(8):
        state, delay = after_exit(state, t, base=10.0)
        delays.append(delay)
        t += delay + 1
    assert delays == [0, 10, 20, 40, 80, 160, 300, 300]
    state, delay = after_exit(state, t + 601, base=10.0)  # quiet for more than 2 x cap
    assert delay == 0


def test_backoff_base_is_configurable() -> None:
    state, _ = after_exit(BackOff(), 0.0, base=0.5)
    assert after_exit(state, 1.0, base=0.5)[1] == 0.5


def test_probe_specs_defaults() -> None:
    specs = container_probes(
        {
            "readinessProbe": {"httpGet": {"path": "/health", "port": 30000}},
            "livenessProbe": {"tcpSocket": {"port": 1}, "periodSeconds": 3},
        }
    )
    assert set(specs) == {"readiness", "liveness"}
    assert specs["readiness"].period == 10 and specs["readiness"].timeout == 1
    assert specs["readiness"].failure_threshold == 3 and specs["liveness"].period == 3


def test_thresholds() -> None:
    spec = ProbeSpec("readiness", {}, success_threshold=2, failure_threshold=2)
    state = initial_state("readiness")
    assert state.result is False
    state = observe(state, spec, True)
    assert state.result is False  # one success of two
    state = observe(state, spec, True)
    assert state.result is True
    state = observe(state, spec, False, "boom")
    assert state.result is True and state.failures == 1 and state.message == "boom"
    state = observe(state, spec, True)
    state = observe(state, spec, False)
    assert state.result is True  # failures must be consecutive
    state = observe(state, spec, False)
    assert state.result is False


def test_initial_states() -> None:
    assert initial_state("liveness").result is True
    assert initial_state("startup").result is None


def test_named_ports() -> None:
    container = {"name": "c", "ports": [{"name": "http", "containerPort": 30000}]}
    assert resolve_port("http", container) == 30000
    assert resolve_port(8080, container) == 8080
    assert resolve_port("8080", container) == 8080
    with pytest.raises(ValueError, match="not a named port"):
        resolve_port("metrics", container)
