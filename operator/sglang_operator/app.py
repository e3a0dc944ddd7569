"""The operator as one process: the runtime (`runtime/`) running the per-CR loops of the reconciler, the autoscaler
and the fleet doctor, with one `OperatorSettings` handed to each.

This is the top floor: the only module that knows all three loops. The runtime knows none of them (it runs what it
is given), and the three know nothing of each other's loops (docs/architecture.md).
"""

from .autoscaling.loop import autoscaler_loop
from .controller.loop import reconcile_loop
from .doctor.loop import doctor_loop
from .runtime.runner import LeaderElection, run_operator
from .runtime.supervisor import LoopKind
from .settings import OperatorSettings


def operator_loops(settings: OperatorSettings) -> list[LoopKind]:
    """Every per-CR loop of the operator, in the order the supervisor starts them for a CR."""
    return [reconcile_loop(settings), autoscaler_loop(settings), doctor_loop(settings)]


def run_operator_process(
    settings: OperatorSettings,
    namespaces: list[str],
    verbose: bool,
    liveness: str | None = None,
    leader_election: LeaderElection | None = None,
    metrics_port: int = 0,
    metrics_address: str = "0.0.0.0",
) -> int:
    """`sglang-operator run`: the runtime with every loop, until it stops (its exit status)."""
    return run_operator(
        operator_loops(settings), settings, namespaces, verbose, liveness, leader_election, metrics_port,
        metrics_address,
    )  # fmt: skip
