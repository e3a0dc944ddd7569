"""The wheel reader on small synthetic wheels (both argument styles), and the download step's failure."""

from __future__ import annotations

import textwrap
import zipfile
from pathlib import Path

import pytest

from tests.support.compat.wheels import Flag, WheelDownloadError, read_release, wheel

OLD_STYLE = """
import argparse
from sglang.srt.choices import BACKENDS

EXTRA = ["x"]


class DeprecatedAction(argparse.Action):
    pass


class ServerArgs:
    @staticmethod
    def add_cli_args(parser):
        parser.add_argument("--tensor-parallel-size", "--tp-size", type=int, default=1)
        parser.add_argument("--moe-a2a-backend", type=str, choices=["none"] + BACKENDS + EXTRA)
        parser.add_argument("--enable-metrics", action="store_true")
        parser.add_argument("--lora-paths", nargs="*", action=LoRAPathAction)
        parser.add_argument("--old", action=DeprecatedAction, error_message="use --new")
        parser.add_argument("--model-path", "--model", type=str, required=True)


def prepare_server_args(argv):
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
"""

NEW_STYLE = """
import argparse
from typing import List, Literal, Optional
from sglang.srt.arg_groups.arg_utils import A, Arg, add_cli_args_from_dataclass
from sglang.srt.fields import Parallel

_INPUT_NAMESPACES = [Parallel]


class ServerArgs:
    model_path: A[str, Arg(help="weights", aliases=["--model"])]
    context_length: A[Optional[int], Arg(help="len", type_parser=human_readable_int)] = None

    @staticmethod
    def add_cli_args(parser):
        add_cli_args_from_dataclass(parser, ServerArgs)
        parser.add_argument("--enable-dp-attention", action=DeprecatedStoreTrueAction, new_flag="--attn-dp-size")


def prepare_server_args(argv):
    parser = argparse.ArgumentParser(prog="sglang serve")
"""

FIELDS = """
from typing import List, Literal, Optional

CHOICES = ["auto", "round_robin"]


class Parallel:
    _NS_PATH = "parallel"
    tp_size: A[int, Arg(help="tp", aliases=["--tensor-parallel-size"])] = 1
    attn_dp_size: A[int, "attention DP"] = 1
    dp_size: A[int, "old"] = 1
    dp_size: A[int, Arg(help="new", aliases=["--data-parallel-size"])] = 1
    moe_a2a_backend: A[Literal["none", "deepep"], "backend"] = "none"
    load_balance_method: A[str, Arg(help="lb", choices=CHOICES)] = "auto"
    enable_dp_lm_head: A[bool, "lm head"] = False
    hidden: A[bool, Arg(no_cli=True)] = False
    bucket: A[Optional[List[float]], "buckets"] = None
    ranks: int = 0
    toggle: A[Optional[bool], Arg(help="t", action=argparse.BooleanOptionalAction)] = None
"""

HTTP = """
@app.get("/health")
async def health(): ...
@app.api_route("/ready", methods=["GET"])
async def ready(): ...
"""


def _wheel(tmp_path: Path, files: dict[str, str]) -> Path:
    path = tmp_path / "sglang-9.9.9-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for name, text in files.items():
            z.writestr(name, textwrap.dedent(text))
    return path


def test_old_style_add_argument_calls(tmp_path: Path) -> None:
    path = _wheel(
        tmp_path,
        {
            "sglang/srt/server_args.py": OLD_STYLE,
            "sglang/srt/choices.py": 'BACKENDS = ["deepep", "mooncake"]\n',
            "sglang/srt/entrypoints/http_server.py": HTTP.replace("/ready", "/get_load"),
        },
    )
    rel = read_release("9.9.9", path)
    flags = rel.by_option()
    assert rel.prog == "launch_server.py" and rel.endpoints == {"/health", "/get_load"}
    assert flags["--tp-size"] == Flag(("--tensor-parallel-size", "--tp-size"), "tensor_parallel_size", "store", None,
                                      "int", None, False)  # fmt: skip
    assert flags["--moe-a2a-backend"].choices == ("none", "deepep", "mooncake", "x")
    assert flags["--enable-metrics"].nargs == "0" and not flags["--enable-metrics"].takes_value
    assert flags["--lora-paths"].nargs == "*"
    assert flags["--old"].action == "error" and flags["--old"].error == "use --new"
    assert flags["--model"].required


def test_new_style_fields(tmp_path: Path) -> None:
    path = _wheel(
        tmp_path,
        {
            "sglang/srt/server_args.py": NEW_STYLE,
            "sglang/srt/fields.py": FIELDS,
            "sglang/srt/entrypoints/http_server.py": HTTP,
        },
    )
    rel = read_release("9.9.9", path)
    flags = rel.by_option()
    assert rel.prog == "sglang serve" and rel.endpoints == {"/health", "/ready"}
    assert flags["--model"].required and flags["--model-path"].dest == "model_path"
    assert flags["--context-length"].type == "human_readable_int"
    assert flags["--tensor-parallel-size"].dest == "tp_size" and flags["--tp-size"].type == "int"
    assert flags["--attn-dp-size"].options == ("--attn-dp-size",)
    assert flags["--dp-size"].options == ("--dp-size", "--data-parallel-size")  # the last annotation counts
    assert flags["--moe-a2a-backend"].choices == ("none", "deepep")
    assert flags["--load-balance-method"].choices == ("auto", "round_robin")
    assert flags["--enable-dp-lm-head"].action == "store_true"
    assert flags["--bucket"].nargs == "+" and flags["--bucket"].type == "float"
    assert flags["--no-toggle"] is flags["--toggle"]
    assert flags["--enable-dp-attention"].action == "store_true"
    assert "--hidden" not in flags and "--ranks" not in flags


def test_an_unknown_action_is_an_error_not_a_guess(tmp_path: Path) -> None:
    path = _wheel(
        tmp_path,
        {
            "sglang/srt/server_args.py": OLD_STYLE.replace("action=LoRAPathAction", "action=SomethingNew"),
            "sglang/srt/choices.py": "BACKENDS = []\n",
            "sglang/srt/entrypoints/http_server.py": HTTP,
        },
    )
    with pytest.raises(ValueError, match="unknown argparse action 'SomethingNew'"):
        read_release("9.9.9", path)


def test_no_network_and_a_cold_cache_fail_by_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in {
        "PIP_INDEX_URL": "http://127.0.0.1:9/simple",
        "PIP_RETRIES": "0",
        "PIP_TIMEOUT": "2",
        "PIP_NO_CACHE_DIR": "1",
        "PIP_CONFIG_FILE": "/dev/null",
    }.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(WheelDownloadError, match=r"cannot download sglang==0\.5\.23 from PyPI"):
        wheel("0.5.23", tmp_path / "empty-cache")


def test_a_cached_wheel_is_used_without_pip(tmp_path: Path) -> None:
    cached = tmp_path / "sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl"
    cached.write_bytes(b"")
    assert wheel("0.5.23", tmp_path) == cached
