"""Writing a run's report: ``report.html`` and ``report.md`` side by side."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from pkb_ray.summary import render_html, render_markdown
from pkb_ray.summary.run import RunSummary


def write(summary: RunSummary, out_dir: Path, title: str = "pkb_ray report") -> tuple[Path, Path]:
    """Write ``report.html`` and ``report.md`` of ``summary`` into ``out_dir``; returns their paths."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    (out_dir / "report.html").write_text(render_html.page(summary, title, stamp))
    (out_dir / "report.md").write_text(render_markdown.page(summary, title, stamp))
    return out_dir / "report.html", out_dir / "report.md"
