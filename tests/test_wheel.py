"""The wheel carries what a run needs (conf/, the problems, the kernels, the baselines, the replay
samples), and an install of it runs with no checkout in sight."""

import os
import subprocess
import sys
import zipfile

import pytest

from conftest import REPO


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out),
                    str(REPO)], check=True, capture_output=True, timeout=300)
    [path] = out.glob("pkb_ray-*.whl")
    return path


def test_the_wheel_carries_the_folders_a_run_reads(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    data = "pkb_ray/_data/"
    expected = {data + "conf/config.yaml", data + "conf/hardware/h200_2.yaml", data + "baselines/h200_2.json",
                "pkb_ray/include/pkb_ray/peer.cuh"}
    expected |= {data + str(p.relative_to(REPO)) for p in (REPO / "problems").glob("*.py")}
    expected |= {data + str(p.relative_to(REPO)) for p in (REPO / "samples/replay").rglob("*.py")}
    expected |= {data + str(p.relative_to(REPO)) for p in (REPO / "kernels").rglob("*.py")}
    assert sorted(expected - names) == []
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "pkb-ray = pkb_ray.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()


def test_an_installed_wheel_runs_outside_the_checkout(wheel, tmp_path):
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)  # what pip puts in site-packages
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site)}

    def run(*args: str) -> str:
        done = subprocess.run([sys.executable, *args], cwd=elsewhere, env=env, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout

    where = run("-c", "import pkb_ray.spec.paths as p, pkb_ray.problem as pr; "
                      "print(p.PACKAGE); print(p.DATA_ROOT); print(len(pr.load_problems()))").split()
    assert where[0] == str(site / "pkb_ray") and where[1] == str(site / "pkb_ray" / "_data")
    assert int(where[2]) == len(list((REPO / "problems").glob("[!_]*.py")))
    job = run("-m", "pkb_ray.sweep", "--cfg", "job", "hardware=h200_2")  # Hydra composes the wheel's conf/
    assert "samples: samples/replay" in job and "name: h200_2" in job
    prompt = run("-m", "pkb_ray.generate.prompt", "problem=all_to_all", "backend=cuda")  # templates and a worked kernel
    assert "# Task: a faster `all_to_all`" in prompt and "__global__" in prompt
    assert "sweep" in run("-m", "pkb_ray.cli", "--help")
