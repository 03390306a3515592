"""One run's figures, computed once, and the views that only render them.

:class:`~pkb_ray.summary.run.RunSummary` is built once per run from its newest result rows: the
final rows (each sample's latest version, as the scores count them), the scores at one set of k
(:data:`~pkb_ray.summary.run.KS`), the curves, the report's tables, across-nodes and size-sweep
tables, and the timing note. Every view renders that one object, so they cannot disagree:

- :mod:`.render_text`: the table a run prints;
- :mod:`.render_wandb`: what W&B's run holds (summary, tables, plots), and :mod:`.tracking` the
  run's life there (started, progress, the summary at the end, its folders as Artifacts);
- :mod:`.render_html` and :mod:`.render_markdown`: ``report.html`` and ``report.md``, written by
  :func:`.pages.write`; their figures are :mod:`.figures`';
- :mod:`.cli`: ``pkb-ray report`` over one or more finished runs, and ``pkb-ray compare`` of two
  (:mod:`.compare` computes the changes and their tests, :mod:`.render_compare` shows them).

Only :mod:`.run` and :mod:`.tables` (which it calls) compute; ``summarize``, ``curves``,
``fast_p_curve``, ``final_and_rounds`` and ``as_scored`` of :mod:`pkb_ray.results.metrics` are called from
:mod:`.run` only, and every interval and standard error a view shows is among what they return.

May import: spec, results, problems.
"""

from pkb_ray.summary.run import KS, RunSummary

__all__ = ["KS", "RunSummary"]
