"""The operator as one process: the per-CR loops of the reconciler, the autoscaler and the fleet doctor, each built
with the one `OperatorSettings`, for the runtime (`runtime.runner.run_operator`) to run.

This is the top floor: the only module that knows all three loops. The runtime knows none of them (it runs what it
is given), and the three know nothing of each other's loops (docs/architecture.md).
"""

from .autoscaling.loop import autoscaler_loop
from .controller.loop import reconcile_loop
from .doctor.loop import doctor_loop
from .runtime.supervisor import LoopKind
from .settings import OperatorSettings


def operator_loops(settings: OperatorSettings) -> list[LoopKind]:
    """Every per-CR loop of the operator, in the order the supervisor starts them for a CR."""
    return [reconcile_loop(settings), autoscaler_loop(settings), doctor_loop(settings)]
