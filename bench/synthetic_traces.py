"""Write the synthetic trace family (`fleetsim/synthetic.py`: days, steps, ramps, on/off, spikes) in both formats.

    python bench/synthetic_traces.py --out /tmp/family
    python bench/autoscale_sweep.py $(printf -- '--trace %s ' /tmp/family/*) --jobs 2

Every shape is seeded, so a number measured on the family can be measured again.
"""

import argparse
import sys
from pathlib import Path

from fleetsim.synthetic import write_family


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="folder to write the traces into")
    args = parser.parse_args(argv)
    for path in write_family(args.out):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
