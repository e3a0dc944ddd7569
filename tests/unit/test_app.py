"""`app.operator_loops`: the three per-CR loops the runtime runs, each for the CRs that want it."""

from sglang_operator.app import operator_loops
from sglang_operator.settings import OperatorSettings


def test_every_cr_gets_a_reconcile_loop_and_the_others_follow_their_switches() -> None:
    loops = {kind.name: kind for kind in operator_loops(OperatorSettings())}
    assert list(loops) == ["reconcile", "autoscaler", "doctor"]
    plain = {"spec": {"model": {"path": "m"}, "diagnostics": {"enabled": False}}}
    scaled = {"spec": {"model": {"path": "m"}, "autoscaling": {"enabled": True}}}
    assert [name for name, kind in loops.items() if kind.wanted(plain)] == ["reconcile"]
    assert [name for name, kind in loops.items() if kind.wanted(scaled)] == ["reconcile", "autoscaler", "doctor"]
