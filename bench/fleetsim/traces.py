"""Request traces: the two public formats, replay with jitter, and per-request service times.

Azure CSV (`TIMESTAMP,ContextTokens,GeneratedTokens`, one request per row) and Mooncake JSONL (`timestamp` in ms,
`input_length`, `output_length`, ...). Any file in either format works, not only the shipped ones.
"""

import csv
import gzip
import io
import json
import lzma
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class Trace:
    name: str
    arrivals: np.ndarray  # seconds from the first request, sorted
    tokens_in: np.ndarray
    tokens_out: np.ndarray


def _open(path: Path) -> io.TextIOBase:
    """A trace file as text; a `.gz` or `.xz` file is decompressed on the fly (the day-long traces ship in xz)."""
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", newline="")
    if path.suffix == ".xz":
        return io.TextIOWrapper(lzma.open(path, "rb"), encoding="utf-8", newline="")
    return path.open(encoding="utf-8", newline="")


def load(path: str | Path) -> Trace:
    """Read either format (optionally gzip- or xz-compressed), detected from the first non-blank character
    (`{` means JSONL)."""
    path = Path(path)
    with _open(path) as f:
        head = f.read(4096).lstrip()
    if not head:
        raise ValueError(f"{path}: empty trace")
    rows = _jsonl(path) if head.startswith("{") else _azure_csv(path)
    if not rows:
        raise ValueError(f"{path}: no requests")
    rows.sort(key=lambda r: r[0])
    data = np.asarray(rows, dtype=float)
    t = data[:, 0] - data[0, 0]
    return Trace(path.name, t, np.maximum(data[:, 1], 0), np.maximum(data[:, 2], 0))


def _jsonl(path: Path) -> list[tuple[float, float, float]]:
    rows = []
    with _open(path) as f:
        for line in f:
            if line.strip():
                obj = json.loads(line)
                rows.append((float(obj["timestamp"]) / 1000.0, float(obj["input_length"]), float(obj["output_length"])))
    return rows


def _parse_time(text: str) -> float:
    """Azure timestamps carry seven fractional digits; datetime takes six, so the tail is parsed by hand."""
    text = text.strip()
    main, _, frac = text.partition(".")
    seconds = datetime.fromisoformat(main).replace(tzinfo=UTC).timestamp()
    return seconds + (float("0." + frac) if frac else 0.0)


def _azure_csv(path: Path) -> list[tuple[float, float, float]]:
    rows = []
    with _open(path) as f:
        reader = csv.DictReader(f)
        fields = {name.strip().lower(): name for name in reader.fieldnames or []}
        try:
            ts, cin, cout = fields["timestamp"], fields["contexttokens"], fields["generatedtokens"]
        except KeyError as e:
            raise ValueError(f"{path}: expected TIMESTAMP,ContextTokens,GeneratedTokens columns") from e
        for row in reader:
            rows.append((_parse_time(row[ts]), float(row[cin]), float(row[cout])))
    return rows


def window(trace: Trace, max_seconds: float | None, time_scale: float, start_seconds: float = 0.0) -> Trace:
    """Compress time by `time_scale` (2 replays an hour in 30 min), drop the requests before `start_seconds` (the
    rest starts at 0), then keep the first `max_seconds`: any stretch of a trace is a trace of its own."""
    t = trace.arrivals / time_scale - start_seconds
    keep = (t >= 0) if max_seconds is None else (t >= 0) & (t <= max_seconds)
    if not keep.any():
        raise ValueError(f"{trace.name}: no requests between {start_seconds}s and the end of the window")
    return Trace(trace.name, t[keep], trace.tokens_in[keep], trace.tokens_out[keep])


def replay(trace: Trace, copies: int, jitter_s: float, seed: int) -> Trace:
    """Each request `copies` times, each copy shifted by U(0, jitter): the rate scales, the burst shape stays."""
    rng = np.random.default_rng(seed)
    n = len(trace.arrivals)
    t = np.repeat(trace.arrivals, copies) + rng.uniform(0.0, jitter_s, size=n * copies)
    order = np.argsort(t, kind="stable")
    t = t[order] - t[order][0]
    return Trace(trace.name, t, np.repeat(trace.tokens_in, copies)[order], np.repeat(trace.tokens_out, copies)[order])


def service_times(trace: Trace, prefill_tps: float, decode_tps: float) -> np.ndarray:
    """Seconds a request holds a slot: prompt at the prefill rate plus output at the per-request decode rate."""
    svc: np.ndarray = trace.tokens_in / prefill_tps + trace.tokens_out / decode_tps
    floored: np.ndarray = np.maximum(svc, 0.01)
    return floored
