"""Nothing lost (issue 38): each planted fault must be caught by the tests named for it.

`python -m tests.mutations.run [--only NAME ...] [--list]` copies the package (`operator/sglang_operator`) into a
temporary folder, plants one fault there (an exact text replacement whose old text must occur exactly once, so a
fault whose code moved fails loudly instead of planting nothing), and runs only the tests named for that fault
against the copy: first on the copy unchanged (they must pass), then on a fresh copy with the fault (at least one
must fail). The repository itself is never edited.

The copy is first on PYTHONPATH: the editable install's finder is appended to `sys.meta_path`, after the path finder,
so the copy wins. That is checked, not assumed: this module is also loaded into each pytest run as a plugin
(`-p tests.mutations.run`) and ends the run (exit status WRONG_PACKAGE) when any `sglang_operator` module was
imported from elsewhere.

The end is a table (fault, tests, unchanged, faulted, seconds); the exit status is non-zero when a fault survived,
the unchanged package failed its tests, or a run ended in an error. No cluster is needed: the tests named are unit
and integration ones (docs/testing.md names the e2e tests that would catch each fault too).
"""

from __future__ import annotations

import argparse
import importlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.tiers import counts

REPO = Path(__file__).resolve().parents[2]
PACKAGE_NAME = "sglang_operator"
PACKAGE = REPO / "operator" / PACKAGE_NAME
SHARED = ("crds", "charts")
"""Read through the package's own location (`api/crdgen.py`: the committed CRDs, three folders above it): linked
beside the copy as they are beside the package."""
COPY_ENV = "SGLANG_OPERATOR_MUTATION_COPY"
"""The copy's package folder, for the plugin's check in the pytest run."""
PLUGIN = "tests.mutations.run"
WRONG_PACKAGE = 11
"""The pytest run's exit status when a module of the package came from somewhere other than the copy."""


@dataclass(frozen=True)
class Fault:
    """One planted fault: `old` (which must occur exactly once in `file`) replaced by `new`."""

    name: str
    description: str
    file: str
    """The path inside the package."""
    old: str
    new: str
    tests: tuple[str, ...]
    """pytest node ids, from the repository root: the tests that must catch it."""


FAULTS: tuple[Fault, ...] = (
    Fault(
        name="drain-deletes-listed",
        description="a draining replica is deleted once empty even while a router still lists it",
        file="controller/planner.py",
        old="drained = replica.index in deregistered and loads.get(replica.index) == 0 and settled",
        new="drained = loads.get(replica.index) == 0 and settled",
        tests=(
            "tests/unit/controller/test_planner.py::test_drain_waits_for_deregistration_and_zero_in_flight",
            "tests/integration/controller/test_unreadable_routers.py"
            "::test_a_drained_replica_is_not_deleted_while_a_router_could_not_be_read",
        ),
    ),
    Fault(
        name="routed-before-ready",
        description="a worker with an address is registered on the routers before its pod is Ready",
        file="controller/steps.py",
        old="if r.url and r.ready and r.draining_since is None",
        new="if r.url and r.draining_since is None",
        tests=("tests/unit/controller/test_steps.py::test_a_worker_is_routed_only_while_its_pod_is_ready",),
    ),
    Fault(
        name="stale-entry-kept",
        description="a router entry whose URL no replica has any more (a deleted worker) is never removed",
        file="router/membership.py",
        old="if entry is None or worker.url in keep or not entry.matches(worker):",
        new="if entry is not None and (worker.url in keep or not entry.matches(worker)):",
        tests=(
            "tests/unit/controller/test_membership_and_status.py"
            "::test_membership_adds_missing_removes_stale_and_duplicates",
            "tests/integration/router/test_pd_membership.py::test_unknown_urls_and_types_are_removed_and_new_ones_added",
        ),
    ),
    Fault(
        name="early-cut-over",
        description="the router Service switches KV epoch once any new replica is ready and listed, not every one",
        file="controller/cutover.py",
        old="ready >= wanted > 0",
        new="ready > 0",
        tests=("tests/integration/controller/test_cutover.py::test_the_service_stays_while",),
    ),
    Fault(
        name="scale-down-on-missing-metrics",
        description="missing or stale metrics drop the fleet to minReplicas instead of holding its count",
        file="autoscaling/policy.py",
        old="held = clamp_count(current.desired, low, high)",
        new="held = clamp_count(low, low, high)",
        tests=(
            "tests/unit/autoscaling/test_policy.py::test_missing_or_stale_metrics_hold",
            "tests/unit/autoscaling/test_policy.py::test_hold_never_scales_down_but_respects_new_bounds",
            "tests/unit/autoscaling/test_policy.py::test_a_reading_or_a_demand_no_fleet_gives_holds_and_says_which",
        ),
    ),
    Fault(
        name="cel-rule-dropped",
        description="the CRD leaves out one rule's CEL twin (spec.autoscaling.prometheusURL) while validate keeps it",
        file="api/crdgen.py",
        old="[v for rule in RULES if rule not in on_item for v in validations(rule)]",
        new="[v for rule in RULES[1:] if rule not in on_item for v in validations(rule)]",
        tests=(
            "tests/unit/api/test_crd.py::test_every_rule_is_a_cel_validation_with_the_same_message",
            "tests/unit/api/test_crd.py::test_committed_crds_match_the_generator",
        ),
    ),
    Fault(
        name="netpol-without-bootstrap-port",
        description="a prefill/decode fleet's NetworkPolicy admits routers and the operator to the engine port only",
        file="render/network.py",
        old='engine_port.append({"protocol": "TCP", "port": spec.disaggregation.bootstrap_port})',
        new="pass",
        tests=(
            "tests/unit/render/test_pd_render.py"
            "::test_the_network_policy_admits_routers_and_the_operator_to_the_bootstrap_port",
        ),
    ),
    Fault(
        name="unchanged-pass-writes-status",
        description="a pass whose status equals the last one patches it anyway (the no-change check always says yes)",
        file="controller/status.py",
        old="return any(previous.get(key) != value for key, value in new.items())",
        new="return True",
        tests=(
            "tests/unit/api/test_worker_groups.py::test_a_scale_target_sizes_its_group_and_reads_back_the_count",
            "tests/integration/controller/test_inferencepool.py"
            "::test_a_pass_labels_ready_workers_and_a_drain_drops_the_label_in_its_own_apply",
        ),
    ),
)


