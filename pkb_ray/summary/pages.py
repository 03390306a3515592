"""Writing a run's report: ``report.html`` (and, for a large run, ``sources/``) and ``report.md``."""

from __future__ import annotations

import shutil
from datetime import datetime, timezone
from pathlib import Path

from pkb_ray.summary import render_html, render_markdown
from pkb_ray.summary.run import RunSummary


def write(summary: RunSummary, out_dir: Path, title: str = "pkb_ray report",
          inline_samples: int = render_html.INLINE_SAMPLES,
          inline_bytes: int = render_html.INLINE_TEXT_BYTES, stamp: str | None = None) -> tuple[Path, Path]:
    """Write ``report.html`` (with ``sources/`` above the ``inline_*`` thresholds of
    :func:`.render_html.pages`) and ``report.md`` of ``summary`` into ``out_dir``; returns the two
    pages' paths. ``stamp``: when it was made (default: now)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp = stamp or now()
    shutil.rmtree(out_dir / render_html.SOURCES, ignore_errors=True)  # an earlier report's, maybe of other rows
    for name, text in render_html.pages(summary, title, stamp, inline_samples, inline_bytes).items():
        (out_dir / name).parent.mkdir(parents=True, exist_ok=True)
        (out_dir / name).write_text(text)
    (out_dir / "report.md").write_text(render_markdown.page(summary, title, stamp))
    return out_dir / "report.html", out_dir / "report.md"


def now() -> str:
    """A report's "generated" stamp."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
