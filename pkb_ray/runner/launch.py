"""The first process of a rank set's sandbox: ``python -m pkb_ray.runner.launch SPEC_JSON``.

All W ranks of a sample share one sandbox (one PID namespace, so that NCCL, CUDA IPC and torch
symmetric memory work between them), so one process inside starts them: this one. It imports
no torch and no candidate. For each rank it starts ``pkb_ray.runner.rank`` with that rank's
command pipe (a file descriptor the parent passed through the sandbox) as stdin, the write end of
its report pipe, and its log as stdout, then waits; when a rank ends, it writes ``rank<R>.exit`` (its exit code, negative for a
signal) in the job folder. It exits when every rank has ended; the sandbox, and everything any
rank started, goes with it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path


def exit_path(job_dir: Path, rank: int) -> Path:
    return job_dir / f"rank{rank}.exit"


def read_exit(job_dir: Path, rank: int) -> int | None:
    try:
        return int(exit_path(job_dir, rank).read_text())
    except (OSError, ValueError):
        return None


def main(argv: list[str] | None = None) -> int:
    spec = json.loads((argv or sys.argv[1:])[0])
    job_dir = Path(spec["job_dir"])
    procs = {}
    for rank, fd, report_fd in zip(spec["ranks"], spec["fds"], spec["report_fds"]):
        log = open(job_dir / f"rank{rank}.log", "wb")
        procs[subprocess.Popen(spec["argv"] + ["--rank", str(rank), "--device", spec["devices"][str(rank)],
                                               "--report-fd", str(report_fd)],
                               stdin=fd, stdout=log, stderr=subprocess.STDOUT, cwd=os.getcwd(),
                               pass_fds=(report_fd,)).pid] = rank
        log.close()
        os.close(fd)
        os.close(report_fd)
    while procs:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            break
        rank = procs.pop(pid, None)
        if rank is None:
            continue  # an orphan re-parented to us (we may be the namespace's reaper)
        code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        tmp = exit_path(job_dir, rank).with_suffix(".tmp")
        tmp.write_text(str(code))
        os.replace(tmp, exit_path(job_dir, rank))
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent ends us with SIGKILL, never by a stray ^C
    raise SystemExit(main())
