"""The README's sweep from a clone under /tmp, as issue 27's hostile user ran it.

The clone has its interpreter under /tmp too (a venv there, its packages those of the project's
venv), HOME is a normal user folder (shell history, a .env, Ray's token), the clone has a .env
of its own and the driver holds API keys. A sample that looks for all of them, and for Ray's
dashboard on every loopback port, must find nothing, and the run must work at all (before the
allowlist, bwrap could not find an interpreter under /tmp).
"""

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import uuid
from pathlib import Path

from conftest import HOSTILE, REPO, StandIn
from pkb_ray.problem import load_problems
from pkb_ray.results.parquet import read_results


def _clone(dest: Path) -> Path:
    """The checkout's tracked files at ``dest``, with a venv under it that uses our packages."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    for name in filter(None, files.decode().split("\0")):
        if (REPO / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, dest / name)
    subprocess.run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", "--without-pip",
                    str(dest / ".venv")], check=True)
    site = subprocess.run([str(dest / ".venv/bin/python"), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          capture_output=True, text=True, check=True).stdout.strip()
    # a plain path line: the project venv's packages, without its .pth files (one puts our checkout on sys.path)
    Path(site, "project_venv.pth").write_text(sysconfig.get_path("purelib") + "\n")
    root = subprocess.run([str(dest / ".venv/bin/python"), "-c", "from pkb_ray.spec.paths import CODE_ROOT; print(CODE_ROOT)"],
                          cwd=dest, capture_output=True, text=True, check=True).stdout.strip()
    assert root == str(dest)  # the run below uses the clone's code, not the project's
    return dest


def test_the_readme_sweep_runs_from_tmp_and_a_snooping_sample_finds_nothing(tmp_path):
    token = uuid.uuid4().hex
    clone = _clone(Path(f"/tmp/pkb-clone-{token[:8]}"))
    home = tmp_path / "home"
    canaries = [home / ".bash_history", home / ".env", home / ".ray" / "auth_token", clone / ".env"]
    for path in canaries:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"canary-{token}")
    snooper = (HOSTILE / "snoops_on_host.py").read_text()
    honest = load_problems()["all_reduce"].source()
    samples = tmp_path / "samples.jsonl"
    samples.write_text("".join(json.dumps({"problem_id": "all_reduce", "model": "snoop", "sample_index": i,
                                           "backend": "torch", "source": src, "metadata": {}}) + "\n"
                               for i, src in enumerate([snooper, honest])))
    dashboard = StandIn()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env.update(HOME=str(home), OPENAI_API_KEY=f"sk-{token}", WANDB_API_KEY=f"wandb-{token}",
               RAY_DISABLE_USAGE_STATS="1", PKB_TEST_SNOOP_FILES=":".join(map(str, canaries)),
               PKB_TEST_SNOOP_HOME=str(home))
    run_dir = tmp_path / "run"
    try:
        proc = subprocess.run([str(clone / ".venv/bin/python"), "-m", "pkb_ray.sweep", f"hydra.run.dir={run_dir}",
                               f"model.samples={samples}", "problems.ids=[all_reduce]", "eval.timeout_s=60",
                               "eval.rounds=10", "wandb=disabled"],
                              cwd=clone, env=env, capture_output=True, text=True, timeout=900)
    finally:
        dashboard.close()
        shutil.rmtree(clone, ignore_errors=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Ray dashboard: http://" in proc.stderr  # Ray's dashboard and job API were up on the host's loopback
    df = read_results(run_dir / "results")
    assert sorted(df["status"]) == ["correct", "correct"], df["message"].tolist()
    assert not df["message"].fillna("").str.contains(token).any()
    assert dashboard.connections == 0
    assert (df["isolation"] == "sandbox").all()
