"""sglang.launch_server flag parsing, SGLang's resolution rules and start-up validation (the default release,
0.5.23; per-release behaviour in test_sim_versions.py)."""

from __future__ import annotations

import pytest

from sglang_sim import main
from sglang_sim.args import ArgsError, ServerArgs, launch_problem, parse, resolve
from sglang_sim.knobs import SimKnobs, knobs_from_env


def resolved(*argv: str) -> ServerArgs:
    return resolve(parse(["--model-path", "org/model", *argv])).args


def test_abbreviations_and_aliases_parse_like_sglang() -> None:
    a = resolved("--tp", "8", "--dp", "2", "--ep", "4")
    assert (a.tp_size, a.dp_size, a.ep_size) == (8, 2, 4)
    ns = parse(["--model", "m", "--tensor-parallel-size", "2", "--expert-parallel-size", "2"])
    assert (ns.model_path, ns.tp_size, ns.ep_size) == ("m", 2, 2)


def test_any_flag_the_release_has_is_accepted() -> None:
    ns = parse(["--model", "m", "--cuda-graph-max-bs-decode", "8", "--enable-torch-compile", "--tp", "2"])
    assert ns.tp_size == 2 and ns.cuda_graph_max_bs_decode == 8


def test_unknown_and_ambiguous_flags_exit_2_with_argparses_message(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--model", "m", "--no-such-flag", "1"]) == 2
    assert "sglang serve: error: unrecognized arguments: --no-such-flag 1" in capsys.readouterr().err
    # 0.5.23 split --cuda-graph-max-bs into -decode and -prefill: the old spelling is an ambiguous prefix there.
    assert main(["--model", "m", "--cuda-graph-max-bs", "8"]) == 2
    assert "ambiguous option: --cuda-graph-max-bs could match" in capsys.readouterr().err


def test_defaults() -> None:
    a = resolved()
    assert a.served_model_name == "org/model"  # defaults to the model path
    assert (a.host, a.port, a.tp_size, a.dp_size, a.attn_dp_size, a.nnodes) == ("127.0.0.1", 30000, 1, 1, 1, 1)
    assert a.load_balance_method == "round_robin"
    assert a.num_dp_ranks == 1 and a.gpus_per_replica == 1


def test_old_dp_attention_dialect_becomes_attention_dp() -> None:
    res = resolve(parse(["--model", "m", "--tp", "8", "--dp", "4", "--enable-dp-attention"]))
    a = res.args
    assert (a.attn_dp_size, a.dp_size, a.enable_dp_attention) == (4, 1, True)
    assert a.gpus_per_replica == 8 and a.num_dp_ranks == 4
    assert any("deprecated" in n for n in res.notes)


def test_dp_attention_with_dp_one_is_disabled() -> None:
    a = resolved("--tp", "8", "--enable-dp-attention")
    assert (a.attn_dp_size, a.enable_dp_attention) == (1, False)


def test_in_process_dp_multiplies_gpus_attention_dp_does_not() -> None:
    assert resolved("--tp", "4", "--dp", "2").gpus_per_replica == 8
    assert resolved("--tp", "4", "--attn-dp-size", "2").gpus_per_replica == 4


def test_a2a_backend_forces_ep_to_tp() -> None:
    res = resolve(parse(["--model", "m", "--tp", "8", "--moe-a2a-backend", "deepep"]))
    assert res.args.ep_size == 8
    assert any("expert parallel size is adjusted from 1" in n for n in res.notes)


def test_dp_lm_head_dropped_without_any_dp_kept_with_attention_dp() -> None:
    assert resolved("--enable-dp-lm-head").enable_dp_lm_head is False
    assert resolved("--tp", "4", "--attn-dp-size", "4", "--enable-dp-lm-head").enable_dp_lm_head is True


def test_multi_node_gpus_per_node() -> None:
    a = resolved("--tp", "16", "--nnodes", "2", "--node-rank", "1", "--dist-init-addr", "10.0.0.1:5000")
    assert (a.gpus_per_replica, a.gpus_per_node, a.node_rank) == (16, 8, 1)


@pytest.mark.parametrize(
    ("argv", "kind", "fragment"),
    [
        (["--tp", "3", "--nnodes", "2", "--dist-init-addr", "a:1"], "AssertionError", "divisible by number of nodes"),
        (
            ["--tp", "2", "--dp", "2", "--nnodes", "2", "--dist-init-addr", "a:1"],
            "AssertionError",
            "multi-node data-parallel replicas are not supported",
        ),
        (["--tp", "4", "--dp", "2", "--attn-dp-size", "2"], "ValueError", "attention data parallelism are not"),
        (["--tp", "4", "--attn-dp-size", "3"], "AssertionError", ""),  # a bare `assert`
        (["--attn-dp-size", "0"], "ValueError", "--attn-dp-size must be positive"),
        (["--tp", "2", "--dp", "2", "--enable-dp-lm-head"], "AssertionError", "requires attention DP"),
        (["--served-model-name", "base:lora"], "AssertionError", "cannot contain a colon"),
        (["--tp", "8", "--moe-a2a-backend", "pplx"], "AssertionError", "requires attention DP with at least 2"),
        (
            ["--tp", "8", "--attn-dp-size", "4", "--moe-a2a-backend", "flashinfer"],
            "AssertionError",
            "equal to --tp-size",
        ),
        (["--tp", "8", "--moe-a2a-backend", "flashinfer_megamoe"], "AssertionError", "equal to --tp-size"),
        (["--nnodes", "0"], "ZeroDivisionError", "integer modulo by zero"),
    ],
)
def test_invalid_combinations_fail_like_sglang(argv: list[str], kind: str, fragment: str) -> None:
    ns = parse(["--model", "m", *argv])
    with pytest.raises(ArgsError) as err:
        resolve(ns)
    assert err.value.kind == kind
    assert fragment in err.value.message
    assert fragment or err.value.message == ""


@pytest.mark.parametrize(
    "argv",
    [
        ["--tp", "4", "--ep", "3"],  # SGLang does not check tp % ep
        ["--tp", "8", "--attn-dp-size", "2", "--moe-a2a-backend", "pplx"],
        ["--tp", "8", "--attn-dp-size", "8", "--moe-a2a-backend", "flashinfer"],
        ["--tp", "0"],
        ["--tp", "2", "--nnodes", "2", "--node-rank", "2", "--dist-init-addr", "a:1"],
        ["--tp", "2", "--nnodes", "2"],
    ],
)
def test_what_sglangs_checks_accept_passes(argv: list[str]) -> None:
    resolve(parse(["--model", "m", *argv]))


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["--tp", "0"], "tp_size=0"),
        (["--dp", "-1"], "dp_size=-1"),
        (["--tp", "2", "--nnodes", "2", "--node-rank", "2", "--dist-init-addr", "a:1"], "node_rank=2"),
        (["--tp", "2", "--nnodes", "2"], "without --dist-init-addr"),
    ],
)
def test_what_sglang_accepts_but_cannot_run_is_a_launch_failure(argv: list[str], fragment: str) -> None:
    problem = launch_problem(resolve(parse(["--model", "m", *argv])).args, 64)
    assert problem is not None and fragment in problem
    assert launch_problem(resolved("--tp", "2"), 64) is None


