"""A report of one or more runs' results: a self-contained HTML page and a Markdown summary.

Sections (each an ``id`` in the HTML, a heading in the Markdown):

- ``leaderboard``: one row per model, ranked by fast_1.0@1 then pass@1;
- ``pass-at-k``: pass@k and fast_1.0@k curves per model, k = 1..samples per problem;
- ``speedups``: the speedup of correct samples per category and model (log scale), with the
  geometric means in a table;
- ``failures``: why samples fail, as shares of each status per model and counts per category;
- ``problems``: per problem, each model's pass@1, best speedup and that sample's fraction of
  speed of light, the reference's and that sample's microseconds with spread, and a link to it;
- ``grid``: problems x models, the share correct and the best speedup;
- ``samples``: every result (up to :data:`SAMPLE_LIMIT`) as a block to open: message, per-rank times
  with interquartile range, speedup, fraction of speed of light, round, source;
- ``run``: hardware, versions, configuration, the W&B run.

Pure: reads a DataFrame of result rows (``RESULT_SCHEMA`` columns), writes files. Figures are
matplotlib SVG inlined in the page, so the page needs nothing else to be read.
"""

from __future__ import annotations

import hashlib
import html
import json
import math
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable

import pandas as pd

from pkb_ray import size_sweeps
from pkb_ray.figures import pyplot, svg
from pkb_ray.metrics import as_scored, curves, fast_col, final_and_rounds, pass_col, summarize, timing_note
from pkb_ray.names import Status
from pkb_ray.results import RESULT_KEY, newest, read_results

STATUS_COLORS = {
    Status.INVALID_SAMPLE: "#9e9e9e", Status.COMPILE_ERROR: "#8d6e63", Status.IMPORT_ERROR: "#ffb74d",
    Status.RUNTIME_ERROR: "#ef5350", Status.TIMEOUT: "#ab47bc", Status.CRASH: "#212121", Status.WRONG_OUTPUT: "#ffd54f",
    Status.TAMPERING: "#d50000", Status.UNSUPPORTED_HARDWARE: "#90a4ae", Status.CORRECT: "#43a047",
}
NOTES = {
    "leaderboard": "pass@1: chance that one sample of a problem is correct on every rank, averaged over problems. "
                   "fast_p@1: chance that it is correct and more than p times faster than the PyTorch + NCCL "
                   "reference. Speedups and fractions of speed of light are over correct samples.",
    "pass-at-k": "Unbiased estimates from n samples per problem, averaged over problems; k runs up to the fewest "
                 "samples any problem of the model has, so every point averages the same problems.",
    "speedups": "Reference time / candidate time, correct samples only; each box is one category and model.",
    "failures": "Status of every sample: invalid and compile errors come before any GPU work; timeout and crash "
                "are hangs and dead ranks; wrong_output ran but disagreed with the reference; tampering was caught "
                "changing the evaluator or forging its times.",
    "problems": "Best speedup among the model's correct samples of the problem, and that sample's fraction of "
                "the speed-of-light time (1.0 = at the hardware bound; 'estimate (traced)': a problem with no "
                "bound of its own, bounded by what one traced reference call moves and computes).",
    "nodes": "The same samples on gangs spread over nodes (hardware.spread), beside the same world size inside one "
             "node: the reference's median time in each (measured beside every sample), how much slower it is "
             "across nodes, and the model's best speedup over each reference.",
    "verdicts": "pkb_verdict is ParallelKernelBench's own rule on the same outputs (first call only, allclose "
                "1e-2 after a float cast; dtype, inputs and timed calls not checked). Each row: a model's samples "
                "that one rule passes and the other does not, with pkb_ray's status and the first line of why.",
    "grid": "Each cell: the share of the model's samples of the problem that are correct, and the best "
            "correct speedup (a link to that sample).",
    "samples": "Every result, by model and problem: open one for its message, each rank's median time and "
               "interquartile range (microseconds, reference and sample), and its source.",
    "run": "The hardware, the versions the results were measured with, the configuration and the W&B run.",
    "sizes": "Problems evaluated at several sizes (eval.sizes): per size, the bytes of one call's inputs on a "
             "rank, the reference's median time and the model's best correct sample (eager calls and graph "
             "replays each, where both were timed). A model's crossover, the size from which its best sample "
             "stops beating the reference, is where its speedup line crosses the dashed line.",
    "refinement": "Failed or slow samples went back to the model with the evaluator's feedback; each row counts "
                  "every sample's latest version after that round (round 0: the first answers).",
}
SECTIONS = {"leaderboard": "Leaderboard", "pass-at-k": "pass@k and fast_1.0@k", "speedups": "Speedups of correct samples",
            "failures": "Why samples fail", "problems": "Per problem", "grid": "Models x problems",
            "samples": "Every sample", "run": "The run"}


