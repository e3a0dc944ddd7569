"""`bench/synthetic_traces.py`: the seeded family of shapes, in both formats, readable by the benchmark."""

import subprocess
import sys
from pathlib import Path

import numpy as np

from bench.fleetsim.synthetic import SHAPES, poisson, shape_named
from bench.fleetsim.traces import load

REPO = Path(__file__).resolve().parents[3]


def write_family(out: Path, *options: str) -> list[Path]:
    """Run `bench/synthetic_traces.py --out OUT [options]`; the paths it wrote."""
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "synthetic_traces.py"), "--out", str(out), *options],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    return [Path(line) for line in done.stdout.split()]


def test_family_is_written_in_both_formats_and_reads_back(tmp_path: Path) -> None:
    written = write_family(tmp_path)
    assert sorted(p.name for p in written) == sorted(f"{s.name}{ext}" for s in SHAPES for ext in (".csv", ".jsonl"))
    for shape in SHAPES:
        csv, jsonl = load(tmp_path / f"{shape.name}.csv"), load(tmp_path / f"{shape.name}.jsonl")
        expected = poisson(shape.rate, shape.seconds, shape.seed)
        assert len(csv.arrivals) == len(expected)
        np.testing.assert_allclose(csv.arrivals, expected - expected[0], atol=1e-5)  # CSV keeps 0.1 us
        assert np.all(jsonl.tokens_in > 0) and np.all(jsonl.tokens_out > 0)
        repeated = np.count_nonzero(np.diff(jsonl.arrivals) == 0)
        assert (repeated >= len(jsonl.arrivals) // 2 - 1) == shape.batched  # batches: pairs share a timestamp


def test_seed_offset_writes_the_same_shapes_with_other_arrivals(tmp_path: Path) -> None:
    write_family(tmp_path, "--seed-offset", "6000")
    step = shape_named("step")
    reseeded = load(tmp_path / "step.csv").arrivals
    expected = poisson(step.rate, step.seconds, step.seed + 6000)
    np.testing.assert_allclose(reseeded, expected - expected[0], atol=1e-5)
    original = poisson(step.rate, step.seconds, step.seed)
    assert len(reseeded) != len(original) or not np.allclose(reseeded, original - original[0], atol=1e-3)
