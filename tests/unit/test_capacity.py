"""The capacity rule ceil(Q x T x (1 + headroom) / C), shared by `plan`, the autoscaler and the benchmark."""

import pytest

from sglang_operator.api.spec import SGLangDeploymentSpec
from sglang_operator.capacity import (
    DEFAULT_CONCURRENCY_PER_RANK,
    ceil_replicas,
    concurrency_per_replica,
    plan_for_spec,
    replicas_exact,
    replicas_for_load,
    running_requests_per_rank,
    sglang_concurrency,
)
from sglang_operator.topology import topology
from tests.conftest import load_example


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


def test_in_process_dp_keeps_the_flag_per_replica_attention_dp_divides_it() -> None:
    assert concurrency_per_replica(_spec(engine={"maxRunningRequests": 16})) == 16
    assert concurrency_per_replica(_spec(engine={"maxRunningRequests": 16}, parallelism={"dp": 4})) == 64
    dpa = _spec(engine={"maxRunningRequests": 16}, parallelism={"tp": 8, "attentionDP": 8})
    assert concurrency_per_replica(dpa) == 16  # 16 // 8 = 2 per rank, 8 ranks: the flag is the replica's total
    uneven = _spec(engine={"maxRunningRequests": 100}, parallelism={"tp": 8, "attentionDP": 8})
    assert concurrency_per_replica(uneven) == 96  # 100 // 8 = 12 per rank


def test_the_default_without_the_flag_is_per_scheduler_never_divided() -> None:
    assert concurrency_per_replica(_spec(parallelism={"tp": 8, "attentionDP": 8})) == DEFAULT_CONCURRENCY_PER_RANK * 8
    assert concurrency_per_replica(_spec(parallelism={"tp": 2, "dp": 4})) == DEFAULT_CONCURRENCY_PER_RANK * 4


@pytest.mark.parametrize(
    ("flag", "attention_dp", "version", "per_rank"),
    [
        (32, 16, "0.5.23", 2),
        (8, 16, "0.5.23", 1),  # max(1, 8 // 16) from 0.5.23
        (8, 16, "0.5.22", 0),  # 8 // 16 before: every rank has zero slots
        (8, 16, "0.5.15.post1", 0),
        (None, 16, "0.5.23", DEFAULT_CONCURRENCY_PER_RANK),
        (64, 1, "0.5.9", 64),
    ],
)
def test_per_rank_follows_the_release(flag: int | None, attention_dp: int, version: str, per_rank: int) -> None:
    assert running_requests_per_rank(flag, attention_dp, version) == per_rank


def test_a_replica_sglang_starts_with_no_slots_still_plans_with_one() -> None:
    spec = _spec(
        engine={"image": "lmsysorg/sglang:v0.5.21", "maxRunningRequests": 8}, parallelism={"tp": 16, "attentionDP": 16}
    )
    assert sglang_concurrency(8, 1, 16, "0.5.21") == 0
    assert concurrency_per_replica(spec) == 1


def test_dpa_example_plans_with_what_sglang_runs() -> None:
    """examples/deepseek-v3-dpa.yaml: maxRunningRequests 32 over 16 attention-DP ranks is 2 per rank, 32 per replica
    (the operator used to plan with 32 x 16 = 512 and under-provision 16-fold)."""
    spec = SGLangDeploymentSpec.model_validate(load_example("deepseek-v3-dpa.yaml")["spec"])
    assert running_requests_per_rank(32, 16, spec.engine.sglang_version) == 2
    assert concurrency_per_replica(spec) == 32
    assert topology(spec).concurrency_per_replica == 32  # what the autoscaler and status read
    plan = plan_for_spec(spec, qps=20, latency=12, headroom=0.3)
    assert plan == {
        "qps": 20,
        "latencySeconds": 12,
        "headroom": 0.3,
        "concurrencyPerReplica": 32,
        "replicas": 10,  # ceil(20 x 12 x 1.3 / 32) = ceil(9.75)
        "gpusPerReplica": 16,
        "totalGPUs": 160,
    }


def test_plan_for_spec_prefers_the_explicit_target_and_refuses_no_load() -> None:
    spec = _spec(engine={"maxRunningRequests": 16}, autoscaling={"targets": {"concurrencyPerReplica": 48}})
    assert plan_for_spec(spec, qps=48, latency=1, headroom=0)["replicas"] == 1
    with pytest.raises(ValueError):
        plan_for_spec(spec, qps=0, latency=1)


def test_concurrency_falls_back_to_measurement_then_default() -> None:
    assert concurrency_per_replica(_spec(), measured=40) == 40
    assert concurrency_per_replica(_spec()) == DEFAULT_CONCURRENCY_PER_RANK
