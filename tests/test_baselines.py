"""`python -m pkb_ray.baselines` on CPU (gloo): the references go through the run's pipeline (gangs
of a local Ray); each result becomes a row of the table as it arrives; the table merges."""

import json
import os
import subprocess
import sys

from pkb_ray import baselines
from pkb_ray.problem import load_problems
from pkb_ray.results.parquet import read_results
from pkb_ray.spec.config import HardwareConfig, SweepConfig
from pkb_ray.spec.names import Status
from pkb_ray.spec.placement import Layout
from pkb_ray.spec.schema import Result, Where


def run(tmp_path, *overrides, env=None):
    env = dict(env or os.environ, RAY_DISABLE_USAGE_STATS="1")
    return subprocess.run(
        [sys.executable, "-m", "pkb_ray.baselines", f"hydra.run.dir={tmp_path / 'run'}", f"cache_dir={tmp_path / 'c'}",
         f"baselines_dir={tmp_path / 'baselines'}", "eval.rounds=20", "eval.timeout_s=30", *overrides],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)


def test_baselines_are_measured_recorded_and_merged(tmp_path, shared_ray):
    first = run(tmp_path, "problems=smoke", "hardware.world_sizes=[2,3]", "hardware.gpus_per_node=3",
                *shared_ray.overrides(3), env=shared_ray.env())
    assert first.returncode == 0, first.stderr[-3000:]
    rows = baselines.load(tmp_path / "baselines", "cpu_gloo")
    assert {(r["problem_id"], r["world_size"]) for r in rows} == {
        ("all_gather", 2), ("all_reduce", 2), ("all_gather", 3), ("all_reduce", 3)}
    for r in rows:
        assert r["status"] == "correct" and r["ref_time_us"] > 0 and 0 < r["sol_fraction"]
        assert r["size"] == "small" and r["versions"]["torch"] and r["hardware"] == "cpu_gloo"
    # the pipeline's own result rows: each reference a sample of model "reference", on a gang
    results = read_results(tmp_path / "run" / "results")
    assert sorted(zip(results["problem_id"], results["world_size"])) == sorted(
        (r["problem_id"], r["world_size"]) for r in rows)
    assert set(results["model"]) == {"reference"} and all(g.startswith("gang-w") for g in results["gang"])
    table = json.loads((tmp_path / "baselines" / "cpu_gloo.json").read_text())
    assert len(table["rows"]) == 4 and table["hardware"]["name"] == "cpu_gloo"
    # a profile with 10x the link bandwidth: the speed of light is recomputed, the measured times kept
    before = {(r["problem_id"], r["world_size"]): r for r in baselines.load(tmp_path / "baselines", "cpu_gloo")}
    hw = HardwareConfig(**{**table["hardware"], "link_gbps": table["hardware"]["link_gbps"] * 10})
    baselines.rescore(tmp_path / "baselines", hw, load_problems())
    for r in baselines.load(tmp_path / "baselines", "cpu_gloo"):
        old = before[(r["problem_id"], r["world_size"])]
        assert r["ref_time_us"] == old["ref_time_us"] and r["sol_time_us"] < old["sol_time_us"]
        assert r["sol_fraction"] == r["sol_time_us"] / r["ref_time_us"]
    # a bad config fails before any work, naming the key
    bad = run(tmp_path, "problems.ids=[nope]")
    assert bad.returncode == 2 and "problems.ids" in bad.stderr


def test_a_spread_layout_the_cluster_cannot_hold_fails_at_start(tmp_path):
    # a local Ray is one node: a 2x1 gang cannot be placed, and the error names the key
    bad = run(tmp_path, "problems=smoke", "hardware.nodes=2", "hardware.spread=[2x1]")
    assert bad.returncode == 2 and "hardware.spread.0: 2x1 needs 2 node(s)" in bad.stderr, bad.stderr[-2000:]
    assert not (tmp_path / "baselines" / "cpu_gloo.json").exists()


def test_the_sink_saves_each_row_as_it_arrives(tmp_path):
    # what a run cut short keeps: every result the sink was given is in the table already
    # to a table an earlier run left (another problem's row): a run adds its rows and keeps the others
    cfg = SweepConfig()
    problems = load_problems()
    where = Where(Layout(1, 2), hardware="cpu_gloo", device_backend="gloo", size="small", dtype="float32")
    earlier = baselines.row_for(cfg, problems["broadcast"], Result.for_sample(
        baselines.reference_sample(problems["broadcast"]), Status.CORRECT, **where.fields).model_copy(
        update={"ref_time_us": 90.0, "ref_iqr_us": [1.0]}))
    baselines.save(tmp_path / "b", cfg.hardware, [earlier])
    sink = baselines.BaselineSink(cfg, problems, tmp_path / "b")
    ok = Result.for_sample(baselines.reference_sample(problems["all_reduce"]), Status.CORRECT,
                           **where.fields).model_copy(update={"ref_time_us": 200.0, "ref_iqr_us": [3.0, 5.0]})
    sink.add(ok)
    row, kept = baselines.load(tmp_path / "b", "cpu_gloo")  # sorted by problem
    assert kept == earlier and kept["ref_time_us"] == 90.0
    assert row["problem_id"] == "all_reduce" and row["layout"] == "1x2" and row["ref_iqr_us"] == 5.0
    assert row["sol_fraction"] == row["sol_time_us"] / 200.0
    crashed = Result.for_sample(baselines.reference_sample(problems["all_gather"]), Status.CRASH, "rank 1 died",
                                **where.fields)
    sink.add(crashed)
    rows = {r["problem_id"]: r for r in baselines.load(tmp_path / "b", "cpu_gloo")}
    assert set(rows) == {"broadcast", "all_reduce", "all_gather"}
    assert rows["all_gather"]["status"] == "crash" and rows["all_gather"]["ref_time_us"] is None
    assert rows["all_gather"]["message"] == "rank 1 died" and [r["problem_id"] for r in sink.rows] == [
        "all_reduce", "all_gather"]
