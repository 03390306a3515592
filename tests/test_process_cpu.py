"""benchmarks/process_cpu: a command's processes found and their CPU summed by kind."""

import sys

from benchmarks.process_cpu import kind, sample

SPIN = "import time\nend = time.process_time() + 1.5\nwhile time.process_time() < end: pass"


def test_what_a_process_is_counted_as():
    assert kind("ray::Gang.evaluate") == kind("ray::Gang") == "ray worker: Gang"
    assert kind("ray::FlatMap(expand_row)") == "ray worker: FlatMap(expand_row)"
    assert kind("/v/bin/python -m pkb_ray.runner.zygote 35 --root /tmp/x") == "rank set: zygote and its forks"
    assert kind("/v/bin/python /v/lib/ray/_private/log_monitor.py --session-dir=/tmp") == "ray daemon: log_monitor"
    assert kind("/v/bin/python -m pkb_ray.sweep hydra.run.dir=/tmp/pytest-of-root/popen-gw1/x") == "sweep driver"
    assert kind("sleep 1") == "other"


def test_a_commands_child_and_its_cpu_are_found():
    """A child that spins for 1.5 s of CPU under a parent that waits: the child and its time are
    found, the processes that ran before the command are not (this test's own, say)."""
    parent = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {SPIN!r}])"
    figures = sample([sys.executable, "-c", parent], every_s=0.1)
    assert figures["exit_code"] == 0
    spinner = [p["cpu_s"] for p in figures["top"]
               if "process_time" in p["cmdline"] and "subprocess" not in p["cmdline"]]
    assert len(spinner) == 1 and 1.3 <= spinner[0] <= 2.5, figures["top"]
    # this process sampled all along (and used CPU doing it), but it ran before the command
    own = open("/proc/self/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace").strip()[:240]
    assert own not in [p["cmdline"] for p in figures["top"]]
