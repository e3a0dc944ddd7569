"""The simulator plays one SGLang release: its flags, values, checks, messages and endpoints, each at its boundary."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest
import yaml

from sglang_operator.api.groups import worker_groups
from sglang_operator.api.releases import DTYPES, KV_CACHE_DTYPES, MOE_A2A_BACKEND_SINCE, format_version, parse_version
from sglang_operator.api.spec import SGLangDeploymentSpec
from sglang_operator.topology import launch_args, topology
from sglang_sim import main
from sglang_sim.args import ArgsError, launch_problem, parse, resolve
from sglang_sim.knobs import SimKnobs
from sglang_sim.server import capacity
from sglang_sim.sglang_releases import FLAGS, RELEASES
from sglang_sim.versions import DEFAULT_VERSION, UnknownVersion, normalize, split_version
from tests.conftest import REPO

M = ["--model-path", "m"]


def play(version: str, *argv: str) -> int:
    return main(["--sim-version", version, *M, *argv, "--port", "0", "--tp-size", "0"])  # exits before serving


def exit_code(version: str, *argv: str) -> int:
    """argparse's exit code (2) for a refusal; 0 when the release's parser accepts the flags."""
    try:
        parse([*M, *argv], version)
    except SystemExit as e:
        return int(e.code or 0)
    return 0


def test_the_default_release_is_the_default_images() -> None:
    assert DEFAULT_VERSION == "0.5.23" == RELEASES[-1]
    assert split_version(["--tp", "2"], {}) == ("0.5.23", ["--tp", "2"])


def test_version_from_flag_then_env_then_default() -> None:
    assert split_version(["--sim-version", "0.5.21", "--tp", "2"], {"SGLANG_SIM_VERSION": "0.5.9"}) == (
        "0.5.21",
        ["--tp", "2"],
    )
    assert split_version(["--sim-version=v0.5.20", "--tp", "2"], {}) == ("0.5.20", ["--tp", "2"])
    assert split_version(["--tp", "2"], {"SGLANG_SIM_VERSION": "0.5.9"})[0] == "0.5.9"
    assert normalize("0.5.15.post1") == "0.5.15.post1"  # a post release the table has plays itself
    assert normalize("0.5.16.post3") == "0.5.16"  # one it lacks plays its base release
    with pytest.raises(UnknownVersion, match=r"0\.5\.9 to 0\.5\.23"):
        normalize("0.5.24")


def test_an_unknown_release_refuses_to_start(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--sim-version", "0.6.0", *M]) == 2
    assert "not one the simulator knows" in capsys.readouterr().err


def test_attn_dp_size_exists_from_0_5_22_only(capsys: pytest.CaptureFixture[str]) -> None:
    assert exit_code("0.5.21", "--attn-dp-size", "2") == 2
    assert "unrecognized arguments: --attn-dp-size 2" in capsys.readouterr().err
    assert exit_code("0.5.22", "--attn-dp-size", "2") == 0


def test_old_releases_parse_sizes_under_their_long_names() -> None:
    a = resolve(parse([*M, "--tp", "8", "--dp", "2", "--ep", "4"], "0.5.9"), "0.5.9").args
    assert (a.tp_size, a.dp_size, a.ep_size) == (8, 2, 4)


def test_the_old_dialect_is_attention_dp_before_0_5_22() -> None:
    a = resolve(parse([*M, "--tp", "8", "--dp-size", "4", "--enable-dp-attention"], "0.5.21"), "0.5.21").args
    assert (a.attn_dp_size, a.dp_size, a.gpus_per_replica, a.num_dp_ranks) == (4, 1, 8, 4)
    plain = resolve(parse([*M, "--tp", "8", "--enable-dp-attention"], "0.5.9"), "0.5.9").args
    assert plain.attn_dp_size == 1 and not plain.enable_dp_attention  # dp 1 disables it


@pytest.mark.parametrize("backend", sorted(b for b, since in MOE_A2A_BACKEND_SINCE.items() if since > (0, 5, 9)))
def test_moe_a2a_backend_choices_follow_the_release(backend: str) -> None:
    """The same table the API validates with (api/releases.py, checked against the wheels in tests/compat)."""
    first = format_version(MOE_A2A_BACKEND_SINCE[backend])
    before = RELEASES[RELEASES.index(first) - 1]
    assert exit_code(before, "--moe-a2a-backend", backend) == 2
    assert exit_code(first, "--moe-a2a-backend", backend) == 0


@pytest.mark.parametrize(
    ("version", "argv", "refused"),
    [
        ("0.5.21", ["--tp", "8", "--moe-a2a-backend", "pplx"], None),  # the check came with 0.5.22
        ("0.5.22", ["--tp", "8", "--moe-a2a-backend", "pplx"], "requires attention DP with at least 2 groups"),
        ("0.5.12", ["--tp", "8", "--moe-a2a-backend", "flashinfer"], None),  # came with 0.5.13
        (
            "0.5.13",
            ["--tp", "8", "--moe-a2a-backend", "flashinfer"],
            "Flashinfer MoE A2A is only supported with dp_size == tp_size and --enable-dp-attention",
        ),
        ("0.5.13", ["--tp", "8", "--dp", "8", "--enable-dp-attention", "--moe-a2a-backend", "flashinfer"], None),
        (
            "0.5.20",
            ["--tp", "8", "--dp", "4", "--enable-dp-attention", "--moe-a2a-backend", "flashinfer_megamoe"],
            "FlashInfer MegaMOE is only supported with dp_size == tp_size and --enable-dp-attention",
        ),
        ("0.5.9", ["--tp", "2", "--dp", "2", "--enable-dp-lm-head"], "Please enable dp attention when setting"),
        ("0.5.23", ["--tp", "2", "--dp", "2", "--enable-dp-lm-head"], "--enable-dp-lm-head requires attention DP"),
        (
            "0.5.21",
            ["--tp", "2", "--dp", "2", "--nnodes", "2", "--dist-init-addr", "a:1"],
            "multi-node data parallel is not supported unless dp attention!",
        ),
        (
            "0.5.21",
            ["--tp", "4", "--dp", "2", "--nnodes", "2", "--enable-dp-attention", "--dist-init-addr", "a:1"],
            None,
        ),
        ("0.5.9", ["--served-model-name", "a:b"], "cannot contain a colon"),
    ],
)
def test_checks_come_with_their_release(version: str, argv: list[str], refused: str | None) -> None:
    ns = parse([*M, *argv], version)
    if refused is None:
        resolve(ns, version)
        return
    with pytest.raises(ArgsError) as err:
        resolve(ns, version)
    assert refused in err.value.message


def test_usage_errors_name_the_releases_program(capsys: pytest.CaptureFixture[str]) -> None:
    assert exit_code("0.5.9", "--nope") == 2
    assert "launch_server.py: error: unrecognized arguments: --nope" in capsys.readouterr().err
    assert exit_code("0.5.23", "--tp-size", "two") == 2
    assert "sglang serve: error: argument --tp-size/--tensor-parallel-size: invalid int value: 'two'" in (
        capsys.readouterr().err
    )


def _get(url: str) -> int:
    async def fetch() -> int:
        async with aiohttp.ClientSession() as s, s.get(url) as r:
            return r.status

    return asyncio.run(fetch())


@pytest.mark.parametrize(("version", "ready"), [("0.5.19", 404), ("0.5.20", 200), ("0.5.23", 200)])
def test_ready_is_served_from_0_5_20(kit: Any, version: str, ready: int) -> None:
    async def body() -> None:
        async with kit.run(M, version=version) as sim, aiohttp.ClientSession() as s:
            async with s.get(f"{kit.url(sim)}/ready") as r:
                assert r.status == ready
            async with s.get(f"{kit.url(sim)}/health") as r:
                assert r.status == 200
            async with s.get(f"{kit.url(sim)}/server_info") as r:
                assert (await r.json())["version"] == version

    asyncio.run(body())


def _dpa_spec() -> SGLangDeploymentSpec:
    doc = yaml.safe_load((REPO / "examples" / "deepseek-v3-dpa.yaml").read_text())
    return SGLangDeploymentSpec.model_validate(doc["spec"])


def test_the_simulator_runs_the_capacity_the_operator_plans_with() -> None:
    """examples/deepseek-v3-dpa.yaml: the rendered command, parsed and resolved by the simulator, gives 16 ranks of
    32 // 16 = 2, i.e. the 32 per replica that topology (autoscaler, status) and plan use."""
    spec = _dpa_spec()
    argv = launch_args(spec, node_rank=0, dist_init_host="10.0.0.1")
    flags = argv[argv.index("sglang.launch_server") + 1 :]
    version = spec.engine.sglang_version
    args = resolve(parse(flags, version), version).args
    cap = capacity(args, SimKnobs())
    assert (args.num_dp_ranks, cap.max_running_per_rank) == (16, 2)
    assert cap.max_running_per_rank * args.num_dp_ranks == topology(spec).concurrency_per_replica == 32


