"""The report's figures: matplotlib (Agg), drawn from a :class:`~pkb_ray.summary.run.RunSummary`
as inline SVG, so a page needs no other file."""

from __future__ import annotations

import io
import math
import re

import pandas as pd

from pkb_ray.spec.names import Status
from pkb_ray.summary.run import RunSummary
from pkb_ray.summary.sizes import MODES, crossover

STATUS_COLORS = {
    Status.INVALID_SAMPLE: "#9e9e9e", Status.COMPILE_ERROR: "#8d6e63", Status.IMPORT_ERROR: "#ffb74d",
    Status.RUNTIME_ERROR: "#ef5350", Status.TIMEOUT: "#ab47bc", Status.CRASH: "#212121", Status.WRONG_OUTPUT: "#ffd54f",
    Status.TAMPERING: "#d50000", Status.UNSUPPORTED_HARDWARE: "#90a4ae", Status.CORRECT: "#43a047",
}


def curves(summary: RunSummary) -> str:
    """pass@k and fast_1.0@k per model against k, and fast_p@1 against the threshold p, each line
    with its 95 % band shaded (bootstrap for the curves against k, Wilson for fast_p@1 against p:
    :attr:`RunSummary.curves`, :attr:`RunSummary.thresholds`);
    the i-th model's bands have the ids ``curves-band-pass-<i>``, ``curves-band-fast_1.0-<i>`` and
    ``curves-band-fast_p-<i>``."""
    plt = pyplot()
    from matplotlib.ticker import MaxNLocator

    c, t = summary.curves, summary.thresholds
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.6), sharey=True)
    for ax, metric, title in ((axes[0], "pass", "pass@k"), (axes[1], "fast_1.0", "fast_1.0@k (correct and faster)")):
        for i, (model, g) in enumerate(c[c["metric"] == metric].groupby("model")):
            line = ax.plot(g["k"], g["value"], marker="o", markersize=3, label=model)[0]
            ax.fill_between(g["k"], g["lo"], g["hi"], color=line.get_color(), alpha=0.18, linewidth=0,
                            gid=f"band-{metric}-{i}")
        ax.set_title(title)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("k (samples drawn per problem)")
    for i, (model, g) in enumerate(t.groupby("model")):
        line = axes[2].plot(g["p"], g["value"], linewidth=1.2, label=model)[0]
        axes[2].fill_between(g["p"], g["lo"], g["hi"], color=line.get_color(), alpha=0.18, linewidth=0,
                             gid=f"band-fast_p-{i}")
    axes[2].axvline(1.0, color="#c62828", linewidth=1, linestyle="--")
    axes[2].set_title("fast_p@1 against p (dashed: p = 1)")
    axes[2].set_xlabel("p (correct and more than p times faster)")
    for ax in axes:
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("mean over problems (shaded: 95 %)")
    axes[2].legend(loc="upper right", fontsize=8)
    return svg(fig, "curves")


def speedups(summary: RunSummary) -> str:
    """The speedups of correct samples per category and model, as boxes on a log axis."""
    plt = pyplot()
    df = summary.rows
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
    ax.axvline(1.0, color="#c62828", linewidth=1, linestyle="--")
    speedup_axis(ax.xaxis, [v for vals in data for v in vals])
    ax.set_xlabel("speedup over the reference (log scale; dashed: as fast)")
    ax.grid(axis="x", alpha=0.3)
    return svg(fig, "speedups")


def failures(summary: RunSummary) -> str:
    """Each model's samples by status, as stacked shares."""
    plt = pyplot()
    shares = summary.status_shares
    fig, ax = plt.subplots(figsize=(10, 0.6 + 0.45 * len(shares)))
    left = pd.Series(0.0, index=shares.index)
    for status in shares.columns:
        ax.barh(shares.index, shares[status], left=left, color=STATUS_COLORS.get(status, "#607d8b"), label=status)
        left += shares[status]
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of samples")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return svg(fig, "failures")


