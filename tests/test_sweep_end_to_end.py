"""`python -m pkb_ray.sweep` on the shipped replay set: a real local Ray, gloo ranks, Parquet, W&B offline.

Every shipped sample says which status it is made to produce (``# expect: ...``); together they
cover the whole taxonomy, and each must get exactly its status.
"""

import json
import os
import subprocess
import sys

import pyarrow.parquet as pq

from conftest import REPO
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

    runs = list((run_dir / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and list(runs[0].glob("run-*.wandb"))
    tables = {p.name.split("_")[0] for p in (runs[0] / "files" / "media" / "table").glob("*.table.json")}
    assert {"samples", "per"} <= tables
    per_sample = json.loads(next((runs[0] / "files" / "media" / "table").glob("samples_*.table.json")).read_text())
    assert len(per_sample["data"]) == len(shipped)

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
    assert 16 <= len(written) < 25 and written["sample_key"].is_unique
    # a file cut short by the kill would be a *.parquet.tmp, which readers never pick up
    again = sweep(tmp_path, tmp_path / "run2", f"results_dir={results}")
    assert again.returncode == 0, again.stderr[-3000:]
    final = read_results(results)
    shipped = read_samples(REPO / "samples" / "replay")
    assert len(final) == len(shipped) and final["sample_key"].is_unique
    assert set(written["sample_key"]) <= set(final["sample_key"])
