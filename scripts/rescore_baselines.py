"""Recompute the speed-of-light columns of stored baseline tables after a hardware profile changed.

    .venv/bin/python scripts/rescore_baselines.py h200_2 h200_2x1_socket     # baselines/<name>.json

The measured reference times stay; ``sol_time_us`` and ``sol_fraction`` are recomputed from
``conf/hardware/<name>.yaml`` and the problem files as they are now. Then rerun
``scripts/problems_doc.py`` so docs/problems.md follows.
"""

from __future__ import annotations

import sys
from pathlib import Path

from pkb_ray import baselines
from pkb_ray.pipeline.selection import hardware_profile
from pkb_ray.problem import load_problems

REPO = Path(__file__).resolve().parent.parent


def main(names: list[str]) -> int:
    if not names:
        print(__doc__, file=sys.stderr)
        return 2
    problems = load_problems()
    for name in names:
        path = baselines.rescore(REPO / "baselines", hardware_profile(name), problems)
        print(f"rescored {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
