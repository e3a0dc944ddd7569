"""The capacity rule ceil(Q x T x (1 + headroom) / C), shared by `plan`, the autoscaler and the benchmark."""

import pytest

from sglang_operator.api.spec import SGLangDeploymentSpec
from sglang_operator.capacity import (
    DEFAULT_CONCURRENCY_PER_RANK,
    ceil_replicas,
    concurrency_per_replica,
    replicas_exact,
    replicas_for_load,
)


@pytest.mark.parametrize(
    ("qps", "seconds", "concurrency", "headroom", "expected"),
    [
        (200, 1.5, 64, 0.0, 5),  # design.md: 4.69 -> 5
        (200, 1.5, 64, 0.3, 7),  # 6.09 -> 7
        (100, 2, 64, 0.0, 4),  # 3.125 -> 4
        (100, 2, 64, 0.3, 5),  # 4.06 -> 5
        (64, 1, 64, 0.0, 1),  # exactly one replica, not two
        (128, 1, 64, 0.0, 2),
        (0.1, 0.1, 1000, 0.0, 1),  # any load needs a replica
    ],
)
def test_replicas_for_load(qps: float, seconds: float, concurrency: int, headroom: float, expected: int) -> None:
    assert replicas_for_load(qps, seconds, concurrency, headroom) == expected


def test_float_noise_does_not_add_a_replica() -> None:
    # 0.1 * 3 * 10 / 3 is 1.0000000000000002 in binary floating point.
    assert replicas_exact(0.1 * 3, 10, 3) > 1.0
    assert replicas_for_load(0.1 * 3, 10, 3) == 1
    assert ceil_replicas(3.0000000001) == 3
    assert ceil_replicas(3.001) == 4


@pytest.mark.parametrize(
    "args",
    [(0, 1.5, 64), (200, 0, 64), (200, 1.5, 0), (-1, 1.5, 64), (200, -1, 64), (200, 1.5, -64)],
)
def test_non_positive_inputs_are_rejected(args: tuple[float, float, float]) -> None:
    with pytest.raises(ValueError):
        replicas_for_load(*args)


def test_negative_headroom_is_rejected() -> None:
    with pytest.raises(ValueError):
        replicas_for_load(200, 1.5, 64, headroom=-0.1)


def test_exact_allows_zero_load() -> None:
    assert replicas_exact(0, 1.5, 64) == 0
    assert ceil_replicas(0.0) == 0


def _spec(**overrides: object) -> SGLangDeploymentSpec:
    return SGLangDeploymentSpec.model_validate({"model": {"path": "m"}, **overrides})


def test_concurrency_prefers_the_explicit_target() -> None:
    spec = _spec(engine={"maxRunningRequests": 16}, autoscaling={"targets": {"concurrencyPerReplica": 48}})
    assert concurrency_per_replica(spec, measured=100) == 48


def test_concurrency_is_max_running_requests_times_dp_ranks() -> None:
    assert concurrency_per_replica(_spec(engine={"maxRunningRequests": 16})) == 16
    assert concurrency_per_replica(_spec(engine={"maxRunningRequests": 16}, parallelism={"dp": 4})) == 64
    dpa = _spec(engine={"maxRunningRequests": 16}, parallelism={"tp": 8, "attentionDP": 8})
    assert concurrency_per_replica(dpa) == 128


def test_concurrency_falls_back_to_measurement_then_default() -> None:
    assert concurrency_per_replica(_spec(), measured=40) == 40
    assert concurrency_per_replica(_spec()) == DEFAULT_CONCURRENCY_PER_RANK
