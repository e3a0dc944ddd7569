"""The integration tier: real processes and local sockets (the simulator, smg, helm, promtool, scripted HTTP
servers, the wheel, benchmark smoke runs), never the cluster. Its shared fixtures live in `tests/support`."""

from tests.support.router.fixtures import fake_http  # noqa: F401  (fixture)
from tests.support.sim.fixtures import kit, procs  # noqa: F401  (fixtures)
