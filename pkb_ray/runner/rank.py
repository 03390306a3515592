"""One rank process: ``python -m pkb_ray.runner.rank --rank R ...``.

Forked for every sample by the launcher of a :class:`pkb_ray.isolation.ranks.RankSet`
(:mod:`pkb_ray.runner.launch`, which imported torch already; run as a module, it starts alone). It
joins the process group, sets its device, says it is ready, then obeys steps read one JSON line at a time
from the command pipe (the stdin it was started with; the candidate gets /dev/null instead), each
a :mod:`pkb_ray.spec.wire` command:

``reference``, ``check_trials``, ``check_timed``, ``region``, ``capture``   in a clean set
               (``--role clean``, never a candidate): expected outputs, the comparisons the verdict
               rests on, and the reference's timed regions (:mod:`pkb_ray.runner.clean`).
``trials``, ``region``, ``capture``, ``watch``   in a candidate's set: run it on the trial seeds,
               time one region of its calls (each holding its outputs and inputs, and saying
               where they lie, for the parent to read), say what the watches found
               (:mod:`pkb_ray.runner.candidate`).
``exit``       leave.
``go TAG``, ``blank TAG``   not JSON: fire the armed region (:mod:`pkb_ray.runner.firing`), or a
               blank one; its done line, then its report under TAG.

Every step ends with its report record on the rank's report pipe (:mod:`pkb_ray.runner.protocol`),
under the command's tag (the step's name unless the command gives one). A step that raises
reports a :class:`~pkb_ray.spec.wire.Failure`, ``import_error`` or ``runtime_error`` with the traceback; anything worse (a hang, a
segfault, ``os._exit``) is seen by the parent as a missing report.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from datetime import timedelta
from pathlib import Path

from pkb_ray.runner import protocol
from pkb_ray.spec import wire
from pkb_ray.spec.names import Role, Status

STORE_UP = "store.up"  # in the job folder: rank 0's store listens (with --host-store)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    job_dir = Path(args.job_dir)
    protocol.use_report_pipe(args.report_fd)
    commands = os.fdopen(os.dup(0), "r")  # keep the command pipe; the candidate gets /dev/null
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)

    if args.device == "cpu":
        pin(args.rank, args.world_size)
    elif args.gpu_rank_cores:  # an experiment (PKB_GPU_RANK_CORES): both sides' rank r on the same few cores
        pin(args.rank, args.world_size, args.gpu_rank_cores)

    import torch
    import torch.distributed as dist

    device = torch.device(local_device(args.device, os.environ.get("CUDA_VISIBLE_DEVICES")))
    if device.type == "cuda":
        torch.cuda.set_device(device)
    _join_group(args, job_dir, device)
    if args.num_threads:
        torch.set_num_threads(args.num_threads)
    dist.barrier()
    protocol.write_report(wire.Step.READY, wire.as_dict(wire.Ready(pid=os.getpid(), device=str(device))))

    if args.role == Role.CLEAN.value:
        from pkb_ray.runner.clean import CleanSession as Session
    else:
        from pkb_ray.runner.candidate import CandidateSession as Session

    session = Session(rank=args.rank, world_size=args.world_size, device=device, job_dir=job_dir)
    _obey(session, commands)  # the session stays referenced here: nothing it holds is freed before we exit
    try:
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001 - a broken group is fine to leave behind: we exit
        pass
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # skip interpreter teardown: candidate threads or atexit hooks must not hang us


def _join_group(args: argparse.Namespace, job_dir: Path, device) -> None:
    """Meet the other ranks at the store and form the process group with them."""
    import torch.distributed as dist

    host, port = args.store.rsplit(":", 1)
    timeout = timedelta(seconds=args.pg_timeout)
    # --host-store: the sandbox has a network of its own and rank 0 holds the rendezvous in it
    master = args.host_store and args.rank == 0
    if args.host_store and not master:  # a client that connects before the server listens backs off for long
        _wait_for(job_dir / STORE_UP, args.pg_timeout)
    store = dist.TCPStore(host, int(port), args.world_size, is_master=master, timeout=timeout,
                          wait_for_workers=False)
    if master:
        (job_dir / STORE_UP).touch()
    store = dist.PrefixStore(args.prefix, store)
    # device_id makes NCCL build its communicator now (eagerly), so a prewarmed rank set has paid for it
    eager = {"device_id": device} if device.type == "cuda" else {}
    dist.init_process_group(args.backend, store=store, rank=args.rank, world_size=args.world_size, timeout=timeout,
                            **eager)


def _obey(session, commands) -> None:
    """Run each command of the pipe until ``exit`` (or the pipe's end), reporting each step's
    record, or its failure: whatever a step raises is its verdict, not the rank's end. A fire line
    (``go TAG``, ``blank TAG``) runs the armed region at once, with nothing to decode first."""
    for line in commands:
        fired = protocol.parse_go(line)
        if fired is not None:
            try:
                report = session.fire(*fired)
            except protocol.StepFailed as failure:
                report = wire.Failure(status=failure.status, message=failure.message)
            except BaseException:  # noqa: BLE001
                report = wire.Failure(status=Status.RUNTIME_ERROR.value, message=traceback.format_exc())
            protocol.write_report(fired[0], wire.as_dict(report))
            continue
        cmd = wire.decode_command(line)
        if isinstance(cmd, wire.Exit):
            break
        try:
            report = session.run(cmd)
        except protocol.StepFailed as failure:
            report = wire.Failure(status=failure.status, message=failure.message)
        except BaseException:  # noqa: BLE001 - anything the step raised is the step's verdict
            report = wire.Failure(status=Status.RUNTIME_ERROR.value, message=traceback.format_exc())
        protocol.write_report(cmd.tag or cmd.step, wire.as_dict(report))


def pin(rank: int, world_size: int, at_most: int | None = None) -> None:
    """Keep a CPU rank (and the threads it starts) on its own share of the cores: rank r of every
    rank set on the same ones. The clean set and a candidate's take turns on the cores (one is
    always stopped), so each side's ranks run where the other's ran, rather than wherever the
    scheduler happened to wake them (two ranks on one core: +30 % a call, for a whole sample)."""
    cores = sorted(os.sched_getaffinity(0))
    share = max(1, min(len(cores) // world_size, at_most or len(cores)))
    mine = cores[(rank * share) % len(cores):][:share]
    os.sched_setaffinity(0, mine)


def _wait_for(path: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.005)


def local_device(device: str, visible: str | None) -> str:
    """``cuda:<id>`` as this process numbers it. Ray names a GPU by its id on the node, which is its
    position among all GPUs, or its entry in CUDA_VISIBLE_DEVICES when the node's Ray was started
    with one (e.g. two Ray nodes on one machine, one GPU each); a process numbers the GPUs it sees
    from 0."""
    if not device.startswith("cuda:") or not visible:
        return device
    ids = [v.strip() for v in visible.split(",") if v.strip()]
    gpu = device.split(":", 1)[1]
    return f"cuda:{ids.index(gpu)}" if gpu in ids else device


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="pkb_ray.runner.rank")
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world-size", type=int, required=True)
    p.add_argument("--store", required=True, help="host:port of the rendezvous TCPStore")
    p.add_argument("--prefix", required=True, help="key prefix of this rank set in the store")
    p.add_argument("--host-store", action="store_true", help="rank 0 holds the store (a sandbox's own network)")
    p.add_argument("--backend", choices=("gloo", "nccl"), required=True)
    p.add_argument("--device", required=True, help="cpu or cuda:N")
    p.add_argument("--job-dir", required=True)
    p.add_argument("--report-fd", type=int, required=True, help="the write end of this rank's report pipe")
    p.add_argument("--pg-timeout", type=float, default=600.0)
    p.add_argument("--num-threads", type=int, default=0)
    p.add_argument("--gpu-rank-cores", type=int, default=0, help="pin a GPU rank to this many cores (0: not pinned)")
    p.add_argument("--role", choices=[r.value for r in Role], default=Role.CANDIDATE.value,
                   help="clean: the reference and the checks, never a candidate")
    return p.parse_args(argv)


if __name__ == "__main__":
    raise SystemExit(main())
