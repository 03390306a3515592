"""``pkb-ray report RUN [RUN ...] --out DIR``: one report over finished runs (run, results or
multirun folders), each sample's newest result counted once."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

import pandas as pd

from pkb_ray.results import newest, read_results
from pkb_ray.summary.pages import write
from pkb_ray.summary.run import RunSummary


def result_folders(paths: Iterable[Path]) -> list[Path]:
    """The results folders behind ``paths``: a results folder itself, a run folder holding
    ``results/``, or a Hydra multirun folder holding run folders. Files among them (a shell glob
    of a multirun folder brings ``multirun.yaml``) are not runs and are passed over."""
    found = []
    for p in map(Path, paths):
        if p.is_file():
            continue
        if (p / "results").is_dir():
            found.append(p / "results")
        elif p.is_dir() and any(p.glob("model=*")):
            found.append(p)
        elif p.is_dir() and any((c / "results").is_dir() for c in p.iterdir() if c.is_dir()):
            found += sorted(c / "results" for c in p.iterdir() if (c / "results").is_dir())
        else:
            raise FileNotFoundError(f"{p}: no results folder here (a run, results or multirun folder)")
    return found


def read_runs(paths: Iterable[Path]) -> pd.DataFrame:
    """Result rows of one or more runs (see :func:`result_folders`), the newest per result key."""
    paths = list(paths)
    frames = [read_results(folder) for folder in result_folders(paths)]
    df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    if df.empty:
        raise ValueError(f"no result rows under {[str(p) for p in paths]}")
    return newest(df)


def main(argv: list[str] | None = None) -> int:
    """``pkb-ray report`` / ``scripts/report.py``: one page over runs, results or multirun folders."""
    import argparse
    import sys

    ap = argparse.ArgumentParser(prog="pkb-ray report", description="report.html and report.md over one or more "
                                 "runs: run folders, results folders or multirun folders")
    ap.add_argument("runs", nargs="+", type=Path, help="run, results or multirun folders")
    ap.add_argument("--out", type=Path, default=Path("report"), help="folder for report.html and report.md")
    ap.add_argument("--title", default="pkb_ray report")
    args = ap.parse_args(argv)
    try:
        df = read_runs(args.runs)
    except (FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    page, md = write(RunSummary.of(df), args.out, args.title)
    print(f"{len(df)} results -> {page} and {md}")
    return 0