def across_nodes(df: pd.DataFrame) -> pd.DataFrame | None:
    """Per model, problem and spread layout: the reference inside one node and across nodes, and the
    best correct speedup over each (None when no gang spanned nodes)."""
    nodes = df["nodes"].fillna(1).astype(int) if "nodes" in df else pd.Series(1, index=df.index)
    spread, one = df[nodes > 1], df[nodes == 1]
    if spread.empty:
        return None
    rows = []
    for (model, pid, w, n), g in spread.assign(nodes=nodes[nodes > 1]).groupby(
            ["model", "problem_id", "world_size", "nodes"], sort=True):
        inside = one[(one["problem_id"] == pid) & (one["world_size"] == w)]
        ref_one, ref_spread = inside["ref_time_us"].median(), g["ref_time_us"].median()
        correct = Status.CORRECT.value
        rows.append({
            "model": model, "problem": pid, "layout": f"{n}x{w // n}",
            "ref one node (us)": ref_one, "ref across nodes (us)": ref_spread,
            "across / one node": ref_spread / ref_one if pd.notna(ref_one) and ref_one > 0 else None,
            "best speedup, one node": inside.loc[(inside["status"] == correct) & (inside["model"] == model),
                                                 "speedup"].max(),
            "best speedup, across nodes": g.loc[g["status"] == correct, "speedup"].max(),
        })
    return pd.DataFrame(rows)


def verdicts(df: pd.DataFrame) -> pd.DataFrame | None:
    """Per model: samples judged by both rules, how many each passes, and every sample where they
    disagree (None when no row has PKB's verdict)."""
    if "pkb_verdict" not in df or df["pkb_verdict"].isna().all():
        return None
    both = df[df["pkb_verdict"].notna()]
    pkb_ok = both["pkb_verdict"].astype(bool)
    ours_ok = both["status"] == Status.CORRECT.value
    rows = []
    for model, g in both.groupby("model", sort=True):
        p, o = pkb_ok[g.index], ours_ok[g.index]
        rows.append({"model": model, "sample": "(all)", "judged": len(g), "pkb_correct": int(p.sum()),
                     "pkb_ray_correct": int(o.sum()), "status": "", "why": ""})
        for _, r in g[p != o].sort_values(["problem_id", "sample_index"]).iterrows():
            rows.append({"model": model, "sample": f"{r['problem_id']}/{r['sample_index']}", "judged": 1,
                         "pkb_correct": int(bool(r["pkb_verdict"])), "pkb_ray_correct": int(r["status"] == Status.CORRECT.value),
                         "status": r["status"], "why": str(r["message"]).strip().splitlines()[0][:160]
                         if str(r["message"]).strip() else ""})
    return pd.DataFrame(rows)


def leaderboard(df: pd.DataFrame) -> pd.DataFrame:
    s = summarize(df, ["model"], ks=(1,))
    board = pd.DataFrame({
        "model": s["model"],
        "problems": [df.loc[df["model"] == m, "problem_id"].nunique() for m in s["model"]],
        "samples": s["n"],
        "pass@1": s[pass_col(1)],
        "fast_1.0@1": s[fast_col(1.0)],
        "fast_1.5@1": s[fast_col(1.5)],
        "geomean speedup": s["geomean_speedup"],
        "median SOL fraction": s["median_sol_fraction"],
    })
    board = board.sort_values(["fast_1.0@1", "pass@1"], ascending=False, na_position="last").reset_index(drop=True)
    board.insert(0, "rank", range(1, len(board) + 1))
    return board


