"""``pkb-ray report RUN [RUN ...] --out DIR``: one report over finished runs (run, results or
multirun folders), each sample's newest result counted once; ``pkb-ray compare A B``: two runs
side by side (:mod:`.compare`)."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

import pandas as pd

from pkb_ray.results import newest, read_results
from pkb_ray.storage import Folder, is_remote, sub_uri
from pkb_ray.summary.pages import write
from pkb_ray.summary.run import RunSummary


def result_folders(paths: Iterable[Path | str]) -> list[Path | str]:
    """The results folders behind ``paths``: a results folder itself, a run folder holding
    ``results/``, or a Hydra multirun folder holding run folders. Files among them (a shell glob
    of a multirun folder brings ``multirun.yaml``) are not runs and are passed over."""
    found = []
    for p in paths:
        if is_remote(p):
            found += remote_result_folders(str(p))
            continue
        p = Path(p)
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


def remote_result_folders(uri: str) -> list[str]:
    """:func:`result_folders` of a URI (``s3://bucket/prefix``): its results, or its run folders'."""
    tops = {tuple(f.split("/")[:3]) for f in Folder.of(uri).files(".parquet")}
    if any(t[0].startswith("model=") for t in tops):
        return [uri]
    if any(t[:1] == ("results",) for t in tops):
        return [sub_uri(uri, "results")]
    runs = sorted({t[0] for t in tops if t[1:2] == ("results",)})
    if not runs:
        raise FileNotFoundError(f"{uri}: no results folder here (a run, results or multirun folder)")
    return [sub_uri(uri, run, "results") for run in runs]


def read_runs(paths: Iterable[Path | str]) -> pd.DataFrame:
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
    ap.add_argument("runs", nargs="+", help="run, results or multirun folders (or their s3://, gs://, ... URIs)")
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


def compare_main(argv: list[str] | None = None) -> int:
    """``pkb-ray compare A B``: 1 when B has a significant regression against A, 0 when not, 2 on bad input."""
    import argparse
    import sys

    from pkb_ray.summary import render_compare
    from pkb_ray.summary.compare import ALPHA, compare

    ap = argparse.ArgumentParser(prog="pkb-ray compare", description="B against A, per model and problem: the "
                                 "change in pass@1, fast_1.0@1 and geomean speedup with 95 %% intervals; exits 1 "
                                 "on a significant regression (docs/statistics.md)")
    ap.add_argument("a", type=Path, help="the baseline: a run, results or multirun folder")
    ap.add_argument("b", type=Path, help="the candidate, the same")
    ap.add_argument("--out", type=Path, help="folder for compare.html and compare.md")
    ap.add_argument("--alpha", type=float, default=ALPHA, help="family-wise error rate of the flags (Holm)")
    args = ap.parse_args(argv)
    if not 0 < args.alpha < 1:
        print(f"error: --alpha must lie in (0, 1), got {args.alpha}", file=sys.stderr)
        return 2
    try:
        a, b = RunSummary.of(read_runs([args.a])), RunSummary.of(read_runs([args.b]))
    except (FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    result = compare(a, b, args.alpha)
    print(render_compare.text(result))
    if result.table.empty:
        return 2
    if args.out:
        page, md = render_compare.write(result, args.out, str(args.a), str(args.b))
        print(f"-> {page} and {md}")
    return 1 if len(result.regressions) else 0