def sizes(sweep: pd.DataFrame) -> str:
    """Per swept (problem, W) of :attr:`RunSummary.sizes`: time and speedup against bytes. On the
    speedup panel the dashed line at 1 is the reference; a dotted line marks a model's crossover."""
    plt = pyplot()
    from matplotlib.ticker import FuncFormatter

    parts = []
    for n, ((pid, w), g) in enumerate(sweep.groupby(["problem", "W"], sort=True)):
        fig, (t_ax, s_ax) = plt.subplots(1, 2, figsize=(10, 3.4))
        _times(t_ax, g)
        both = all(f"{mode} best us" in g for mode in MODES)
        drawn: list[float] = []  # every speedup plotted, for the axis's range
        for model, m in g.groupby("model", sort=True):
            m = m.sort_values("bytes")
            line = s_ax.plot(m["bytes"], m["best speedup"], marker="o", markersize=3, label=model)[0]
            drawn += m["best speedup"].dropna().tolist()
            if both:  # the same model's eager figure beside the graph one
                eager = m["eager reference us"] / m["eager best us"]
                s_ax.plot(m["bytes"], eager, color=line.get_color(), linestyle="-.", linewidth=0.8,
                          label=f"{model} (eager)")
                drawn += eager.dropna().tolist()
            where = crossover(m)
            if where is not None:
                s_ax.axvline(where, color=line.get_color(), linewidth=0.8, linestyle=":")
        s_ax.axhline(1.0, color="#c62828", linewidth=1, linestyle="--")
        speedup_axis(s_ax.yaxis, drawn)
        s_ax.set_title("best speedup, a maximum: no interval (dashed: reference; dotted: crossover)", fontsize=9)
        for ax in (t_ax, s_ax):
            ax.set_xscale("log", base=2)
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: human_bytes(v)))
            ax.set_xlabel("message bytes (one call's inputs, per rank)")
            ax.grid(alpha=0.3)
        s_ax.legend(fontsize=8, loc="best")
        fig.suptitle(f"{pid}, W={w}", fontsize=10)
        parts.append(f'<figure id="size-{pid}-w{w}">{svg(fig, f"size{n}")}</figure>')
    return "".join(parts)


def speedup_axis(axis, values: list[float]) -> None:
    """A log axis of speedups with ticks at powers of two labelled 0.25x, 0.5x, 1x, 2x, 4x ...
    (every other power, or every fourth, where the range is wide), no minor ticks, spanning at
    least 0.5x to 2x so that the 1x line always sits inside it."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    positive = [v for v in values if v > 0 and math.isfinite(v)]
    lo = math.floor(math.log2(min(positive + [0.5])))
    hi = math.ceil(math.log2(max(positive + [2.0])))
    step = 1 if hi - lo <= 8 else 2 if hi - lo <= 16 else 4
    powers = [e for e in range(lo, hi + 1) if e % step == 0]
    getattr(axis.axes, f"set_{axis.axis_name}scale")("log", base=2)
    getattr(axis.axes, f"set_{axis.axis_name}lim")(2.0 ** lo / 1.15, 2.0 ** hi * 1.15)
    axis.set_major_locator(FixedLocator([2.0 ** e for e in powers]))
    axis.set_major_formatter(FuncFormatter(lambda v, _: speedup_label(v)))
    axis.set_minor_locator(NullLocator())


def speedup_label(v: float) -> str:
    """0.125x, 0.25x, 0.5x, 1x, 2x, 64x; 1/16x and below as fractions (where decimals grow long)."""
    return f"{v:g}x" if v >= 1 / 8 else f"1/{1 / v:g}x"


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:g} {unit}"
        n /= 1024
    return ""


def _times(ax, g: pd.DataFrame) -> None:
    """Reference (dashed, its 95 % interval over the measurements shaded where it has one) and best
    sample (solid) times, per timing mode where the rows have both."""
    modes = [m for m in MODES if f"{m} reference us" in g and g[f"{m} reference us"].notna().any()]
    series = [(f"{m} ", f"{m} reference us", f"{m} best us") for m in modes] or [("", "reference us", "best us")]
    ref = g.groupby("bytes").first().reset_index()
    for label, ref_col, _ in series:
        line = ax.plot(ref["bytes"], ref[ref_col], linestyle="--", marker=".", label=f"{label}reference")[0]
        if f"{ref_col}_lo" in ref and f"{ref_col}_hi" in ref:
            ax.fill_between(ref["bytes"], ref[f"{ref_col}_lo"], ref[f"{ref_col}_hi"], color=line.get_color(),
                            alpha=0.18, linewidth=0)
    for model, m in g.groupby("model", sort=True):
        m = m.sort_values("bytes")
        for label, _, best_col in series:
            ax.plot(m["bytes"], m[best_col], marker="o", markersize=3, label=f"{label}{model}")
    ax.set_yscale("log")
    ax.set_ylabel("microseconds per call")
    ax.set_title("time: reference (shaded: 95 %) and best sample (a maximum's: no interval)", fontsize=9)
    ax.legend(fontsize=7, loc="upper left")


def svg(fig, name: str) -> str:
    """``fig`` as inline SVG, its element ids prefixed with ``name``: matplotlib numbers them per
    figure (figure_1, axes_1, ...), so several figures in one page would share ids and references."""
    plt = pyplot()
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    text = buf.getvalue()
    text = text[text.index("<svg"):]
    text = re.sub(r'\bid="([^"]+)"', rf'id="{name}-\1"', text)
    return re.sub(r'(href="#|url\(#)([^")]+)', rf"\1{name}-\2", text)


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams.update({"svg.fonttype": "none", "font.size": 10, "axes.spines.top": False,
                                "axes.spines.right": False})
    import matplotlib.pyplot as plt

    return plt
