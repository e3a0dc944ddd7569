"""Write the synthetic trace family (`fleetsim/synthetic.py`: days, steps, ramps, on/off, spikes) in both formats.

    python bench/synthetic_traces.py --out /tmp/family
    python bench/autoscale_sweep.py $(printf -- '--trace %s ' /tmp/family/*) --jobs 2

Every shape is seeded, so a number measured on the family can be measured again. `--seed-offset N` writes the same
shapes with other arrivals (each shape's seed + N): traces a setting was not chosen on, to check it against.
"""

import argparse
import sys
from pathlib import Path

from fleetsim.synthetic import write_family


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="folder to write the traces into")
    parser.add_argument("--seed-offset", type=int, default=0, help="added to every shape's seed (default 0)")
    args = parser.parse_args(argv)
    for path in write_family(args.out, args.seed_offset):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