class FaultMoved(Exception):
    """A fault's old text no longer occurs exactly once in its file: the code moved, the fault must follow it."""


def occurrences_problem(fault: Fault, text: str) -> str | None:
    """Why `fault` cannot be planted in `text` (its file's content), or None. Pure."""
    found = text.count(fault.old)
    if found != 1:
        return f"{fault.name}: the old text occurs {found} times in {fault.file}, not once: {fault.old!r}"
    if fault.new == fault.old:
        return f"{fault.name}: the new text is the old one"
    return None


def check_faults(faults: tuple[Fault, ...]) -> list[str]:
    """Every fault's problems against the package as it is in the repository (names must be unique too)."""
    problems = [f"{name}: named twice" for name in {f.name for f in faults} if sum(f.name == name for f in faults) > 1]
    problems += [f"{fault.name}: no test named to catch it" for fault in faults if not fault.tests]
    for fault in faults:
        path = PACKAGE / fault.file
        if not path.is_file():
            problems.append(f"{fault.name}: no file {fault.file} in the package")
        elif (problem := occurrences_problem(fault, path.read_text())) is not None:
            problems.append(problem)
    return problems


def copy_package(root: Path) -> Path:
    """The package copied to `root/operator/sglang_operator` (without bytecode), with the repository folders it
    reads through its own location linked beside it; returns the copy's package folder."""
    package = root / "operator" / PACKAGE_NAME
    shutil.copytree(PACKAGE, package, ignore=shutil.ignore_patterns("__pycache__"))
    for name in SHARED:
        (root / name).symlink_to(REPO / name, target_is_directory=True)
    return package


def plant(fault: Fault, package: Path) -> None:
    path = package / fault.file
    text = path.read_text()
    if (problem := occurrences_problem(fault, text)) is not None:
        raise FaultMoved(problem)
    path.write_text(text.replace(fault.old, fault.new))


@dataclass(frozen=True)
class Outcome:
    """One pytest run over a fault's tests."""

    code: int
    passed: int
    failed: int
    skipped: int
    seconds: float
    output: str

    @property
    def verdict(self) -> str:
        """pass (every test ran and passed), fail (some failed), or what else ended the run. A skipped test is an
        error: a test that does not run catches nothing."""
        if self.code == WRONG_PACKAGE:
            return "ERROR (package not the copy)"
        if self.skipped:
            return f"ERROR ({self.skipped} skipped)"
        if self.code == 0 and self.failed == 0 and self.passed > 0:
            return "pass"
        if self.code == 1 and self.failed > 0:
            return "fail"
        return f"ERROR (pytest exit {self.code})"


def run_tests(fault: Fault, planted: bool) -> Outcome:
    """The fault's tests against a fresh copy of the package, with the fault planted or not."""
    with tempfile.TemporaryDirectory(prefix=f"mutation-{fault.name}-") as tmp:
        root = Path(tmp)
        package = copy_package(root)
        if planted:
            plant(fault, package)
        junit = root / "junit.xml"
        path = [str(package.parent), *filter(None, [os.environ.get("PYTHONPATH")])]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(path), COPY_ENV: str(package)}
        command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", PLUGIN, "-q",
                   f"--junitxml={junit}", *fault.tests]  # fmt: skip
        start = time.monotonic()
        done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, check=False)
        seconds = time.monotonic() - start
        passed, failed, skipped = counts(junit) if junit.exists() else (0, 0, 0)
        return Outcome(done.returncode, passed, failed, skipped, seconds, done.stdout + done.stderr)


