"""`python -m pkb_ray.sweep` on the shipped replay set: a real local Ray, gloo ranks, Parquet, W&B offline.

Every shipped sample says which status it is made to produce (``# expect: ...``); together they
cover the whole taxonomy, and each must get exactly its status.
"""

import json
import os
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

import wandb_files
from conftest import REPO
from pkb_ray.metrics import summarize
from pkb_ray.samples import read_results, read_samples
from pkb_ray.schema import Status


def sweep(tmp_path, run_dir, *overrides):
    env = dict(os.environ, RAY_DISABLE_USAGE_STATS="1")
    return subprocess.run(
        [sys.executable, "-m", "pkb_ray.sweep", f"hydra.run.dir={run_dir}", "ray.include_dashboard=false",
         "eval.timeout_s=8", "eval.rounds=30", f"cache_dir={tmp_path / 'cache'}", *overrides],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900,
    )


def test_sweep_on_shipped_set(tmp_path):
    run_dir = tmp_path / "run"
    proc = sweep(tmp_path, run_dir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "ALL" in proc.stdout and "pass@1" in proc.stdout

    shipped = read_samples(REPO / "samples" / "replay")
    expected = {(r["problem_id"], r["sample_index"]): r["metadata"]["expect"] for r in shipped}
    assert {Status(s) for s in expected.values()} == set(Status)  # the set covers the taxonomy

    df = read_results(run_dir / "results")
    got = {(r.problem_id, r.sample_index): r.status for r in df.itertuples()}
    assert len(df) == len(shipped) and got == expected
    assert df["sample_key"].is_unique
    correct = df[df["status"] == "correct"]
    assert correct["speedup"].notna().all() and (correct["sol_fraction"] > 0).all()
    assert (df["world_size"] == 2).all() and set(df["device_backend"]) == {"gloo"}
    # partitioned by model and problem
    assert sorted(p.name for p in (run_dir / "results" / "model=replay").iterdir()) == sorted(
        f"problem_id={p}" for p in {r["problem_id"] for r in shipped})
    for f in (run_dir / "results").rglob("*.parquet"):
        assert pq.read_schema(f).field("status").type == "string"

    # W&B (offline): the resolved config, the summary metrics as computed from the Parquet, the tables
    runs = list((run_dir / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    run_file = next(runs[0].glob("run-*.wandb"))
    summary = wandb_files.summary(run_file)
    expected_scores = summarize(df, ["model"], ks=(1, 5, 10)).iloc[0]
    assert summary["pass@1"] == pytest.approx(expected_scores["pass@1"])
    assert summary["n_correct"] == (df["status"] == "correct").sum() and "fast_1.0@5" in summary
    assert summary["geomean_speedup"] == pytest.approx(expected_scores["geomean_speedup"])
    assert wandb_files.config(run_file)["eval"]["rounds"] == 30
    assert wandb_files.run_record(run_file).run_group == ""  # a single run is not part of a sweep
    assert {"pass_at_k_plot_table", "status_plot_table", "speedup_plot_table", "report"} <= {
        k.split("/")[0] for k in wandb_files.history_keys(run_file)}
    media = runs[0] / "files" / "media" / "table"
    tables = {p.name.rsplit("_", 2)[0] for p in media.glob("*.table.json")}
    assert {"samples", "per_problem", "per_category", "pass_at_k"} <= tables
    per_sample = json.loads(next(media.glob("samples_*.table.json")).read_text())
    assert len(per_sample["data"]) == len(shipped) and "source" in per_sample["columns"]
    # the report beside the results
    assert 'id="leaderboard"' in (run_dir / "report.html").read_text()
    assert "## Why samples fail" in (run_dir / "report.md").read_text()

    # the same sweep again into the same results folder: every sample is skipped, none is written twice
    again = sweep(tmp_path, tmp_path / "run2", f"results_dir={run_dir / 'results'}")
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"{len(shipped)} (sample, world size) pairs already have a final result" in again.stdout + again.stderr
    assert len(read_results(run_dir / "results")) == len(shipped) and "ALL" in again.stdout


def test_a_killed_driver_loses_nothing_written_and_a_resume_duplicates_nothing(tmp_path):
    import signal
    import time

    results = tmp_path / "results"
    env = dict(os.environ, RAY_DISABLE_USAGE_STATS="1")
    cmd = [sys.executable, "-m", "pkb_ray.sweep", f"hydra.run.dir={tmp_path / 'run1'}", "ray.include_dashboard=false",
           "eval.timeout_s=8", "eval.rounds=30", f"cache_dir={tmp_path / 'cache'}", f"results_dir={results}"]
    driver = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and len(read_results(results)) < 16:  # the first flush (16 rows)
        time.sleep(0.5)
    os.kill(driver.pid, signal.SIGKILL)  # mid-run, no clean-up
    driver.wait()
    written = read_results(results)
    assert 16 <= len(written) < len(read_samples(REPO / "samples" / "replay")) and written["sample_key"].is_unique
    # a file cut short by the kill would be a *.parquet.tmp, which readers never pick up
    again = sweep(tmp_path, tmp_path / "run2", f"results_dir={results}")
    assert again.returncode == 0, again.stderr[-3000:]
    final = read_results(results)
    shipped = read_samples(REPO / "samples" / "replay")
    assert len(final) == len(shipped) and final["sample_key"].is_unique
    assert set(written["sample_key"]) <= set(final["sample_key"])


def test_a_multirun_sweep_runs_each_combination_as_a_job_grouped_in_wandb(tmp_path):
    env = dict(os.environ, RAY_DISABLE_USAGE_STATS="1")
    sweep_dir = tmp_path / "multi"
    proc = subprocess.run(
        [sys.executable, "-m", "pkb_ray.sweep", "-m", f"hydra.sweep.dir={sweep_dir}", "ray.include_dashboard=false",
         "eval.timeout_s=8", "eval.rounds=20", f"cache_dir={tmp_path / 'cache'}", "problems.ids=[broadcast]",
         "model.name=alpha,beta"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs = sorted(p for p in sweep_dir.iterdir() if p.is_dir() and (p / "results").is_dir())
    # job folders are named by number and overrides; paths (cache_dir) are left out of the name
    assert [p.name.split(",")[0] for p in jobs] == ["0_eval.rounds=20", "1_eval.rounds=20"]
    assert "model.name=alpha" in jobs[0].name and "model.name=beta" in jobs[1].name and "cache" not in jobs[0].name
    groups, job_types = set(), set()
    for job, model in zip(jobs, ("alpha", "beta")):
        df = read_results(job / "results")
        assert set(df["model"]) == {model} and set(df["problem_id"]) == {"broadcast"} and len(df) == 2
        run_file = next((job / "wandb").glob("offline-run-*/run-*.wandb"))
        groups.add(wandb_files.run_record(run_file).run_group)
        job_types.add(wandb_files.run_record(run_file).job_type)
        assert wandb_files.summary(run_file)["n"] == 2
    assert groups == {sweep_dir.name} and job_types == {jobs[0].name[2:], jobs[1].name[2:]}
