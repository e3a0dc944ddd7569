"""The unit tier's guard bites: a socket or a process in a unit test fails it (tests/unit/conftest.py)."""

import socket
import subprocess
import sys

import pytest

from tests.unit.conftest import NotAUnitTest


def test_a_tcp_socket_fails_a_unit_test() -> None:
    with socket.socket() as s, pytest.raises(NotAUnitTest, match="tests/integration"):
        s.bind(("127.0.0.1", 0))


def test_a_process_fails_a_unit_test() -> None:
    with pytest.raises(NotAUnitTest, match="started a process"):
        subprocess.run([sys.executable, "-c", "pass"], check=False)


def test_a_unix_socket_pair_is_allowed() -> None:
    left, right = socket.socketpair()
    left.close()
    right.close()
