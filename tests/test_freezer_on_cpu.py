"""The freezer stops every process below a sandbox's first one, however it was started, and
resumes them: CPU time of spinning processes does not advance while frozen."""

import os
import signal
import subprocess
import sys
import time

from pkb_ray.freezer import Freezer, descendants

# a spinning child, and a spinning grandchild whose parent exited (re-parented above the root
# without a PID namespace: started here in a session of its own so it stays below the root)
SPIN = "while True: pass"
TREE = f"""
import os, subprocess, sys, time
subprocess.Popen([sys.executable, "-c", {SPIN!r}])
if os.fork() == 0:  # a child that forks a spinner and stays, like a launcher
    subprocess.Popen([sys.executable, "-c", {SPIN!r}])
    time.sleep(600)
time.sleep(600)
"""


def _cpu_ticks(pids):
    total = 0
    for pid in pids:
        try:
            fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime + stime
    return total


def test_freeze_stops_the_whole_tree_and_thaw_resumes_it():
    root = subprocess.Popen([sys.executable, "-c", TREE], start_new_session=True)
    try:
        deadline = time.monotonic() + 20
        while len(descendants(root.pid)) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        tree = descendants(root.pid)
        assert len(tree) >= 3, tree
        freezer = Freezer(root.pid)
        assert freezer.freeze(5.0)
        assert set(tree) <= set(freezer.stopped)
        time.sleep(0.1)
        before = _cpu_ticks(tree)
        time.sleep(0.5)
        assert _cpu_ticks(tree) == before  # nothing ran while frozen
        freezer.thaw()
        time.sleep(0.5)
        assert _cpu_ticks(tree) > before  # the spinners run again
    finally:
        os.killpg(root.pid, signal.SIGKILL)
        root.wait()
