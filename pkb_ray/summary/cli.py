"""``pkb-ray report RUN [RUN ...] --out DIR``: one report over finished runs (run, results or
multirun folders), each sample's newest result in a folder counted once and the same samples in two
folders (a multirun's jobs) told apart (:func:`read_rows`); ``pkb-ray compare A B``: two runs
side by side (:mod:`.compare`). Each run is a local path or a pyarrow filesystem URI (``file://``,
``s3://``, ``gs://``, ...); one that cannot be read is named in a one-line error (exit 2)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterable

import click
import pandas as pd
import pyarrow as pa
import pyarrow.fs as pafs

from pkb_ray.results.parquet import RESULT_KEY, newest, read_results
from pkb_ray.results.storage import Folder, is_remote, local_path, sub_uri
from pkb_ray.summary import stored
from pkb_ray.summary.compare import ALPHA, MIN_EFFECT, MIN_SPEEDUP_EFFECT, compare
from pkb_ray.summary.pages import write
from pkb_ray.summary.render_json import NAME
from pkb_ray.summary.run import RunSummary

SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}  # as pkb-ray's own

class UnreadableRun(ValueError):
    """A run named on the command line that cannot be read: ``path`` as given, ``reason`` in one line."""

    def __init__(self, path: Path | str, reason: str):
        self.path, self.reason = shown(path), reason
        super().__init__(f"{self.path}: {reason}")


def shown(text: Path | str) -> str:
    """``text`` (a path, a URI, a message) as messages show it: the credentials of any URI in it
    (``s3://KEY:SECRET@bucket``) left out."""
    return re.sub(r"([A-Za-z][A-Za-z0-9+.-]*://)[^/@?\s]*@", r"\1***@", str(text))


def _one_line(exc: BaseException) -> str:
    """What went wrong, on one line (pyarrow's S3 errors run to several)."""
    text = shown(" ".join(str(exc).split()) or type(exc).__name__)
    return text if len(text) <= 300 else text[:297] + "..."


def result_folders(p: Path | str) -> list[Path | str]:
    """The results folders behind ``p``: a results folder itself, a run folder holding
    ``results/``, or a Hydra multirun folder holding run folders; a local path, a ``file://`` URI
    or a remote one (``s3://bucket/prefix``, ``gs://``, ...). A file (a shell glob of a multirun
    folder brings ``multirun.yaml``) is not a run: none."""
    if is_remote(p):
        return remote_result_folders(str(p))
    p = local_path(p)  # a path, or the folder of a file:// URI
    if p.is_file():
        return []
    if not p.exists():
        raise FileNotFoundError("no such folder")
    if (p / "results").is_dir():
        return [p / "results"]
    if p.is_dir() and any(p.glob("model=*")):
        return [p]
    if p.is_dir() and any((c / "results").is_dir() for c in p.iterdir() if c.is_dir()):
        return sorted(c / "results" for c in p.iterdir() if (c / "results").is_dir())
    raise FileNotFoundError(NO_RESULTS)


NO_RESULTS = "no results folder here (a run, results or multirun folder)"


def remote_result_folders(uri: str) -> list[str]:
    """:func:`result_folders` of a URI (``s3://bucket/prefix``): its results, or its run folders'."""
    folder = Folder.of(uri)
    tops = {tuple(f.split("/")[:3]) for f in folder.files(".parquet")}
    if not tops:
        _missing(folder)
    if any(t[0].startswith("model=") for t in tops):
        return [uri]
    if any(t[:1] == ("results",) for t in tops):
        return [sub_uri(uri, "results")]
    runs = sorted({t[0] for t in tops if t[1:2] == ("results",)})
    if not runs:
        raise FileNotFoundError(NO_RESULTS)
    return [sub_uri(uri, run, "results") for run in runs]


def _missing(folder: Folder) -> None:
    """Raise FileNotFoundError saying which part of ``folder`` is missing, if one is."""
    if folder.fs.get_file_info(folder.path).type != pafs.FileType.NotFound:
        return
    bucket = folder.path.split("/")[0]
    if folder.fs.type_name in ("s3", "gcs", "abfs") and folder.fs.get_file_info(bucket).type == pafs.FileType.NotFound:
        raise FileNotFoundError(f"no such bucket {bucket!r} (or it cannot be listed with these credentials)")
    raise FileNotFoundError("no such folder (no object under this prefix)")


def read_runs(paths: Iterable[Path | str]) -> pd.DataFrame:
    """Result rows of one or more runs (each as :func:`result_folders`), as :func:`read_rows`.
    A path or URI that cannot be read (missing, no results under it, a bucket that does not exist
    or cannot be reached, a URI pyarrow cannot open) raises :class:`UnreadableRun` naming it."""
    return read_rows(paths)[0]


def read_rows(paths: Iterable[Path | str]) -> tuple[pd.DataFrame, int, list[str]]:
    """:func:`read_runs`, how many rows were read before the newest of each result was kept, and the
    models renamed after their job (below).

    Each results folder keeps its newest row per result (a resumed run's re-evaluations); a folder
    named twice is read once. Two folders that hold the same result (the jobs of a multirun that
    evaluated the same samples with other settings, ``-m eval.timing_mode=eager,graph``) are two
    evaluations, not a newer and an older one: each such folder's rows are kept, their model named
    ``model [job]`` after the run folder, so the report and compare show them side by side."""
    paths = list(paths)
    frames: dict[str, pd.DataFrame] = {}  # folder (as named) -> its newest rows
    read = 0
    for p in paths:
        try:
            for folder in result_folders(p):
                if _identity(folder) not in frames:
                    rows = read_results(folder)
                    read += len(rows)
                    frames[_identity(folder)] = newest(rows)
        except (OSError, ValueError, pa.ArrowException) as exc:  # FileNotFoundError, pyarrow's IO and URI errors
            raise UnreadableRun(p, _one_line(exc)) from None
    frames = {k: f for k, f in frames.items() if not f.empty}
    if not frames:
        if len(paths) == 1:
            raise UnreadableRun(paths[0], "no result rows")
        raise ValueError(f"no result rows under {[shown(p) for p in paths]}")
    told = _told_apart(frames)
    renamed = sorted({m for name, f in told.items() if f is not frames[name] for m in f["model"].unique()})
    return pd.concat(told.values(), ignore_index=True), read, renamed


def _identity(folder: Path | str) -> str:
    return str(folder) if is_remote(folder) else str(Path(folder).resolve())


def _told_apart(frames: dict[str, pd.DataFrame]) -> dict[str, pd.DataFrame]:
    """``frames`` with the model of every folder that shares a result with another one named after
    its run folder (``replay [1_eval.timing_mode=graph]``)."""
    keys = {name: set(zip(*(f[k] for k in RESULT_KEY))) for name, f in frames.items()}
    shared = {name for name in frames if any(keys[name] & keys[other] for other in frames if other != name)}
    if not shared:
        return frames
    jobs = {name: _run_name(name) for name in shared}
    if len(set(jobs.values())) < len(jobs):  # two run folders of one name: the whole path tells them apart
        jobs = {name: shown(name).removesuffix("/results") for name in shared}
    return {name: f.assign(model=f["model"] + f" [{jobs[name]}]") if name in shared else f
            for name, f in frames.items()}


def _run_name(folder: str) -> str:
    parts = folder.rstrip("/").split("/")
    return parts[-2] if parts[-1] == "results" and len(parts) > 1 else parts[-1]


def split_runs(paths: Iterable[Path | str]) -> tuple[list[Path | str], dict[str, dict]]:
    """The runs to read rows from, and the stored summaries (:mod:`.stored`) of those that have
    only a ``summary.json``: a ``summary.json`` named on the command line, or a run folder holding
    one and no results. A summary.json beside result rows stands for its run's rows. Raises
    :class:`UnreadableRun` for a summary.json that is not one."""
    rows, docs = [], {}
    for p in paths:
        named = str(p).endswith(NAME)
        run = (str(p).rsplit("/", 1)[0] if is_remote(p) else local_path(p).parent) if named else p
        try:
            if result_folders(run):
                rows.append(run)
                continue
        except (OSError, ValueError, pa.ArrowException):
            pass  # no rows there: its summary.json, or the reading error of rows below
        try:
            doc = stored.summary_document(run)
        except (OSError, ValueError, pa.ArrowException) as exc:
            raise UnreadableRun(p, f"{NAME}: {_one_line(exc)}") from None
        if doc is None and named:
            raise UnreadableRun(p, "no such file")
        if doc is None:
            rows.append(p)  # read_rows says why it has none
        else:
            docs[shown(p)] = doc
    return rows, docs


def common_problems(df: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """The rows of the problems every model has, and what was left out ("" when every model has the
    same problems): a leaderboard of models scored on different problems would compare nothing."""
    sets = {m: set(g["problem_id"]) for m, g in df.groupby("model")}
    if len(sets) < 2 or len({frozenset(v) for v in sets.values()}) == 1:
        return df, ""
    common = set.intersection(*sets.values())
    left = "; ".join(f"{m}: {', '.join(sorted(v - common))}" for m, v in sorted(sets.items()) if v - common)
    note = (f"the models were evaluated on different problems: compared on the {len(common)} they share; "
            f"left out: {left}")
    return df[df["problem_id"].isin(common)], note


def _run(command: click.Command, prog: str, argv: list[str] | None) -> int:
    """``command`` on ``argv`` (default: sys.argv[1:]): its exit status; 2 for a usage error."""
    try:
        code = command.main(args=argv, prog_name=prog, standalone_mode=False)
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    return code if isinstance(code, int) else 0


def main(argv: list[str] | None = None) -> int:
    """``pkb-ray report``'s command line (``scripts/report.py``): its exit status."""
    return _run(report_command, "pkb-ray report", argv)


def compare_main(argv: list[str] | None = None) -> int:
    """``pkb-ray compare``'s command line: 1 when B has a significant regression against A, 0 when
    not, 2 on bad input."""
    return _run(compare_command, "pkb-ray compare", argv)


@click.command("report", context_settings=SETTINGS, short_help="One report (HTML and Markdown) over finished runs.")
@click.argument("runs", nargs=-1, required=True, metavar="RUN...")
@click.option("--out", type=click.Path(path_type=Path), default=Path("report"), show_default=True,
              help="Folder for report.html and report.md.")
@click.option("--title", default="pkb_ray report", show_default=True, help="The page's title.")
def report_command(runs: tuple[str, ...], out: Path, title: str) -> int:
    """One report over finished runs: report.html and report.md with the leaderboard, pass@k
    curves, speedups, why samples fail, per problem. Each RUN is a run folder, a results folder or
    a multirun folder (its jobs), or its file://, s3://, gs://, ... URI; a summary.json (or a run
    folder holding only one) gives a leaderboard of its overall rows. A run that cannot be read is
    named in a one-line error (exit 2).

    \b
    Examples:
      pkb-ray report outputs/<date>/<time> --out report/
      pkb-ray report multirun/<date>/<time> --title "replay vs kernels" --out report/
      pkb-ray report s3://my-bucket/pkb/2026-12-03 --out report/
    """
    return report(list(runs), out, title)


def report(runs_given: list[str], out: Path, title: str) -> int:
    """``pkb-ray report`` on its parsed arguments: its exit status."""
    import sys

    try:
        runs, docs = split_runs(runs_given)
        if docs and runs:
            print(f"error: {', '.join(docs)}: only a {NAME} (no result rows); give every run with its rows, or "
                  f"each as its {NAME}", file=sys.stderr)
            return 2
        if docs:
            return stored_report(docs, out)
        df, read, renamed = read_rows(runs)
    except ValueError as exc:  # UnreadableRun among them
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if renamed:
        print(f"note: {len(renamed)} runs evaluated the same samples (a multirun's jobs?): each is an entry of its "
              f"own: {', '.join(renamed)}", file=sys.stderr)
    df, mixed = common_problems(df)
    if mixed:
        print(f"warning: {mixed}", file=sys.stderr)
    page, md = write(RunSummary.of(df, run_info={"problems compared": mixed} if mixed else None), out, title)
    replaced = f" ({read} rows read: {read - len(df)} replaced by a newer result of the same sample in its folder or left out)" \
        if read != len(df) else ""
    print(f"{len(df)} results{replaced} -> {page} and {md}")
    return 0


def stored_report(docs: dict[str, dict], out: Path) -> int:
    """``pkb-ray report`` over runs known only by their summary.json: a leaderboard of their overall
    rows, printed and written to ``out/report.md`` (the HTML page needs rows)."""
    import sys

    from pkb_ray.summary.render_markdown import markdown_table

    board, note = stored.leaderboard(docs)
    if note:
        print(f"warning: {note}", file=sys.stderr)
    table = markdown_table(board)  # each figure with its interval in one cell
    out.mkdir(parents=True, exist_ok=True)
    md = out / "report.md"
    md.write_text(f"# pkb_ray report (from {NAME})\n\n" + (f"> {note}\n\n" if note else "") + table + "\n")
    print(table)
    print(f"{len(board)} rows from {len(docs)} {NAME} file(s) -> {md}")
    return 0


@click.command("compare", context_settings=SETTINGS,
               short_help="Run B against run A, with intervals; exit 1 on a regression.")
@click.argument("a")
@click.argument("b")
@click.option("--out", type=click.Path(path_type=Path), help="Folder for compare.html and compare.md.")
@click.option("--alpha", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=ALPHA, show_default=True,
              help="Family-wise error rate of the regression flags (gatekeeping).")
@click.option("--min-effect", type=float, default=MIN_EFFECT, show_default=True,
              help="A drop in pass@1 or fast_1.0@1 smaller than this (absolute) is no regression.")
@click.option("--min-speedup-effect", type=float, default=MIN_SPEEDUP_EFFECT, show_default=True,
              help="A geomean slowdown smaller than this fraction is no regression.")
def compare_command(a: str, b: str, out: Path | None, alpha: float, min_effect: float,
                    min_speedup_effect: float) -> int:
    """Run B against run A (the baseline), per model and problem: the change in pass@1,
    fast_1.0@1 and geomean speedup, each with its 95 % interval, paired where the same samples
    ran in both (docs/statistics.md). A and B are each a run, results or multirun folder, or its
    file://, s3://, gs://, ... URI, or a summary.json (then summaries are compared, unpaired).

    Exit status: 0 nothing flagged; 1 a significant regression (for CI); 2 bad input (a run that
    cannot be read, nothing in common).

    \b
    Examples:
      pkb-ray compare outputs/<old run> outputs/<new run> --out compare/
      pkb-ray compare s3://my-bucket/pkb/a s3://my-bucket/pkb/b --alpha 0.01
    """
    return compare_runs(a, b, out, alpha, min_effect, min_speedup_effect)


def compare_runs(a: str, b: str, out: Path | None = None, alpha: float = ALPHA, min_effect: float = MIN_EFFECT,
                 min_speedup_effect: float = MIN_SPEEDUP_EFFECT) -> int:
    """``pkb-ray compare`` on its parsed arguments: its exit status."""
    import sys

    from pkb_ray.summary import render_compare

    runs, docs = [], []
    for side, path in (("A", a), ("B", b)):
        try:
            rows, stored_docs = split_runs([path])
            docs.append(next(iter(stored_docs.values()), None))
            runs.append(RunSummary.of(read_runs(rows)) if rows else None)
        except UnreadableRun as exc:
            print(f"error: run {side} ({exc.path}): {exc.reason}", file=sys.stderr)
            return 2
    if any(d is not None for d in docs):  # a side known only by its summary.json: compare summaries
        from pkb_ray.summary import render_json

        docs = [d if d is not None else render_json.document(r, "") for d, r in zip(docs, runs)]
        changes = stored.compare(*docs, min_effect=min_effect, min_speedup_effect=min_speedup_effect)
        print(stored.text(changes))
        if not changes:
            print("error: the two summaries have no model and figure in common", file=sys.stderr)
            return 2
        return 1 if any(c.regression for c in changes) else 0
    result = compare(*runs, alpha=alpha, min_effect=min_effect, min_speedup_effect=min_speedup_effect)
    print(render_compare.text(result))
    if result.table.empty:
        return 2
    if out:
        page, md = render_compare.write(result, out, shown(a), shown(b))
        print(f"-> {page} and {md}")
    return 1 if len(result.regressions) else 0
