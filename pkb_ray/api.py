"""pkb_ray from Python: what ``import pkb_ray`` offers (docs/running.md#from-python).

    import pkb_ray
    df = pkb_ray.run_sweep("problems=smoke", "model.limit_per_problem=1", out_dir="outputs/py")  # one job
    rows = pkb_ray.read_results("outputs/py/results")          # every result row, a DataFrame
    problem = pkb_ray.load_problems()["all_reduce"]            # a problem: its source, sizes, oracle
    verdict = pkb_ray.RewardClient("http://127.0.0.1:8000").verify("all_reduce", source)
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd


def run_sweep(*overrides: str, out_dir: str | Path = "outputs/python") -> pd.DataFrame:
    """One sweep job with ``overrides`` (as on the command line, e.g. ``"problems=smoke"``), its
    results, report and summary.json under ``out_dir``; returns the summary table. A bad override
    raises ConfigError naming every mistake, before anything starts."""
    from pkb_ray.spec.compose import compose_config
    from pkb_ray.sweep import run

    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    cfg = compose_config([*overrides, f"output_dir={out}"], source="pkb_ray.run_sweep")
    return run(cfg, out)
