"""`python -m pkb_ray.baselines` on CPU (gloo): a real harness times each reference; the table merges."""

import json
import os
import subprocess
import sys

from pkb_ray import baselines
from pkb_ray.config import HardwareConfig
from pkb_ray.problem import load_problems


def run(tmp_path, *overrides):
    env = dict(os.environ, RAY_DISABLE_USAGE_STATS="1")
    return subprocess.run(
        [sys.executable, "-m", "pkb_ray.baselines", f"hydra.run.dir={tmp_path / 'run'}", f"cache_dir={tmp_path / 'c'}",
         f"baselines_dir={tmp_path / 'baselines'}", "eval.rounds=20", "eval.timeout_s=30", *overrides],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)


def test_baselines_are_measured_recorded_and_merged(tmp_path):
    first = run(tmp_path, "problems=smoke", "hardware.world_sizes=[2,3]", "hardware.gpus_per_node=3")
    assert first.returncode == 0, first.stderr[-3000:]
    rows = baselines.load(tmp_path / "baselines", "cpu_gloo")
    assert {(r["problem_id"], r["world_size"]) for r in rows} == {
        ("all_gather", 2), ("all_reduce", 2), ("all_gather", 3), ("all_reduce", 3)}
    for r in rows:
        assert r["status"] == "correct" and r["ref_time_us"] > 0 and 0 < r["sol_fraction"]
        assert r["size"] == "small" and r["versions"]["torch"] and r["hardware"] == "cpu_gloo"
    # a second run for another problem adds its rows and keeps the others
    second = run(tmp_path, "problems.ids=[broadcast]")
    assert second.returncode == 0, second.stderr[-3000:]
    table = json.loads((tmp_path / "baselines" / "cpu_gloo.json").read_text())
    assert len(table["rows"]) == 5 and table["hardware"]["name"] == "cpu_gloo"
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
