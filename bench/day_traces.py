"""Write the day-long traces (`fleetsim/day.py`) from the shipped traces: 24 hours, a daily cycle, bursts.

    python bench/day_traces.py                      # writes bench/traces/day-*.gz from ../shared/traces
    python bench/autoscale.py --trace bench/traces/day-chat.jsonl.gz --scale 10 --concurrency 8 --frontier

The files are committed; the generator and its seeds are fixed, so running it again writes the same bytes.
"""

import argparse
import sys
from pathlib import Path

from fleetsim.day import DAYS, write_day

HERE = Path(__file__).resolve().parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=HERE / "traces", help="folder to write into")
    parser.add_argument("--shared", type=Path, default=HERE.parents[1] / "shared" / "traces", help="shipped traces")
    parser.add_argument("--only", action="append", default=None, help="write only these days (by name)")
    args = parser.parse_args(argv)
    for day in DAYS:
        if args.only is None or day.name in args.only:
            print(write_day(day, args.out, args.shared))
    return 0


if __name__ == "__main__":
    sys.exit(main())
