"""Turn the Parquet results of one or more runs into report.html and report.md.

    python scripts/report.py outputs/2026-11-29/21-40-12 [more runs or results folders ...] --out report/
    python scripts/report.py multirun/2026-11-29/22-00-00 --title "replay vs kernels" --out report/

Each argument is a run folder (holding ``results/``), a results folder, or a multirun folder
(its jobs' run folders; ``multirun/<d>/<t>/*`` works too). The HTML page is
self-contained (figures inline); open it in a browser or attach it anywhere.
"""

from __future__ import annotations

import sys

from pkb_ray.summary.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
