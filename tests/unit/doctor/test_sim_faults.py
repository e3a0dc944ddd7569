"""The simulator's fault knobs that produce each symptom the doctor diagnoses, on one replica of a fleet."""

import pytest

from sglang_sim.args import parse, resolve
from sglang_sim.engine import Engine, Job
from sglang_sim.knobs import knobs_from_env
from sglang_sim.server import capacity, engine_config
from sglang_sim.tokens import prompt_from_text
from sglang_sim.versions import DEFAULT_VERSION

SLOW = {"SGLANG_SIM_SLOWDOWN": "4", "SGLANG_SIM_SLOW_REPLICAS": "1,3"}
COLD = {"SGLANG_SIM_CACHE_DISABLED": "1", "SGLANG_SIM_COLD_CACHE_REPLICAS": "2"}


@pytest.mark.parametrize(
    ("replica", "slowdown", "cold"), [("0", 1.0, False), ("1", 4.0, False), ("2", 1.0, True), ("3", 4.0, False)]
)
def test_faults_apply_only_to_the_replicas_they_name(replica: str, slowdown: float, cold: bool) -> None:
    knobs = knobs_from_env({**SLOW, **COLD, "SGLANG_SIM_REPLICA": replica})
    assert (knobs.slowdown, knobs.cache_disabled) == (slowdown, cold)
    assert knobs.effective_decode_rate == pytest.approx(100.0 / slowdown)


def test_without_a_replica_list_a_fault_applies_to_every_replica_and_bad_values_fail_loudly() -> None:
    assert knobs_from_env({"SGLANG_SIM_SLOWDOWN": "2"}).slowdown == 2.0
    assert knobs_from_env({"SGLANG_SIM_CACHE_DISABLED": "true"}).cache_disabled
    assert not knobs_from_env({"SGLANG_SIM_CACHE_DISABLED": "0"}).cache_disabled
    with pytest.raises(ValueError, match="SGLANG_SIM_SLOWDOWN"):
        knobs_from_env({"SGLANG_SIM_SLOWDOWN": "0.5"})


def _engine(env: dict[str, str]) -> Engine:
    args = resolve(parse(["--model-path", "m"], DEFAULT_VERSION), DEFAULT_VERSION).args
    knobs = knobs_from_env(env)
    return Engine(engine_config(args, knobs, capacity(args, knobs)), 0.0)


def test_a_cold_cache_replica_never_hits_and_a_slow_one_decodes_slower() -> None:
    prompt = prompt_from_text("a shared system prompt " * 40)
    hits = {}
    for name, env in (("warm", {}), ("cold", {"SGLANG_SIM_CACHE_DISABLED": "1"})):
        engine = _engine(env)
        for i in range(3):
            engine.submit(Job(f"r{i}", prompt, 4), float(i))
            (started,) = engine.admit(float(i))
            engine.finish(started.rid, float(i) + 1)
        hits[name] = engine.loads(3.0)[0].cache_hit_rate
    assert hits["warm"] > 0.5 and hits["cold"] == 0.0
    slow = _engine({"SGLANG_SIM_SLOWDOWN": "4"})
    slow.submit(Job("s", prompt, 4), 0.0)
    assert slow.admit(0.0)[0].token_interval == pytest.approx(0.04)