@dataclass(frozen=True)
class Result:
    fault: Fault
    unchanged: Outcome
    faulted: Outcome | None
    """None when the unchanged run did not pass (the faulted one would prove nothing)."""

    @property
    def ok(self) -> bool:
        return self.unchanged.verdict == "pass" and self.faulted is not None and self.faulted.verdict == "fail"

    def row(self) -> tuple[str, str, str, str, str]:
        faulted = self.faulted
        if faulted is None:
            caught = "not run"
        elif faulted.verdict == "fail":
            caught = f"caught ({faulted.failed}/{faulted.passed + faulted.failed} failed)"
        elif faulted.verdict == "pass":
            caught = "SURVIVED"
        else:
            caught = faulted.verdict
        seconds = self.unchanged.seconds + (faulted.seconds if faulted is not None else 0.0)
        return self.fault.name, str(len(self.fault.tests)), self.unchanged.verdict, caught, f"{seconds:.1f}"


def table(results: list[Result]) -> str:
    header = ("fault", "tests", "unchanged", "faulted", "seconds")
    rows = [header, *(r.row() for r in results)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    right = {1, 4}  # the numbers

    def line(row: tuple[str, ...]) -> str:
        cells = (
            cell.rjust(w) if i in right else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        )
        return "  ".join(cells).rstrip()

    return "\n".join([line(header), line(tuple("-" * w for w in widths)), *(line(row) for row in rows[1:])])


def tail(output: str, lines: int = 40) -> str:
    return "\n".join("    " + line for line in output.rstrip().splitlines()[-lines:])


def run_fault(fault: Fault) -> Result:
    print(f"{fault.name}: {fault.description}", flush=True)
    unchanged = run_tests(fault, planted=False)
    if unchanged.verdict != "pass":
        print(f"  the unchanged package does not pass: {unchanged.verdict}\n{tail(unchanged.output)}", flush=True)
        return Result(fault, unchanged, None)
    faulted = run_tests(fault, planted=True)
    if faulted.verdict == "pass":
        print("  SURVIVED: every test named for it passes with the fault planted", flush=True)
    elif faulted.verdict != "fail":
        print(f"  the faulted run ended in an error: {faulted.verdict}\n{tail(faulted.output)}", flush=True)
    return Result(fault, unchanged, faulted)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.mutations.run", description=__doc__.splitlines()[0])
    names = [fault.name for fault in FAULTS]
    parser.add_argument("--only", action="append", choices=names, metavar="NAME",
                        help=f"run only this fault (repeatable): {', '.join(names)}")  # fmt: skip
    parser.add_argument("--list", action="store_true", help="list the faults and their tests, run nothing")
    args = parser.parse_args(argv)
    faults = tuple(f for f in FAULTS if not args.only or f.name in args.only)
    if args.list:
        for fault in faults:
            print(f"{fault.name} ({fault.file}): {fault.description}")
            print("\n".join(f"    {test}" for test in fault.tests))
        return 0
    problems = check_faults(faults)
    if problems:
        print("faults that cannot be planted (the code moved? update FAULTS):", *problems, sep="\n  ", file=sys.stderr)
        return 2
    started = time.monotonic()
    results = [run_fault(fault) for fault in faults]
    print()
    print(table(results))
    survived = sum(r.faulted is not None and r.faulted.verdict == "pass" for r in results)
    bad = sum(not r.ok for r in results)
    print(f"\n{len(results) - bad}/{len(results)} faults caught, {survived} survived, "
          f"{bad - survived} not run or in error; {time.monotonic() - started:.0f}s")  # fmt: skip
    return 1 if bad else 0


# -- the plugin, in each pytest run this script starts -------------------------------------------------------------
def stray_modules(copy: Path) -> list[str]:
    """The package's modules in this process that were not loaded from `copy` (the package is imported first, so an
    empty list means it really was the copy)."""
    importlib.import_module(PACKAGE_NAME)
    loaded = {name: getattr(module, "__file__", None) for name, module in list(sys.modules.items())
              if name == PACKAGE_NAME or name.startswith(f"{PACKAGE_NAME}.")}  # fmt: skip
    return sorted(f"{name} from {file}" for name, file in loaded.items()
                  if file is None or not Path(file).resolve().is_relative_to(copy))  # fmt: skip


def _copy_under_test() -> Path | None:
    copy = os.environ.get(COPY_ENV)
    return Path(copy).resolve() if copy else None


def pytest_collection_finish(session: pytest.Session) -> None:
    """Before any test runs: the package the tests imported is the copy."""
    copy = _copy_under_test()
    if copy is not None and (strays := stray_modules(copy)):
        pytest.exit(f"not the copy under test ({copy}): {'; '.join(strays[:5])}", returncode=WRONG_PACKAGE)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """After the tests: nothing they imported late came from elsewhere either."""
    copy = _copy_under_test()
    if copy is not None and (strays := stray_modules(copy)):
        print(f"\nnot the copy under test ({copy}): {'; '.join(strays[:5])}", file=sys.stderr)
        session.exitstatus = WRONG_PACKAGE


if __name__ == "__main__":
    raise SystemExit(main())