def test_without_the_flag_each_scheduler_keeps_the_whole_default() -> None:
    args = resolve(parse([*M, "--tp", "8", "--attn-dp-size", "8"])).args
    cap = capacity(args, SimKnobs(max_running=64))
    assert (cap.max_running_per_rank, cap.max_running_requests) == (64, 512)
    spec = SGLangDeploymentSpec.model_validate({"model": {"path": "m"}, "parallelism": {"tp": 8, "attentionDP": 8}})
    assert topology(spec).concurrency_per_replica == 512  # the operator's default is the simulator's


def test_a_flag_below_the_attention_dp_size_leaves_no_slot_before_0_5_23() -> None:
    old = resolve(
        parse([*M, "--tp", "16", "--dp", "16", "--enable-dp-attention", "--max-running-requests", "8"], "0.5.21"),
        "0.5.21",
    )
    assert "leaves each rank 0 slots" in (launch_problem(old.args, 64) or "")
    new = resolve(parse([*M, "--tp", "16", "--attn-dp-size", "16", "--max-running-requests", "8"]))
    assert launch_problem(new.args, 64) is None and capacity(new.args, SimKnobs()).max_running_per_rank == 1


def test_every_release_takes_the_kv_contract_the_operator_renders() -> None:
    """`disaggregation.dtype` offers exactly the release's `--dtype` choices (the same in every supported release,
    tests/compat reads them from the wheels into the simulator's table), and each release's parser accepts the PD
    launch command with the whole contract on both roles (issue 37)."""

    def choices(option: str, version: str) -> set[str]:
        rows = [r for r in FLAGS if option in r[1] and _covers(r[0], version)]
        assert len(rows) == 1, (option, version)
        return set(rows[0][6] or ())

    for version in RELEASES:
        assert choices("--dtype", version) == set(DTYPES), version
        base = parse_version(version)
        assert choices("--kv-cache-dtype", version) == {
            dtype for dtype, (first, last) in KV_CACHE_DTYPES.items() if first <= base <= last
        }, version
        raw = {"model": {"path": "m"}, "engine": {"version": version},
               "disaggregation": {"pageSize": 64, "kvCacheDtype": "fp8_e4m3", "dtype": "half"},
               "workerGroups": [{"name": "p", "role": "prefill", "replicas": 1, "parallelism": {}},
                                {"name": "d", "role": "decode", "replicas": 1, "parallelism": {}}]}  # fmt: skip
        for group in worker_groups(SGLangDeploymentSpec.model_validate(raw)):
            argv = launch_args(group.spec, pd=group.pd)[3:]
            assert exit_code(version, *argv) == 0, (version, group.name)


def _covers(span: str, version: str) -> bool:
    """Whether a table row's release span (`0.5.9-0.5.23`, `0.5.19`) holds `version`."""
    first, _, last = span.partition("-")
    order = list(RELEASES)
    return order.index(first) <= order.index(version) <= order.index(last or first)
