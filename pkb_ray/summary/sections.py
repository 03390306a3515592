"""The report's sections: their headings and the note under each (one text for HTML and Markdown).

Always shown, in order (:data:`SECTIONS`): leaderboard (one row per model, ranked by fast_1.0@1
then pass@1), pass@k and fast_1.0@k curves, speedups of correct samples per category, why samples
fail, per problem, the models x problems grid, every sample (HTML only) and the run. Shown when the
run has them (:data:`OPTIONAL`): across nodes, a second rule's verdict beside ours
(:func:`pkb_ray.spec.formats.second_verdict`), refinement rounds,
size sweeps.
"""

import math

import pandas as pd

from pkb_ray.spec import formats

_SECOND = formats.second_verdict()

NOTES = {
    "leaderboard": "pass@1: chance that one sample of a problem is correct on every rank, averaged over problems. "
                   "fast_p@1: chance that it is correct and more than p times faster than the PyTorch + NCCL "
                   "reference. Speedups and fractions of speed of light are over correct samples. [lo, hi]: 95 % "
                   "interval, Wilson for pass@1 and fast_p@1, bootstrap for the speedups (docs/statistics.md).",
    "pass-at-k": "Unbiased estimates from n samples per problem, averaged over problems; k runs up to the fewest "
                 "samples any problem of the model has, so every point averages the same problems (the table's "
                 "problems column says how many). Right: "
                 "fast_p@1 against the threshold p. Shaded and [lo, hi]: 95 % bands, the bootstrap's for pass@k and "
                 "fast_1.0@k (samples resampled within problems), Wilson intervals for fast_p@1 (docs/statistics.md).",
    "speedups": "Reference time / candidate time, correct samples only; each box is one category and model (the "
                "samples' spread: quartiles and whiskers). The table: their geometric mean and the share of them "
                "faster than the reference, each with its 95 % bootstrap interval (samples resampled within "
                "problems, docs/statistics.md).",
    "failures": "Status of every sample: invalid and compile errors come before any GPU work; timeout and crash "
                "are hangs and dead ranks; wrong_output ran but disagreed with the reference; tampering was caught "
                "changing the evaluator or forging its times. Counts of this run's samples, exact: no interval.",
    "problems": "Best speedup among the model's correct samples of the problem (their maximum: an extreme, shown "
                "without an interval, docs/statistics.md), and that sample's fraction of "
                "the speed-of-light time (1.0 = at the hardware bound; 'estimate (traced)': a problem with no "
                "bound of its own, bounded by what one traced reference call moves and computes) and time: "
                "that one sample's figures, without an interval like the maximum (best IQR: the spread of its "
                "calls, on its most spread rank). Reference us: the median of the reference's times, measured beside "
                "every sample, with its 95 % bootstrap interval over those measurements (none from one).",
    "nodes": "The same samples on gangs spread over nodes (hardware.spread), beside the same world size inside one "
             "node: the reference's median time in each (measured beside every sample), how much slower it is "
             "across nodes, and the model's best speedup over each reference (a maximum: no interval). The times "
             "and their ratio have a 95 % bootstrap interval over the reference's measurements (each side drawn "
             "on its own); from fewer than two measurements on a side, none: one time has no spread to resample.",
    "verdicts": _SECOND.note if _SECOND else "",
    "grid": "Each cell: the share of the model's samples of the problem that are correct (pass@1; its standard "
            "error in the cell's tooltip and, in report.md, beside it), and the best correct speedup (a link to that "
            "sample; a maximum, without an interval).",
    "samples": "Every result, by model and problem: open one for its message, each rank's median time and "
               "interquartile range (microseconds, reference and sample), and its source.",
    "run": "The hardware, the versions the results were measured with, the configuration and the W&B run.",
    "sizes": "Problems evaluated at several sizes (eval.sizes): per size, the bytes of one call's inputs on a "
             "rank, the reference's median time (with its 95 % bootstrap interval over the samples' measurements, "
             "none from one) and the model's best correct sample, its time and speedup (eager calls and graph "
             "replays each, where both were timed; a maximum, without an interval). A model's crossover, the size "
             "from which its best sample stops beating the reference, is where its speedup line crosses the "
             "dashed line.",
    "refinement": "Failed or slow samples went back to the model with the evaluator's feedback; each row counts "
                  "every sample's latest version after that round (round 0: the first answers).",
}
SECTIONS = {"leaderboard": "Leaderboard", "pass-at-k": "pass@k and fast_1.0@k", "speedups": "Speedups of correct samples",
            "failures": "Why samples fail", "problems": "Per problem", "grid": "Models x problems",
            "samples": "Every sample", "run": "The run"}
OPTIONAL = {"nodes": "Across nodes", "verdicts": _SECOND.title if _SECOND else "A second verdict",
            "refinement": "After each refinement round", "sizes": "Against message size"}


def optional(summary) -> dict[str, object]:
    """The optional sections this run has: key -> its table (a :class:`RunSummary`'s, as it is)."""
    found = {"nodes": summary.across_nodes, "verdicts": summary.verdicts, "refinement": summary.rounds,
             "sizes": summary.sizes}
    return {key: table for key, table in found.items() if table is not None}


def with_se(value, se, show=None) -> str:
    """A score and its standard error, ``0.47±0.10`` (no ± when there is none), for a score without
    an interval (:func:`with_interval` where it has one)."""
    show = show or fmt
    return show(value) if _missing(se) or _missing(value) else f"{show(value)}±{show(se)}"


def with_interval(value, lo, hi, show=None) -> str:
    """A figure and its interval, ``1.07 [0.95, 1.21]``; ``1.07 [n/a]`` when it has none (too few
    samples or measurements to say how far it could be off)."""
    show = show or fmt
    if _missing(value):
        return show(value)
    return f"{show(value)} [n/a]" if _missing(lo) else f"{show(value)} [{show(lo)}, {show(hi)}]"


def fold(df: pd.DataFrame) -> pd.DataFrame:
    """A table as the pages show it: each column ``c`` with a ``c_lo``/``c_hi`` or ``c_se`` beside
    it (:func:`pkb_ray.summary.tables.with_bounds`, the frames of :func:`pkb_ray.results.metrics.summarize`)
    becomes one cell of text, its interval where it has both (pass@k), and those columns go; so do
    columns with nothing in them (a run without a speed-of-light bound shows no SOL column)."""
    empty = {c for c in df.columns if len(df) and all(_missing(v) or v == "" for v in df[c])
             and not c.endswith(("_se", "_lo", "_hi"))}
    df = df.drop(columns=sorted(empty | {f"{c}{end}" for c in empty for end in ("_se", "_lo", "_hi")} & set(df.columns)))
    out, gone = df.copy(), set()
    for c in df.columns:
        if f"{c}_lo" in df and f"{c}_hi" in df:
            out[c] = [with_interval(v, lo, hi) for v, lo, hi in zip(df[c], df[f"{c}_lo"], df[f"{c}_hi"])]
            gone |= {f"{c}_lo", f"{c}_hi", f"{c}_se"} & set(df.columns)
        elif f"{c}_se" in df:
            out[c] = [with_se(v, se) for v, se in zip(df[c], df[f"{c}_se"])]
            gone.add(f"{c}_se")
    return out.drop(columns=sorted(gone))


def _missing(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def fmt(v) -> str:
    """A cell as the pages show it: floats to 3 significant digits, NaN as a dash."""
    if isinstance(v, float):
        return "-" if math.isnan(v) else f"{v:.3g}" if abs(v) < 1000 else f"{v:,.0f}"
    return str(v)