def status_table(df: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    counts = df.groupby(by + ["status"]).size().unstack("status", fill_value=0)
    cols = [s.value for s in Status if s.value in counts.columns]
    counts = counts[cols]
    counts["total"] = counts.sum(axis=1)
    return counts.reset_index()


def per_problem(df: pd.DataFrame) -> pd.DataFrame:
    rows = []
    scores = summarize(df, ["problem_id", "model"], ks=(1,)).set_index(["problem_id", "model"])  # one pass@1
    for (pid, model), g in df.groupby(["problem_id", "model"], sort=True):
        ok = g[(g["status"] == Status.CORRECT.value) & g["speedup"].notna()]
        best = ok.loc[ok["speedup"].idxmax()] if len(ok) else None
        rows.append({"problem": pid, "category": g["category"].iloc[0], "model": model, "samples": len(g),
                     "pass@1": scores.loc[(pid, model), pass_col(1)],
                     "best speedup": best["speedup"] if best is not None else math.nan,
                     "SOL fraction of best": best["sol_fraction"] if best is not None else math.nan,
                     "SOL": {"traced": "estimate (traced)"}.get(best.get("sol_source", ""), "")
                     if best is not None else "",
                     "reference us": g["ref_time_us"].median() if "ref_time_us" in g else math.nan,
                     "best us": best["cand_time_us"] if best is not None and "cand_time_us" in best else math.nan,
                     "best IQR us": _spread(best, "cand_iqr_us") if best is not None else math.nan,
                     "best sample": sample_anchor(best) if best is not None else ""})
    return pd.DataFrame(rows, columns=["problem", "category", "model", "samples", "pass@1", "best speedup",
                                       "SOL fraction of best", "SOL", "reference us", "best us", "best IQR us",
                                       "best sample"])


def _spread(row, column: str) -> float:
    """The largest per-rank interquartile range of a row's times (NaN without any)."""
    values = row.get(column) if hasattr(row, "get") else None
    values = [] if values is None else [v for v in values if v is not None and not math.isnan(v)]
    return max(values) if values else math.nan


def sample_anchor(row) -> str:
    """The HTML id of a result's block in the samples section: a digest of its whole result key
    (sample keys hold '/' and share long prefixes, so no part of one makes a safe, unique id)."""
    key = "\x1f".join(str(row.get(k, "")) for k in RESULT_KEY)
    return "s-" + hashlib.sha256(key.encode()).hexdigest()[:16]


def _grid_cells(df: pd.DataFrame) -> dict[str, dict[str, tuple[str, str]]]:
    """problem -> model -> (share correct and best correct speedup, the anchor of that best sample)."""
    cells: dict[str, dict[str, tuple[str, str]]] = {}
    for (pid, model), g in df.groupby(["problem_id", "model"], sort=True):
        ok = g[(g["status"] == Status.CORRECT.value) & g["speedup"].notna()]
        rate = (g["status"] == Status.CORRECT.value).mean()
        best = ok.loc[ok["speedup"].idxmax()] if len(ok) else None
        text = f"{rate:.2f}" + (f" / {best['speedup']:.2f}x" if best is not None else "")
        cells.setdefault(pid, {})[model] = (text, sample_anchor(best) if best is not None else "")
    return cells


def grid(df: pd.DataFrame) -> pd.DataFrame:
    """Problems x models: each cell the share of correct samples and the best correct speedup."""
    models = sorted(df["model"].unique())
    return pd.DataFrame([{"problem": pid, **{m: row.get(m, ("", ""))[0] for m in models}}
                         for pid, row in sorted(_grid_cells(df).items())], columns=["problem", *models])


def grid_html(df: pd.DataFrame) -> str:
    """:func:`grid` as an HTML table whose cells open the best sample's block."""
    models = sorted(df["model"].unique())
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in ["problem", *models])
    rows = []
    for pid, row in sorted(_grid_cells(df).items()):
        cells = []
        for m in models:
            text, anchor = row.get(m, ("", ""))
            cells.append(f'<td><a href="#{anchor}">{html.escape(text)}</a></td>' if anchor
                         else f"<td>{html.escape(text)}</td>")
        rows.append(f"<tr><td>{html.escape(pid)}</td>{''.join(cells)}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def category_speedups(df: pd.DataFrame) -> pd.DataFrame:
    ok = df[(df["status"] == Status.CORRECT.value) & (df["speedup"] > 0)]
    if ok.empty:
        return pd.DataFrame(columns=["category", "model", "correct", "geomean speedup", "faster than reference"])
    g = ok.groupby(["category", "model"])["speedup"]
    scores = summarize(ok, ["category", "model"], ks=(1,)).set_index(["category", "model"])
    return pd.DataFrame({
        "correct": g.size(),
        "geomean speedup": scores["geomean_speedup"],
        "faster than reference": g.apply(lambda s: (s > 1).mean()),
    }).reset_index()


# ---- figures -------------------------------------------------------------------------------------

def figure_curves(df: pd.DataFrame) -> str:
    plt = pyplot()
    from matplotlib.ticker import MaxNLocator

    c = curves(df, ["model"], ps=(1.0,))
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), sharey=True)
    for ax, metric, title in ((axes[0], "pass", "pass@k"), (axes[1], "fast_1.0", "fast_1.0@k (correct and faster)")):
        for model, g in c[c["metric"] == metric].groupby("model"):
            ax.plot(g["k"], g["value"], marker="o", markersize=3, label=model)
        ax.set_title(title)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("k (samples drawn per problem)")
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("mean over problems")
    axes[1].legend(loc="lower right", fontsize=8)
    return svg(fig, "curves")


