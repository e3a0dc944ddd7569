"""Run the test tiers and say what each took: `python -m tests.tiers [unit] [integration] [e2e]` (all by default).

- unit: `tests/unit`, pure (its conftest fails a test that opens a socket or starts a process), on both cores.
- integration: `tests/integration`, real processes and local sockets without the cluster, on both cores.
- e2e: `e2e/tests` on one local cluster, started here when none runs (and stopped after): the modules that
  share it run in parallel (`E2E_WORKERS`, default 3), then the serial group (`e2e/tests/conftest.py` SERIAL) alone.

Each pytest run prints its own summary and slowest steps; the end is one line per tier (wall time, passed, failed,
skipped) and a closing line over all of them. The exit status is non-zero when any test failed or errored, or a
tier collected nothing.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CORES = str(os.cpu_count() or 2)


@dataclass(frozen=True)
class Run:
    """One pytest invocation of a tier."""

    args: tuple[str, ...]


@dataclass
class Tally:
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    seconds: float = 0.0
    exit_codes: tuple[int, ...] = ()

    def line(self, name: str) -> str:
        minutes, seconds = divmod(round(self.seconds), 60)
        counted = f"{self.passed} passed, {self.failed} failed, {self.skipped} skipped"
        return f"{name}: {minutes}:{seconds:02d} wall, {counted}"


def tier_runs(name: str) -> list[Run]:
    workers = os.environ.get("E2E_WORKERS", "3")
    return {
        "unit": [Run(("tests/unit", "-n", CORES))],
        "integration": [Run(("tests/integration", "-n", CORES))],
        "e2e": [Run(("e2e/tests", "-m", "not serial", "-n", workers, "--dist", "loadfile")),
                Run(("e2e/tests", "-m", "serial"))],
    }[name]  # fmt: skip


def counts(junit: Path) -> tuple[int, int, int]:
    """(passed, failed, skipped) from a JUnit XML report; errors count as failures."""
    root = ET.parse(junit).getroot()
    suites = [root] if root.tag == "testsuite" else list(root)
    total = sum(int(s.get("tests", 0)) for s in suites)
    failed = sum(int(s.get("failures", 0)) + int(s.get("errors", 0)) for s in suites)
    skipped = sum(int(s.get("skipped", 0)) for s in suites)
    return total - failed - skipped, failed, skipped


def run_tier(name: str) -> Tally:
    tally = Tally()
    for run in tier_runs(name):
        with tempfile.TemporaryDirectory() as tmp:
            junit = Path(tmp) / "junit.xml"
            command = [sys.executable, "-m", "pytest", *run.args, f"--junitxml={junit}"]
            print(f"\n=== {name}: {' '.join(command[2:-1])}", flush=True)
            start = time.monotonic()
            code = subprocess.call(command, cwd=REPO)
            tally.seconds += time.monotonic() - start
            tally.exit_codes += (code,)
            if junit.exists():
                passed, failed, skipped = counts(junit)
                tally.passed, tally.failed, tally.skipped = (
                    tally.passed + passed, tally.failed + failed, tally.skipped + skipped
                )  # fmt: skip
            elif code != 0:
                tally.failed += 1  # pytest ended before it could report (an error at start-up)
    return tally


def cluster_up() -> bool:
    """Start the local cluster unless one runs; True when this run started it (and so stops it)."""
    status = subprocess.call([sys.executable, "-m", "localcluster", "status"], cwd=REPO, stdout=subprocess.DEVNULL)
    if status == 0:
        return False
    subprocess.check_call([sys.executable, "-m", "localcluster", "up"], cwd=REPO)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.tiers", description=__doc__.splitlines()[0])
    parser.add_argument("tiers", nargs="*", choices=["unit", "integration", "e2e"], default=[])
    names = parser.parse_args(argv).tiers or ["unit", "integration", "e2e"]
    tallies: dict[str, Tally] = {}
    started = False
    try:
        for name in names:
            if name == "e2e":
                started = cluster_up()
            tallies[name] = run_tier(name)
    finally:
        if started:
            subprocess.call([sys.executable, "-m", "localcluster", "down"], cwd=REPO)
    print()
    for name, tally in tallies.items():
        print(tally.line(name))
    total = Tally(
        passed=sum(t.passed for t in tallies.values()),
        failed=sum(t.failed for t in tallies.values()),
        skipped=sum(t.skipped for t in tallies.values()),
    )
    bad = total.failed > 0 or any(code not in (0,) for t in tallies.values() for code in t.exit_codes)
    print(f"tiers: {total.passed} passed, {total.failed} failed, {total.skipped} skipped")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
