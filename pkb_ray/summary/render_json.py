"""``summary.json``: a run's summary for machines (a CI gate, a script), beside its report: the
headline figures, what each pass@k is averaged over (``over``: pass@k counts the problems with at
least k samples), the overall, per-category and per-problem tables with their intervals, and the
status counts. NaN (a score with nothing to score) is written as null."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd

from pkb_ray.summary.run import RunSummary

NAME = "summary.json"


def _plain(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "item"):  # numpy scalars
        return _plain(value.item())
    return value


def _records(df: pd.DataFrame | None) -> list[dict[str, Any]]:
    if df is None or not len(df):
        return []
    return _plain(df.reset_index(drop=df.index.name is None).to_dict("records"))


def document(summary: RunSummary, title: str) -> dict[str, Any]:
    return {"title": title, "scalars": _plain(summary.scalars), "over": summary.over,
            "statuses": _plain(summary.statuses),
            "timing": summary.timing, "partial": summary.partial, "overall": _records(summary.overall),
            "per_category": _records(summary.per_category), "per_problem": _records(summary.per_problem)}


def write(summary: RunSummary, out_dir: Path, title: str) -> Path:
    path = Path(out_dir) / NAME
    path.write_text(json.dumps(document(summary, title), indent=1, default=str) + "\n")
    return path