def figure_speedups(df: pd.DataFrame) -> str:
    plt = pyplot()
    ok = df[(df["status"] == Status.CORRECT.value) & (df["speedup"] > 0)]
    models = sorted(df["model"].unique())
    cats = sorted(ok["category"].unique()) or ["(none)"]
    fig, ax = plt.subplots(figsize=(10, 0.5 + 0.45 * len(cats) * max(1, len(models))))
    pos, labels, data = [], [], []
    for i, cat in enumerate(cats):
        for j, model in enumerate(models):
            vals = ok[(ok["category"] == cat) & (ok["model"] == model)]["speedup"].tolist()
            if vals:
                pos.append(i * (len(models) + 1) + j)
                labels.append(f"{cat} | {model}")
                data.append(vals)
    if data:
        ax.boxplot(data, positions=pos, orientation="horizontal", widths=0.7, showfliers=True)
        ax.set_yticks(pos, labels)
    ax.set_xscale("log")
    ax.axvline(1.0, color="#c62828", linewidth=1, linestyle="--")
    ax.set_xlabel("speedup over the reference (log scale; dashed: as fast)")
    ax.grid(axis="x", alpha=0.3)
    return svg(fig, "speedups")


def figure_failures(df: pd.DataFrame) -> str:
    plt = pyplot()
    counts = status_table(df, ["model"]).set_index("model")
    shares = counts.drop(columns="total").div(counts["total"], axis=0)
    fig, ax = plt.subplots(figsize=(10, 0.6 + 0.45 * len(shares)))
    left = pd.Series(0.0, index=shares.index)
    for status in shares.columns:
        ax.barh(shares.index, shares[status], left=left, color=STATUS_COLORS.get(status, "#607d8b"), label=status)
        left += shares[status]
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of samples")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return svg(fig, "failures")


# ---- output --------------------------------------------------------------------------------------

def _fmt(v) -> str:
    if isinstance(v, float):
        return "-" if math.isnan(v) else f"{v:.3g}" if abs(v) < 1000 else f"{v:,.0f}"
    return str(v)


