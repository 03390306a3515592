"""Turn the Parquet results of one or more runs into report.html and report.md.

    python scripts/report.py outputs/2026-11-29/21-40-12 [more runs or results folders ...] --out report/
    python scripts/report.py multirun/2026-11-29/22-00-00 --title "replay vs kernels" --out report/

Each argument is a run folder (holding ``results/``), a results folder, or a multirun folder
(its jobs' run folders; ``multirun/<d>/<t>/*`` works too). The HTML page is
self-contained (figures inline); open it in a browser or attach it anywhere.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pkb_ray.report import read_runs, write  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", type=Path, help="run, results or multirun folders")
    ap.add_argument("--out", type=Path, default=Path("report"), help="folder for report.html and report.md")
    ap.add_argument("--title", default="pkb_ray report")
    args = ap.parse_args()
    try:
        df = read_runs(args.runs)
    except (FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    page, md = write(df, args.out, args.title)
    print(f"{len(df)} results -> {page} and {md}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
