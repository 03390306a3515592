"""A killed driver's processes die with it: the reaper, and the clean-up of a later run."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

from conftest import REPO
from pkb_ray.isolation import procfs, reaper

DRIVER = textwrap.dedent("""
    import subprocess, sys, time
    from pathlib import Path
    from pkb_ray.isolation import procfs, reaper
    # a tree as a local Ray has one: children, grandchildren, and one in a session of its own
    kids = [subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; "
                              "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); time.sleep(600)"]),
            subprocess.Popen(["sleep", "600"], start_new_session=True)]
    reaper.start(Path(sys.argv[1]))
    print("ready", flush=True)
    time.sleep(600)
""")


def _wait(pred, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.2)
    return pred()


def test_a_killed_driver_takes_its_whole_tree_along(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, str(tmp_path / "runs")], stdout=subprocess.PIPE,
                              text=True, env=env)
    assert driver.stdout.readline().strip() == "ready"
    record = tmp_path / "runs" / f"{driver.pid}.json"
    assert _wait(lambda: record.exists() and len(json.loads(record.read_text())["processes"]) >= 3)
    tree = reaper.descendants({driver.pid})
    assert len(tree) >= 4  # two children, a grandchild, the reaper
    os.kill(driver.pid, signal.SIGKILL)  # no clean-up of its own
    driver.wait()
    assert _wait(lambda: not any(reaper.running(p, s) for p, s in tree.items())), \
        [p for p, s in tree.items() if reaper.running(p, s)]
    assert _wait(lambda: not record.exists())


def test_a_later_run_kills_what_a_dead_driver_listed_and_only_that(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    left = subprocess.Popen(["sleep", "600"])
    innocent = subprocess.Popen(["sleep", "600"])
    table = {pid: (st.ppid, st.start_ticks) for pid, st in procfs.table().items()}
    dead = subprocess.Popen(["true"])
    dead.wait()  # a driver pid that is gone
    (runs / f"{dead.pid}.json").write_text(json.dumps({
        "driver": dead.pid, "started": 0,
        # the innocent process is listed with another start time: its pid was reused, leave it
        "processes": {str(left.pid): table[left.pid][1], str(innocent.pid): table[innocent.pid][1] + 1}}))
    (runs / f"{os.getpid()}.json").write_text(json.dumps({  # a run still going: not touched
        "driver": os.getpid(), "started": table[os.getpid()][1], "processes": {str(innocent.pid): table[innocent.pid][1]}}))
    try:
        assert reaper.clean_up(runs) == 1
        assert _wait(lambda: left.poll() is not None) and innocent.poll() is None
        assert not (runs / f"{dead.pid}.json").exists() and (runs / f"{os.getpid()}.json").exists()
    finally:
        innocent.kill()
        left.kill()