def markdown_table(df: pd.DataFrame) -> str:
    if df.empty:
        return "_(none)_\n"
    head = "| " + " | ".join(map(str, df.columns)) + " |"
    sep = "| " + " | ".join("---" for _ in df.columns) + " |"
    body = ["| " + " | ".join(_fmt(v).replace("|", "/") for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join([head, sep, *body]) + "\n"


LINKS = ("best sample",)  # columns holding the anchor of a sample's block: shown as a link to it


def _cell(column: str, value) -> str:
    if column in LINKS:
        return f'<a href="#{html.escape(str(value))}">open</a>' if value else ""
    if isinstance(value, str) and value.startswith(("https://", "http://")) and " " not in value:
        return f'<a href="{html.escape(value)}">{html.escape(value)}</a>'  # e.g. the W&B run
    return html.escape(_fmt(value))


def html_table(df: pd.DataFrame) -> str:
    if df.empty:
        return "<p><em>(none)</em></p>"
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in df.columns)
    body = "".join("<tr>" + "".join(f"<td>{_cell(c, v)}</td>" for c, v in zip(df.columns, row)) + "</tr>"
                   for row in df.itertuples(index=False))
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


CSS = """
body { font-family: system-ui, -apple-system, Segoe UI, sans-serif; margin: 2rem auto; max-width: 1100px;
       color: #1f2933; padding: 0 1rem; }
h1 { font-size: 1.6rem; margin-bottom: .2rem; } h2 { margin-top: 2.2rem; border-bottom: 1px solid #e4e7eb; }
.meta, .note { color: #616e7c; font-size: .9rem; } .note { max-width: 80ch; } nav a { margin-right: 1rem; }
table { border-collapse: collapse; font-size: .85rem; margin: .6rem 0; }
th, td { padding: .3rem .6rem; border-bottom: 1px solid #e4e7eb; text-align: right; }
th:first-child, td:first-child, td:nth-child(2) { text-align: left; }
thead th { background: #f5f7fa; position: sticky; top: 0; } svg { max-width: 100%; height: auto; }
details { border-bottom: 1px solid #e4e7eb; padding: .2rem 0; } summary { cursor: pointer; font-size: .9rem; }
pre { background: #f5f7fa; padding: .5rem; overflow-x: auto; font-size: .8rem; } pre.src { max-height: 30rem; }
"""


# A link to a closed <details> scrolls to it but leaves it shut: open whatever block the address names.
OPEN_TARGET = """
function openTarget() {
  const el = document.getElementById(decodeURIComponent(location.hash.slice(1)));
  if (el && el.tagName === "DETAILS") { el.open = true; el.scrollIntoView(); }
}
addEventListener("hashchange", openTarget);
addEventListener("DOMContentLoaded", openTarget);
"""

SAMPLE_LIMIT = 3000  # blocks in one page; the rest are in the Parquet and W&B's samples table


def sample_blocks(df: pd.DataFrame, limit: int = SAMPLE_LIMIT) -> str:
    """One ``<details id=...>`` per result: status, message, per-rank times, speedup, SOL, round, source."""
    out = []
    rows = df.sort_values(["model", "problem_id", "sample_index", "world_size"])
    for _, r in rows.head(limit).iterrows():
        where = [f"W={int(r['world_size'])}", *(str(r.get(k) or "") for k in ("size", "dtype")),
                 f"round {int(r.get('round', 0) or 0)}"]
        head = (f"{r['model']} / {r['problem_id']} #{int(r['sample_index'])} ({', '.join(filter(None, where))}): "
                f"{r['status']}")
        if pd.notna(r.get("speedup")):
            head += f", {r['speedup']:.3g}x"
        if pd.notna(r.get("sol_fraction")):
            head += f", {r['sol_fraction']:.3g} of SOL"
        ranks = _rank_times(r)
        out.append(f'<details id="{sample_anchor(r)}"><summary>{html.escape(head)}</summary>'
                   + (f"<pre>{html.escape(str(r['message']))}</pre>" if str(r.get("message", "")).strip() else "")
                   + (html_table(ranks) if not ranks.empty else "")
                   + f"<pre class='src'>{html.escape(str(r.get('source', '') or ''))}</pre></details>")
    more = len(rows) - limit
    if more > 0:
        out.append(f"<p class='note'>{more} more results are in the Parquet files (not shown here).</p>")
    return "".join(out)


def _rank_times(r) -> pd.DataFrame:
    cols = ("ref_median_us", "ref_iqr_us", "cand_median_us", "cand_iqr_us")
    values = [list(r.get(c)) if r.get(c) is not None and not isinstance(r.get(c), float) else [] for c in cols]
    n = max(map(len, values))
    return pd.DataFrame({"rank": range(n), **{
        name: [v[i] if i < len(v) else math.nan for i in range(n)]
        for name, v in zip(("reference us (median)", "reference IQR", "sample us (median)", "sample IQR"), values)}})


def run_table(df: pd.DataFrame, run_info: dict | None) -> pd.DataFrame:
    """What the runs were: hardware, versions seen in the rows, the W&B run, the config's main keys."""
    rows = [("hardware", ", ".join(sorted(df["hardware"].astype(str).unique())))]
    if "versions" in df:
        seen: dict[str, set] = {}
        for versions in df["versions"].dropna():
            for k, v in (versions.items() if isinstance(versions, dict) else versions):
                seen.setdefault(k, set()).add(str(v))
        rows += [(k, ", ".join(sorted(v))) for k, v in sorted(seen.items())]
    for key, value in (run_info or {}).items():
        rows.append((key, value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)))
    return pd.DataFrame(rows, columns=["what", "value"])


