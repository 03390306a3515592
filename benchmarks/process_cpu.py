"""Where a command's CPU goes: every process it starts, sampled, summed by what the process is.

    .venv/bin/python -m benchmarks process_cpu --out /tmp/suite_cpu.json -- ./scripts/test.sh

Runs the command given after ``--`` and, every ``--every`` seconds until it ends, reads each new
process's CPU time (user + system, /proc/PID/stat) and its command line (a Ray worker's is its
proctitle, ``ray::Gang.evaluate``). Every process started while the command runs is counted, its
own or not (run it on an otherwise idle machine); those running before it started are left out,
and one that lives less than a sampling period can be missed. Writes the machine's busy and
idle CPU over the run (/proc/stat), the command's wall time and exit code, the CPU seconds and
process counts by kind (a Ray worker by the actor or task it ran, Ray's own daemons, rank sets,
sweep drivers, test processes, compilers), and the 40 processes that used the most.
docs/benchmarks/test-suite.md quotes it on the test suite.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections import Counter

from benchmarks import common

TICKS = os.sysconf("SC_CLK_TCK")
# (what a command line contains, the kind it is counted as), first match wins
KINDS = (
    ("default_worker.py", "ray worker (not yet named)"),
    ("gcs_server", "ray daemon: gcs_server"), ("raylet", "ray daemon: raylet"),
    ("log_monitor", "ray daemon: log_monitor"), ("dashboard/agent", "ray daemon: dashboard agent"),
    ("runtime_env/agent", "ray daemon: runtime env agent"), ("dashboard.py", "ray daemon: dashboard"),
    ("autoscaler/_private/monitor", "ray daemon: monitor"), ("ray start", "ray start"),
    ("pkb_ray.runner.zygote", "rank set: zygote and its forks"), ("pkb_ray.runner.launch", "rank set: launcher"),
    ("pkb_ray.sweep", "sweep driver"), ("pkb_ray.cli", "pkb-ray command"), ("bin/pkb-ray", "pkb-ray command"),
    ("exec(eval(sys.stdin", "pytest-xdist worker"), ("pytest", "pytest"),
    ("cc1plus", "compiler"), ("cicc", "compiler"), ("ptxas", "compiler"), ("nvcc", "compiler"),
    ("cudafe", "compiler"), ("bwrap", "bwrap"), ("wandb", "wandb"), ("chrom", "browser"),
)


def kind(cmdline: str) -> str:
    if cmdline.startswith("ray::"):
        return "ray worker: " + re.split(r"[\s.]", cmdline[5:], maxsplit=1)[0]
    return next((name for needle, name in KINDS if needle in cmdline), "other")


def _stat(pid: str) -> tuple[str, int] | None:
    """(start time in ticks since boot, CPU ticks so far) of a process; None when it is gone."""
    try:
        text = open(f"/proc/{pid}/stat").read()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()
    return fields[19], int(fields[11]) + int(fields[12])


def _cmdline(pid: str) -> str:
    try:
        return open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace").strip()[:240]
    except OSError:
        return ""


def _busy_idle() -> tuple[float, float]:
    fields = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    return (sum(fields[:3]) + sum(fields[4:8])) / TICKS, fields[3] / TICKS


def sample(cmd: list[str], every_s: float) -> dict:
    """Run ``cmd``, sampling the processes it starts; the figures."""
    before = {p for p in os.listdir("/proc") if p.isdigit()}
    seen: dict[tuple[str, str], list] = {}  # (pid, start) -> [command line, CPU ticks]
    busy0, idle0 = _busy_idle()
    start = time.monotonic()
    proc = subprocess.Popen(cmd)
    while True:
        done = proc.poll() is not None
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or pid in before or (st := _stat(pid)) is None:
                continue
            entry = seen.setdefault((pid, st[0]), ["", 0])
            entry[1] = max(entry[1], st[1])
            if not entry[0] or entry[0].startswith("ray::IDLE") or "default_worker.py" in entry[0]:
                entry[0] = _cmdline(pid) or entry[0]  # a Ray worker names itself once it runs something
        if done:
            break
        time.sleep(every_s)
    busy1, idle1 = _busy_idle()
    seconds, count = Counter(), Counter()
    for cmdline, ticks in seen.values():
        seconds[kind(cmdline)] += ticks / TICKS
        count[kind(cmdline)] += 1
    top = sorted(((ticks / TICKS, cmdline) for cmdline, ticks in seen.values()), reverse=True)[:40]
    return {"command": cmd, "exit_code": proc.returncode, "wall_s": round(time.monotonic() - start, 1),
            "machine_busy_s": round(busy1 - busy0, 1), "machine_idle_s": round(idle1 - idle0, 1),
            "cpus": os.cpu_count(), "processes": len(seen), "sampled_cpu_s": round(sum(seconds.values()), 1),
            "by_kind": {k: {"cpu_s": round(v, 1), "processes": count[k]} for k, v in seconds.most_common()},
            "top": [{"cpu_s": round(s, 2), "cmdline": c} for s, c in top]}


def main(argv: list[str]) -> int:
    own, cmd = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    run = common.Run.of(__name__, argv)
    parser = run.parser(__doc__)
    parser.add_argument("--every", type=float, default=0.5, help="seconds between samples (default 0.5)")
    args = parser.parse_args(own)
    if not cmd:
        parser.error("give the command to measure after --")
    figures = sample(cmd, args.every)
    path = run.write(run.out(args.out), figures)
    print(f"{figures['wall_s']} s wall, exit {figures['exit_code']}; machine busy {figures['machine_busy_s']} s, "
          f"idle {figures['machine_idle_s']} s; sampled {figures['sampled_cpu_s']} s of CPU in "
          f"{figures['processes']} processes", file=sys.stderr)
    for name, row in list(figures["by_kind"].items())[:25]:
        print(f"{row['cpu_s']:8.1f} s {row['processes']:6d}  {name}", file=sys.stderr)
    print(f"wrote {path}", file=sys.stderr)
    return 0 if figures["exit_code"] == 0 else 1
