"""What a run's W&B run holds of its :class:`~pkb_ray.summary.run.RunSummary`:

- summary: :attr:`RunSummary.scalars` (every score over all models, ``pass@1`` ..., and per model,
  ``<model>/pass@1`` ..., each with its 95 % interval: Wilson for the rates, ``pass@1_lo``/``_hi``
  (beside pass@k's standard error ``pass@1_se``), ``fast_1.0@1_lo``/``_hi``, bootstrap for the
  speedups, ``geomean_speedup_lo``/``_hi`` ...; ``fast_1.0@k`` with its standard error
  ``fast_1.0@k_se`` for k > 1; ``timing``), and with refinement ``round<r>/pass@1`` (and ``_se``,
  ``_lo``, ``_hi``) and ``round<r>/fast_1.0@1`` (and ``_lo``/``_hi``) (``<model>/round<r>/...`` with
  several models);
- tables: ``samples`` (one row per result: size, message bytes, timing mode and times, message
  trimmed, source), ``per_problem``, ``per_category``, ``pass_at_k`` (the curves, long format, each
  point with its ``se`` and 95 % band ``lo``/``hi``), ``fast_p`` (fast_p@1 against p, with its band), and
  when the run has them ``size_sweeps``, ``across_nodes`` and ``rounds``;
- plots: ``pass@k`` and ``fast_1.0@k`` lines, status counts as bars, the histogram of log2 speedup
  of correct samples, best speedup against message bytes (size sweeps), pass@1 per round (W&B's line
  plots draw no bands: each title names the table column holding its interval, or says why none);
- ``report``: the HTML page as report.html has it; a large run's without the samples' blocks,
  which are the panels ``report_sources/<problem>`` (one per problem, as ``sources/`` beside
  report.html), named on the page where report.html links (a W&B panel cannot link to another).

wandb is imported here only, when a run is logged (:class:`pkb_ray.summary.tracking.Tracker`).
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from pkb_ray.summary import render_html
from pkb_ray.summary.run import RunSummary

SAMPLE_COLUMNS = ["problem_id", "category", "model", "sample_index", "backend", "world_size", "size",
                  "message_bytes", "status", "speedup", "timing_mode", "ref_time_us", "cand_time_us", "sol_fraction",
                  "message", "source"]
MESSAGE_CHARS = 300


def summary_keys(summary: RunSummary) -> dict[str, Any]:
    """The run's W&B summary."""
    out = dict(summary.scalars)
    if summary.rounds is not None:
        single = summary.rounds["model"].nunique() == 1
        for row in summary.rounds.to_dict("records"):
            prefix = f"round{row['round']}" if single else f"{row['model']}/round{row['round']}"
            for key in ("pass@1", "pass@1_se", "pass@1_lo", "pass@1_hi",
                        "fast_1.0@1", "fast_1.0@1_lo", "fast_1.0@1_hi"):
                if pd.notna(row.get(key)):
                    out[f"{prefix}/{key}"] = row[key]
    return out


def history(summary: RunSummary, report: dict[str, str] | None = None) -> dict[str, Any]:
    """The tables, plots and pages (``report``: :func:`.render_html.pages` with ``panels``, each
    page a panel of its own), as one ``run.log`` of W&B objects."""
    import wandb

    df = summary.rows
    samples = df[[c for c in SAMPLE_COLUMNS if c in df]].assign(message=df["message"].str[:MESSAGE_CHARS])
    tables = {"samples": samples, "per_problem": summary.per_problem, "per_category": summary.per_category,
              "pass_at_k": summary.curves, "fast_p": summary.thresholds}
    logged: dict[str, Any] = {name: _table(t) for name, t in tables.items()}
    curve = summary.curves
    lines = wandb.Table(dataframe=curve.assign(line=curve["model"] + " " + curve["metric"]))
    logged["pass_at_k_plot"] = wandb.plot.line(lines, "k", "value", stroke="line", title="pass@k and fast_1.0@k (95 % bands: lo, hi of the pass_at_k table)")
    counts = pd.DataFrame(list(summary.statuses.items()), columns=["status", "samples"])
    logged["status_plot"] = wandb.plot.bar(_table(counts), "status", "samples", title="samples by status (counts: exact)")
    if summary.correct_speedups:
        hist = pd.DataFrame({"log2_speedup": [math.log2(s) for s in summary.correct_speedups]})
        logged["speedup_plot"] = wandb.plot.histogram(_table(hist), "log2_speedup",
                                                      title="log2 speedup of correct samples (their spread)")
    if summary.sizes is not None:
        sweep = summary.sizes
        line = sweep["model"] + " " + sweep["problem"] + " W=" + sweep["W"].astype(str)
        table = _table(sweep.assign(line=line))
        logged["size_sweeps"] = table
        logged["size_sweeps_plot"] = wandb.plot.line(
            table, "bytes", "best speedup", stroke="line",
            title="best speedup (a maximum: no interval) against message bytes (1 = the reference)")
    if summary.across_nodes is not None and not summary.across_nodes.empty:
        logged["across_nodes"] = _table(summary.across_nodes)
    if summary.rounds is not None and not summary.rounds.empty:
        rounds = _table(summary.rounds)
        logged["rounds"] = rounds
        title = "pass@1 after each refinement round (95 % Wilson interval: pass@1_lo, pass@1_hi of the rounds table)"
        logged["rounds_plot"] = wandb.plot.line(rounds, "round", "pass@1", stroke="model", title=title)
    for path, text in (report or {}).items():
        logged[render_html.wandb_panel(path)] = wandb.Html(text, inject=False)
    return logged


def _table(frame: pd.DataFrame):
    import wandb

    return wandb.Table(dataframe=frame.reset_index(drop=True))