def optional_sections(spread, df: pd.DataFrame, rounds) -> dict[str, tuple[str, pd.DataFrame, str]]:
    """The sections a run has only sometimes: key -> (heading, table, figures above it)."""
    found = {}
    if spread is not None:
        found["nodes"] = ("Across nodes", spread, "")
    both = verdicts(df)
    if both is not None:
        found["verdicts"] = ("PKB's verdict beside pkb_ray's", both, "")
    if rounds is not None:
        found["refinement"] = ("After each refinement round", rounds, "")
    sizes = size_sweeps.table(df)
    if sizes is not None:
        found["sizes"] = ("Against message size", sizes, size_sweeps.figures(sizes))
    return found


def build(df: pd.DataFrame, title: str = "pkb_ray report", run_info: dict | None = None) -> tuple[str, str]:
    """(HTML page, Markdown summary) of result rows. With refinement rounds, every section counts
    each sample's latest version, and a section shows pass@1 and fast_1.0@1 after each round."""
    spread = across_nodes(as_scored(df))
    df, rounds = final_and_rounds(as_scored(df))
    board, problems = leaderboard(df), per_problem(df)
    failures = status_table(df, ["model", "category"])
    speed = category_speedups(df)
    hardware = ", ".join(sorted(df["hardware"].astype(str).unique()))
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    meta = (f"{len(df)} results, {df['model'].nunique()} model(s), {df['problem_id'].nunique()} problem(s); "
            f"hardware: {hardware}; {timing_note(df)}; generated {stamp}")
    blocks = {
        "leaderboard": html_table(board),
        "pass-at-k": figure_curves(df),
        "speedups": figure_speedups(df) + html_table(speed),
        "failures": figure_failures(df) + html_table(failures),
        "problems": html_table(problems),
    }
    blocks["grid"] = grid_html(df)
    blocks["samples"] = sample_blocks(df)
    blocks["run"] = html_table(run_table(df, run_info))
    sections = dict(SECTIONS)
    extra = optional_sections(spread, df, rounds)
    for key, (heading, frame, figures) in extra.items():
        sections[key] = heading
        blocks[key] = figures + html_table(frame)
    nav = "".join(f'<a href="#{k}">{v}</a>' for k, v in sections.items())
    body = "".join(f'<section id="{k}"><h2>{sections[k]}</h2><p class="note">{html.escape(NOTES[k])}</p>'
                   f'{blocks[k]}</section>' for k in sections)
    page = (f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{CSS}</style><script>{OPEN_TARGET}</script></head><body><h1>{html.escape(title)}</h1><p class='meta'>{html.escape(meta)}</p>"
            f"<nav>{nav}</nav>{body}</body></html>\n")
    c = curves(df, ["model"], ps=(1.0,))
    pivot = c.pivot_table(index=["model", "k"], columns="metric", values="value").reset_index()
    md = "\n".join([
        f"# {title}", "", meta, "",
        f"## {SECTIONS['leaderboard']}", "", NOTES["leaderboard"], "", markdown_table(board),
        f"## {SECTIONS['pass-at-k']}", "", NOTES["pass-at-k"], "",
        markdown_table(pivot.rename(columns={"pass": "pass@k", "fast_1.0": "fast_1.0@k"})),
        f"## {SECTIONS['speedups']}", "", NOTES["speedups"], "", markdown_table(speed),
        f"## {SECTIONS['failures']}", "", NOTES["failures"], "", markdown_table(failures),
        f"## {SECTIONS['problems']}", "", NOTES["problems"], "", markdown_table(problems.drop(columns="best sample")),
        f"## {SECTIONS['grid']}", "", NOTES["grid"], "", markdown_table(grid(df)),
        f"## {SECTIONS['samples']}", "", "Each result's message, per-rank times and source are in report.html.", "",
        f"## {SECTIONS['run']}", "", NOTES["run"], "", markdown_table(run_table(df, run_info)),
    ] + [line for key, (heading, frame, _) in extra.items()
         for line in (f"## {heading}", "", NOTES[key], "", markdown_table(frame))])
    return page, md


def write(df: pd.DataFrame, out_dir: Path, title: str = "pkb_ray report",
          run_info: dict | None = None) -> tuple[Path, Path]:
    """Write ``report.html`` and ``report.md`` into ``out_dir``; returns their paths. ``run_info``:
    what the run section shows besides the rows' hardware and versions (config, W&B run)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    page, md = build(df, title, run_info)
    (out_dir / "report.html").write_text(page)
    (out_dir / "report.md").write_text(md)
    return out_dir / "report.html", out_dir / "report.md"


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
    page, md = write(df, args.out, args.title)
    print(f"{len(df)} results -> {page} and {md}")
    return 0
