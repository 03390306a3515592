"""The first process of a rank set's sandbox: ``python -m pkb_ray.runner.launch SPEC_JSON``.

All W ranks of a sample share one sandbox (one PID namespace, so that NCCL, CUDA IPC and torch
symmetric memory work between them), so one process inside starts them: this one. It imports
torch and the rank's modules once (about 1.5 s of CPU that W fresh interpreters would each pay),
touches no device and starts no thread, then forks each rank (:func:`pkb_ray.runner.rank.main`)
with that rank's command pipe (a file descriptor the parent passed through the sandbox) as stdin,
the write end of its report pipe, its log as stdout and stderr, and no other descriptor. No
candidate ever runs here. It then waits; when a rank ends, it writes ``rank<R>.exit`` (its exit
code, negative for a signal) in the job folder. It exits when every rank has ended; the sandbox,
and everything any rank started, goes with it.
"""

from __future__ import annotations


import json
import os
import signal
import sys
import traceback
from pathlib import Path

from pkb_ray.spec.names import Role

RANK_NAME = "pkb_ray.rank"  # a forked rank's process name (ps, top, /proc/PID/comm); its command line is ours


def exit_path(job_dir: Path, rank: int) -> Path:
    return job_dir / f"rank{rank}.exit"


def read_exit(job_dir: Path, rank: int) -> int | None:
    try:
        return int(exit_path(job_dir, rank).read_text())
    except (OSError, ValueError):
        return None


# A clean rank's process id in its PID namespace is at least this, so that it never equals a
# candidate's rank's (<= W + 3 in a fresh namespace of its own, set before any candidate runs).
# Legacy CUDA IPC takes a handle from a process with the opener's own pid for the opener's own,
# and fails (CUDA_ERROR_INVALID_CONTEXT): on one H100, a candidate's set started without the zygote
# had its rank at pid 3 like the clean rank, and every output read as unreadable ("tampering").
CLEAN_PID_FLOOR = 64


def main(argv: list[str] | None = None) -> int:
    spec = json.loads((argv or sys.argv[1:])[0])
    if _role(spec["rank_args"]) is Role.CLEAN:
        skip_pids(CLEAN_PID_FLOOR)  # before torch: a fork of this small process costs ~0.1 ms
    preload(spec["rank_args"])
    return run_ranks(spec)


def skip_pids(floor: int) -> None:
    """Fork and reap children that exit at once until the next process this one starts gets a
    process id of at least ``floor`` (ids in a namespace are handed out in order; on the host's,
    where they are already large, one fork at most)."""
    pid = os.getpid()
    while pid < floor - 1:
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)


def _role(rank_args: list[str]) -> Role:
    return Role(rank_args[rank_args.index("--role") + 1]) if "--role" in rank_args else Role.CANDIDATE


def run_ranks(spec: dict) -> int:
    """Fork the set's ranks (``spec``: the job folder, the ranks' arguments, and per rank its
    command pipe, report pipe and device), then wait for them, writing each one's exit file."""
    job_dir = Path(spec["job_dir"])
    procs = {}
    for rank, fd, report_fd in zip(spec["ranks"], spec["fds"], spec["report_fds"]):
        log = os.open(job_dir / f"rank{rank}.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        args = [*spec["rank_args"], "--rank", str(rank), "--device", spec["devices"][str(rank)],
                "--report-fd", str(report_fd)]
        procs[fork_rank(args, stdin=fd, log=log, keep=report_fd)] = rank
        for own in (log, fd, report_fd):
            os.close(own)
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


def preload(rank_args: list[str]) -> None:
    """What every rank of this set imports, imported once before the forks: torch, the rank, and
    the session of its ``--role``. Importing torch starts no thread (with OMP_NUM_THREADS=1, as
    ranks get it) and initialises no device (CUDA is set up in each rank, after its fork)."""
    import importlib

    import torch.distributed  # noqa: F401
    import pkb_ray.runner.rank  # noqa: F401

    importlib.import_module(f"pkb_ray.runner.{_role(rank_args).value}")  # runner/clean.py or runner/candidate.py


def fork_rank(args: list[str], *, stdin: int, log: int, keep: int) -> int:
    """Fork one rank running ``pkb_ray.runner.rank.main(args)``; it holds descriptors 0-2 and
    ``keep`` only (as a fresh ``subprocess.Popen`` would), and never returns into this loop."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        os.dup2(stdin, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.closerange(3, keep)
        os.closerange(keep + 1, os.sysconf("SC_OPEN_MAX"))
        name_process(RANK_NAME)
        from pkb_ray.runner import rank

        sys.argv = [rank.__file__, *args]
        code = rank.main(args)
    except SystemExit as exc:  # argparse's errors, or a rank that returns through SystemExit
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001 - whatever failed, this child must end here
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def name_process(name: str) -> None:
    try:
        Path("/proc/self/comm").write_text(name)
    except OSError:  # no /proc: the name is cosmetic
        pass


def process_name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent ends us with SIGKILL, never by a stray ^C
    raise SystemExit(main())
