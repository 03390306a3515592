"""`pkb-ray`: one command over the entry points."""

import subprocess
import sys
import tomllib

from conftest import REPO
from pkb_ray.cli import config_groups


def _cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "pkb_ray.cli", *args], capture_output=True, text=True, timeout=300,
                          cwd=cwd)


def test_help_shows_the_commands_examples_and_config_groups():
    out = _cli("--help")
    assert out.returncode == 0
    for word in ("pkb-ray sweep", "pkb-ray report", "pkb-ray compare", "pkb-ray baselines", "pkb-ray prompt",
                 "examples:"):
        assert word in out.stdout
    groups = config_groups()
    assert "_base" not in groups["model"] and "replay" in groups["model"] and "h200_2" in groups["hardware"]
    assert "  model      " + ", ".join(groups["model"]) in out.stdout
    sweep = _cli("sweep", "--help").stdout
    assert sweep.startswith("Usage: pkb-ray sweep") and "pkb-ray sweep -m model=replay,kernels" in sweep
    assert "  model      " + ", ".join(groups["model"]) in sweep and "eval.trials  (int, default 3)" not in out.stdout
    # the keys with their descriptions, generated from the config's models
    assert "  eval.trials  (int, default 3)\n      correctness trials, each on fresh random inputs" in sweep
    assert "eval.trials  (int, default 3)" in _cli("help", "config").stdout


def test_an_unknown_command_fails_with_the_usage():
    out = _cli("frobnicate")
    assert out.returncode == 2 and "no such command 'frobnicate'" in out.stderr and "Usage: pkb-ray" in out.stderr
    assert "commands: sweep, baselines" in out.stderr
    near = _cli("reprot")
    assert near.returncode == 2 and "did you mean report" in near.stderr


def test_report_and_prompt_run_through_it(tmp_path):
    from test_report import results

    from pkb_ray.results.parquet import write_results

    write_results(results(), tmp_path / "run" / "results")
    out = _cli("report", str(tmp_path / "run"), "--out", str(tmp_path / "page"))
    assert out.returncode == 0 and (tmp_path / "page" / "report.html").is_file(), out.stderr
    prompt = _cli("prompt", "problem=all_reduce")
    assert prompt.returncode == 0 and "all_reduce" in prompt.stdout


def test_the_package_declares_the_command():
    meta = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert meta["project"]["scripts"]["pkb-ray"] == "pkb_ray.cli:main"


def test_the_grafana_dashboard_shows_every_metric_the_run_exports(tmp_path):
    import json
    import re

    from pkb_ray.pipeline import cluster

    dash = json.loads(cluster.GRAFANA_DASHBOARD.read_text())
    exprs = " ".join(t["expr"] for p in dash["panels"] for t in p["targets"])
    defined = re.findall(r'(?:Counter|Gauge|Histogram)\("(pkb_\w+)"', (REPO / "pkb_ray" / "pipeline" / "telemetry.py").read_text())
    assert defined and all(f"ray_{m}" in exprs for m in defined)  # as Ray exports them: counters get _total
    assert "ray_pkb_results_total" in exprs and "ray_pkb_eval_seconds_bucket" in exprs
    # placed beside Ray's own dashboards of the session, when Ray wrote them
    assert cluster.install_grafana_dashboard(tmp_path, wait_s=0) is None
    (tmp_path / "metrics" / "grafana" / "dashboards").mkdir(parents=True)
    placed = cluster.install_grafana_dashboard(tmp_path, wait_s=0)
    assert placed and json.loads(placed.read_text())["uid"] == "pkb-ray-run"


def test_the_hydra_entry_points_help_lists_the_keys_and_mistakes_come_all_at_once(tmp_path):
    direct = subprocess.run([sys.executable, "-m", "pkb_ray.sweep", "--help"], capture_output=True, text=True,
                            timeout=300)
    assert direct.returncode == 0 and direct.stdout.startswith("usage: python -m pkb_ray.sweep")
    assert "  hardware.device  (cpu|cuda, default cpu)" in direct.stdout and "model.limit_per_problem" in direct.stdout
    bad = subprocess.run([sys.executable, "-m", "pkb_ray.sweep", "eval.timout_s=5", "eval.trials=0",
                          "hardware=h2000"], capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and bad.stderr.startswith("error: config: 3 errors"), bad.stderr
    assert "did you mean eval.timeout_s" in bad.stderr and "did you mean hardware=h200_" in bad.stderr
    assert "Traceback" not in bad.stderr
    # both groups chosen, for different devices: the job fails at start, before Ray, naming both
    mismatch = _cli("sweep", "hardware=h200_2", "eval=cpu", "wandb=disabled", cwd=tmp_path)  # Hydra's run folder there
    assert mismatch.returncode == 2, mismatch.stderr
    assert "error: config: hardware, eval:" in mismatch.stderr and "conf/hardware/h200_2.yaml" in mismatch.stderr
    assert "conf/eval/cpu.yaml" in mismatch.stderr


def test_ls_lists_the_problems_a_run_would_see():
    out = _cli("ls", "problems", "problems=smoke")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].split()[:3] == ["id", "category", "W"]
    assert [line.split()[0] for line in lines[2:4]] == ["all_gather", "all_reduce"] and lines[4].startswith("2 problem")
    gemm = _cli("ls", "problems", "--category", "gemm")
    rows = [line.split() for line in gemm.stdout.splitlines()[2:-1] if not line.startswith(" ")]  # not wrapped cells
    assert gemm.returncode == 0 and len(rows) >= 5 and {r[1] for r in rows} == {"gemm"}
    wrong = _cli("ls", "problems", "--category", "astrology")
    assert wrong.returncode == 2 and "no problem of ['astrology']" in wrong.stderr and "gemm" in wrong.stderr
    listing = _cli("ls")
    assert listing.returncode == 0 and "problems" in listing.stdout and "groups" in listing.stdout
    assert "  hardware   cpu_gloo" in _cli("ls", "groups").stdout
