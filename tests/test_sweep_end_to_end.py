"""`python -m pkb_ray.sweep` on the shipped replay set: a real Ray (the session's, or a local one of the
driver's own where the test is about that), gloo ranks, Parquet, W&B offline.

Every shipped sample says which status it is made to produce (``# expect: ...``); together they
cover the whole taxonomy, and each must get exactly its status.

The shipped set is evaluated once for the whole module, the way a user's run goes when it is cut
short twice: a driver stopped by SIGTERM, a resume killed by SIGKILL, a resume that finishes, and
the same command once more (nothing left to do). Each test reads the phase it is about.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

import wandb_files
from conftest import REPO
from pkb_ray.generate.samples import read_samples
from pkb_ray.isolation import reaper
from pkb_ray.results.metrics import summarize
from pkb_ray.results.parquet import read_results
from pkb_ray.runner.launch import RANK_NAME, process_name
from pkb_ray.spec.names import Status

SHIPPED = read_samples(REPO / "samples" / "replay")
ENV = dict(os.environ, RAY_DISABLE_USAGE_STATS="1")


def sweep_cmd(tmp_path, run_dir, *overrides) -> list[str]:
    return [sys.executable, "-m", "pkb_ray.sweep", f"hydra.run.dir={run_dir}", "ray.include_dashboard=false",
            "eval.timeout_s=20", "eval.rounds=30", f"cache_dir={tmp_path / 'cache'}", *overrides]


def sweep(tmp_path, run_dir, *overrides, env=ENV):
    return subprocess.run(sweep_cmd(tmp_path, run_dir, *overrides), cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=900)


def _cmdline(pid: int) -> str:
    try:
        return open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


@dataclass
class ShippedRun:
    """What each phase of the module's run of the shipped set left, for the tests to judge."""

    results: Path  # the one results folder every phase writes to
    run_dir: Path  # the resume that finished: its W&B run and report
    term_log: str = ""
    term_had: int = 0  # results the SIGTERMed driver had said it had
    after_term: pd.DataFrame | None = None
    killed_tree: dict = field(default_factory=dict)  # the SIGKILLed driver's processes
    killed_had_ranks: bool = False  # rank processes among them when it was killed
    killed_survivors: list[str] = field(default_factory=list)
    after_kill: pd.DataFrame | None = None
    finish: subprocess.CompletedProcess | None = None
    again: subprocess.CompletedProcess | None = None


