"""Figures for the report: matplotlib (Agg) drawn as inline SVG, so a page needs no other file."""

from __future__ import annotations

import io
import re


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