def test_main_exits_1_on_validation_error_and_2_on_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--model", "m", "--tp", "3", "--nnodes", "2", "--dist-init-addr", "a:1"]) == 1
    assert "AssertionError: tp_size must be divisible by number of nodes" in capsys.readouterr().err
    assert main(["--model", "m", "--tp", "0"]) == 1  # passes the checks, fails at launch
    assert main(["--tp", "2"]) == 2  # --model-path is required
    assert main(["--model", "m", "--tp", "two"]) == 2


def test_public_dict_hides_api_keys() -> None:
    d = resolved("--api-key", "secret", "--admin-api-key", "root").public_dict()
    assert d["api_key"] is None and d["admin_api_key"] is None
    assert d["tp_size"] == 1 and d["served_model_name"] == "org/model"


def test_knobs_defaults_and_overrides() -> None:
    assert knobs_from_env({}) == SimKnobs()
    k = knobs_from_env(
        {
            "SGLANG_SIM_STARTUP_SECONDS": "0.5",
            "SGLANG_SIM_DECODE_TOKENS_PER_S": "50",
            "SGLANG_SIM_TIME_SCALE": "0.1",
            "SGLANG_SIM_FAIL_STARTUP": "oom",
            "SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION": "false",
        }
    )
    assert k.startup_seconds == 0.5 and k.fails and not k.health_generation
    assert k.effective_decode_rate == pytest.approx(500.0)  # 50 tok/s, 10x faster wall clock
    assert k.scaled(2.0) == pytest.approx(0.2)
    assert not knobs_from_env({"SGLANG_SIM_FAIL_STARTUP": "false"}).fails


@pytest.mark.parametrize(
    "env",
    [
        {"SGLANG_SIM_TIME_SCALE": "0"},
        {"SGLANG_SIM_DECODE_TOKENS_PER_S": "fast"},
        {"SGLANG_SIM_MAX_RUNNING": "0"},
        {"SGLANG_SIM_STARTUP_SECONDS": "-1"},
    ],
)
def test_bad_knobs_are_rejected(env: dict[str, str]) -> None:
    with pytest.raises(ValueError, match=next(iter(env))):
        knobs_from_env(env)