@pytest.fixture(scope="module")
def shipped(tmp_path_factory, shared_ray) -> ShippedRun:
    """Phases 1, 3 and 4 join the session's cluster; phase 2 starts a local Ray of its own, which must
    die with its driver."""
    tmp = tmp_path_factory.mktemp("shipped")
    run = ShippedRun(results=tmp / "results", run_dir=tmp / "run3")
    results_arg = f"results_dir={run.results}"
    joined, joined_env = [results_arg, *shared_ray.overrides(2)], shared_ray.env(ENV)
    # 1. SIGTERM (a scheduler's stop, `timeout`) once the driver has said it has 3 results
    log = tmp / "driver1.log"
    with open(log, "w") as out:
        driver = subprocess.Popen(sweep_cmd(tmp, tmp / "run1", *joined), cwd=tmp, env=joined_env, stdout=out,
                                  stderr=subprocess.STDOUT)
        progress = re.compile(r"\[(\d+) evaluated, (\d+) results\]")
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and len(progress.findall(log.read_text())) < 3:
            time.sleep(0.2)
        driver.send_signal(signal.SIGTERM)
        driver.wait(timeout=120)
    run.term_log = log.read_text()
    run.term_had = max((int(m[1]) for m in progress.findall(run.term_log)), default=0)
    run.after_term = read_results(run.results)
    # 2. a resume, SIGKILLed (no clean-up) once 5 more results are on disk
    driver = subprocess.Popen(sweep_cmd(tmp, tmp / "run2", results_arg), cwd=tmp, env=ENV,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and len(read_results(run.results)) < len(run.after_term) + 5:
        time.sleep(0.5)
    run.killed_tree = reaper.descendants({driver.pid})  # its local Ray, the gangs, their rank processes
    run.killed_had_ranks = any(process_name(pid) == RANK_NAME for pid in run.killed_tree)
    os.kill(driver.pid, signal.SIGKILL)
    driver.wait()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(reaper.running(p, st) for p, st in run.killed_tree.items()):
        time.sleep(0.5)
    run.killed_survivors = [_cmdline(p) for p, st in run.killed_tree.items() if reaper.running(p, st)]
    run.after_kill = read_results(run.results)
    # 3. a resume that finishes; 4. the same again: nothing left
    run.finish = sweep(tmp, run.run_dir, *joined, env=joined_env)
    run.again = sweep(tmp, tmp / "run4", *joined, env=joined_env)
    return run


def test_a_terminated_driver_writes_every_result_it_had(shipped):
    """SIGTERM (a scheduler's stop, `timeout`) or SIGINT: every result the driver had logged is on disk
    after it exits. Before, rows were written 16 at a time and SIGTERM lost the rest."""
    written = shipped.after_term
    assert shipped.term_had >= 3 and len(written) >= shipped.term_had, shipped.term_log[-3000:]
    assert len(written) < len(SHIPPED) and written["sample_key"].is_unique


def test_a_killed_driver_leaves_nothing_running_loses_nothing_written_and_a_resume_duplicates_nothing(shipped):
    assert shipped.killed_had_ranks
    # before, ~10 Ray and rank processes per kill kept running, gangs still evaluating 10 minutes later
    assert shipped.killed_survivors == []
    written = shipped.after_kill
    assert len(shipped.after_term) + 5 <= len(written) < len(SHIPPED) and written["sample_key"].is_unique
    # a file cut short by the kill would be a *.parquet.tmp, which readers never pick up
    assert shipped.finish.returncode == 0, shipped.finish.stderr[-3000:]
    final = read_results(shipped.results)
    assert len(final) == len(SHIPPED) and final["sample_key"].is_unique
    assert set(written["sample_key"]) <= set(final["sample_key"])


def test_sweep_on_shipped_set(shipped):
    proc, run_dir = shipped.finish, shipped.run_dir
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "ALL" in proc.stdout and "pass@1" in proc.stdout

    expected = {(r["problem_id"], r["sample_index"]): r["metadata"]["expect"] for r in SHIPPED}
    assert {Status(s) for s in expected.values()} == set(Status)  # the set covers the taxonomy

    df = read_results(shipped.results)
    got = {(r.problem_id, r.sample_index): r.status for r in df.itertuples()}
    why = {(r.problem_id, r.sample_index): (r.status, r.message) for r in df.itertuples() if got[r.problem_id, r.sample_index]
           != expected.get((r.problem_id, r.sample_index))}
    assert len(df) == len(SHIPPED) and got == expected, why
    assert df["sample_key"].is_unique
    correct = df[df["status"] == "correct"]
    assert correct["speedup"].notna().all() and (correct["sol_fraction"] > 0).all()
    assert (df["world_size"] == 2).all() and set(df["device_backend"]) == {"gloo"}
    # partitioned by model and problem
    assert sorted(p.name for p in (shipped.results / "model=replay").iterdir()) == sorted(
        f"problem_id={p}" for p in {r["problem_id"] for r in SHIPPED})
    for f in shipped.results.rglob("*.parquet"):
        assert pq.read_schema(f).field("status").type == "string"
    plain = pd.read_parquet(shipped.results)  # any Parquet reader opens the folder as it is
    assert len(plain) == len(SHIPPED) and list(plain.columns).count("problem_id") == 1

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
    # named after what makes the run what it is (before: every run was "replay-cpu_gloo")
    name = wandb_files.run_record(run_file).display_name  # and when it started
    assert re.fullmatch(r"replay-cpu_gloo \[eval.rounds=30,eval.timeout_s=20\] \d{4}-\d\d-\d\d \d\d:\d\d", name), name
    # progress while it ran (before: one history step at the end): this resume's own results
    done = wandb_files.history_steps(run_file, "progress/results")
    assert done and done[-1] == len(SHIPPED) - len(shipped.after_kill) and done == sorted(done)
    # named by content (model and problem set), so each run adds a version; the replayed set is its input
    assert ("results-replay-all", "results") in wandb_files.artifacts(run_file)
    meta = wandb_files.artifact_metadata(run_file)["results-replay-all"]  # which subset this version holds
    assert meta["problem_ids"] == sorted({r["problem_id"] for r in SHIPPED}) and meta["limit_per_problem"] is None
    inputs = wandb_files.config(run_file)["input_samples"]  # offline: W&B refuses use_artifact
    assert inputs["artifact"] == "generated-replay-all" and len(inputs["sha256"]) == 64
    assert {"pass_at_k_plot_table", "status_plot_table", "speedup_plot_table", "report"} <= {
        k.split("/")[0] for k in wandb_files.history_keys(run_file)}
    media = runs[0] / "files" / "media" / "table"
    tables = {p.name.rsplit("_", 2)[0] for p in media.glob("*.table.json")}
    assert {"samples", "per_problem", "per_category", "pass_at_k"} <= tables
    per_sample = json.loads(next(media.glob("samples_*.table.json")).read_text())
    assert len(per_sample["data"]) == len(SHIPPED) and "source" in per_sample["columns"]
    # the report beside the results: every row of the folder, those of the runs it resumed too
    page = (run_dir / "report.html").read_text()
    assert 'id="leaderboard"' in page and page.count("<details id=") == len(SHIPPED)
    assert "sample us (median)" in page and "offline: " in page  # per-rank times; where the W&B run is
    assert "## Why samples fail" in (run_dir / "report.md").read_text()
    # summary.json for machines, and the run's last lines saying where everything went
    doc = json.loads((run_dir / "summary.json").read_text())
    assert doc["scalars"]["pass@1"] == pytest.approx(expected_scores["pass@1"])
    assert sum(doc["statuses"].values()) == len(SHIPPED)
    tail = proc.stdout.strip().splitlines()[-4:]
    assert [line.split(":")[0] for line in tail] == ["results", "report", "summary.json", "W&B run"], tail
    assert tail[2].endswith(str(run_dir / "summary.json"))


def test_the_same_sweep_again_skips_every_sample_and_writes_none_twice(shipped):
    again = shipped.again
    assert again.returncode == 0, again.stderr[-3000:]
    said = again.stdout + again.stderr
    assert f"{len(SHIPPED)} (sample, layout, size) evaluations already have a final result" in said
    assert "nothing left to evaluate" in said and "no gang started" in said  # nor Ray: the driver knew
    assert len(read_results(shipped.results)) == len(SHIPPED) and "ALL" in again.stdout


@pytest.fixture(scope="module")
def multirun(tmp_path_factory, shared_ray):
    """``-m`` over two models, each job a size sweep of broadcast's two shipped samples timed both ways,
    both on the session's cluster."""
    tmp = tmp_path_factory.mktemp("multirun")
    sweep_dir = tmp / "multi"
    proc = subprocess.run(
        [sys.executable, "-m", "pkb_ray.sweep", "-m", f"hydra.sweep.dir={sweep_dir}", "ray.include_dashboard=false",
         "eval.timeout_s=30", "eval.rounds=10", f"cache_dir={tmp / 'cache'}", "problems.ids=[broadcast]",
         "eval.sizes=[small,{numel:8192}]", "eval.timing_mode=both", "model.name=alpha,beta",
         *shared_ray.overrides(2)],
        cwd=tmp, env=shared_ray.env(ENV), capture_output=True, text=True, timeout=900)
    jobs = sorted(p for p in sweep_dir.iterdir() if p.is_dir() and (p / "results").is_dir()) \
        if sweep_dir.is_dir() else []
    return proc, sweep_dir, jobs


def test_a_multirun_sweep_runs_each_combination_as_a_job_grouped_in_wandb(multirun, tmp_path):
    proc, sweep_dir, jobs = multirun
    assert proc.returncode == 0, proc.stderr[-3000:]
    # job folders are named by number and overrides; paths (cache_dir) are left out of the name
    assert [p.name.split(",")[0] for p in jobs] == ["0_eval.rounds=10", "1_eval.rounds=10"]
    assert "model.name=alpha" in jobs[0].name and "model.name=beta" in jobs[1].name and "cache" not in jobs[0].name
    groups, job_types = set(), set()
    for job, model in zip(jobs, ("alpha", "beta")):
        df = read_results(job / "results")
        assert set(df["model"]) == {model} and set(df["problem_id"]) == {"broadcast"} and len(df) == 4
        run_file = next((job / "wandb").glob("offline-run-*/run-*.wandb"))
        groups.add(wandb_files.run_record(run_file).run_group)
        job_types.add(wandb_files.run_record(run_file).job_type)
        assert wandb_files.summary(run_file)["n"] == 4
    assert groups == {sweep_dir.name} and job_types == {jobs[0].name[2:], jobs[1].name[2:]}
    # both joined the cluster they were given; neither started a Ray of its own
    said = proc.stdout + proc.stderr
    assert "Started a local Ray instance" not in said and "using the local Ray" not in said, said[-3000:]
    # one page over the sweep: the folder as it is, or its entries as a shell glob gives them
    # (multirun.yaml among them, which made the script fail before)
    assert (sweep_dir / "multirun.yaml").is_file()
    for args in ([str(sweep_dir)], [str(p) for p in sorted(sweep_dir.iterdir())]):
        out = subprocess.run([sys.executable, str(REPO / "scripts/report.py"), *args, "--out", str(tmp_path / "page")],
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0 and out.stdout.startswith("8 results"), out.stderr[-2000:]


def test_the_next_job_of_a_multirun_uses_the_local_ray_the_last_one_started(shared_ray):
    """The session's cluster was started as a sweep's local Ray, then a job ended as a multirun's jobs
    do (``end_job(keep=True)``) and the next one (the same settings) joined: the same Ray, not a new one."""
    assert shared_ray.info["next_job_reused_it"]


def test_a_size_sweep_keys_rows_by_size_and_draws_them_against_bytes(multirun):
    proc, _, jobs = multirun
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = jobs[0]
    df = read_results(run_dir / "results")
    # two shipped broadcast samples (a copy of the reference, one that crashes) x two sizes
    assert len(df) == 4 and sorted(set(df["size"])) == ["numel=8192", "small"]
    assert df.groupby("sample_key")["size"].nunique().eq(2).all()
    assert dict(zip(df["size"], df["message_bytes"])) == {"small": 4096 * 4, "numel=8192": 8192 * 4}
    correct = df[df["status"] == "correct"]
    assert len(correct) == 2 and (correct["timing_mode"] == "eager").all()  # gloo: no graph to replay
    assert correct["graph_error"].str.contains("CUDA graphs need a CUDA device").all()
    assert (correct["eager_cand_time_us"] == correct["cand_time_us"]).all()
    page = (run_dir / "report.html").read_text()
    assert '<section id="sizes">' in page and 'id="size-broadcast-w2"' in page
    # the printed summary and W&B score each size as a problem of its own (before, they kept one
    # size per sample and counted it as a sample of "broadcast")
    assert "broadcast @ small" in proc.stdout and "broadcast @ numel=8192" in proc.stdout
    run_file = next((run_dir / "wandb").glob("offline-run-*/run-*.wandb"))
    assert wandb_files.summary(run_file)["n"] == 4 and wandb_files.summary(run_file)["problems"] == 2
    # which times the scores use: graph mode fell back to eager on gloo, and both say so
    assert "times: eager calls" in proc.stdout and wandb_files.summary(run_file)["timing"] == "times: eager calls"
    media = next((run_dir / "wandb").glob("offline-run-*")) / "files" / "media" / "table"
    sizes = json.loads(next(media.glob("size_sweeps_*.table.json")).read_text())
    assert {"bytes", "best speedup", "line"} <= set(sizes["columns"]) and len(sizes["data"]) == 2
    assert "size_sweeps_plot_table" in {k.split("/")[0] for k in wandb_files.history_keys(run_file)}
