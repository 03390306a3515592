"""A rank set: W fresh rank processes in one process group, driven one step at a time.

The parent (a gang) owns the rendezvous: it holds the master ``TCPStore`` on a port the OS
picks, and each rank set uses its own key prefix, so neighbouring or respawned sets never
collide. Every rank runs in its own process session, so killing it also kills whatever the
candidate spawned. Nothing here imports candidate code.

What this does not protect against: a candidate runs as the same user as the evaluator, so it
can read the job directory, write files, use the network and the GPUs of the node. It is
isolated from other samples (fresh processes) and bounded in time, not sandboxed.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch.distributed as dist

from pkb_ray.runner import protocol

ERROR_GRACE_S = 2.0  # after one rank fails, how long the others get to report before being killed
POLL_S = 0.02
LOG_TAIL_CHARS = 1500


@dataclass
class StepOutcome:
    """What a step left behind: reports, ranks that died silently, ranks still running."""

    step: str
    reports: dict[int, dict[str, Any]] = field(default_factory=dict)
    dead: dict[int, int] = field(default_factory=dict)  # rank -> exit code (negative: signal)
    missing: list[int] = field(default_factory=list)  # ranks with no report at the deadline
    phases: dict[int, str] = field(default_factory=dict)
    elapsed_s: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.dead and not self.missing and all(r.get("status") == "ok" for r in self.reports.values())


# NVLink multicast (NVLS) switches. Lent machines set them and forbid multicast; a rank keeps what
# its environment says, and gets them forced on it when the hardware profile says multicast is off.
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def child_env(extra: dict[str, str] | None = None, num_threads: int = 1, *, multicast: bool = True,
              collective_timeout_s: float = 600.0) -> dict[str, str]:
    """Environment of a rank: ours (multicast switches included) plus NCCL settings that fail fast.

    NCCL's defaults would let a rank stuck in a collective hang for 10-30 minutes. The parent kills
    a step at its deadline anyway; these make the rank itself give up soon after, should the
    parent be unable to (``collective_timeout_s`` is also the process group's timeout).
    """
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    env.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")  # a failed or timed-out collective ends the process
    env.setdefault("TORCH_NCCL_DUMP_ON_TIMEOUT", "0")  # no flight-recorder dump on the way down
    env.setdefault("TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC", str(int(collective_timeout_s)))  # a stuck watchdog too
    env.setdefault("OMP_NUM_THREADS", str(num_threads))
    env["PYTHONUNBUFFERED"] = "1"
    env.pop("RANK", None)  # a candidate must not see a launcher's variables that contradict ours
    env.pop("LOCAL_RANK", None)
    if not multicast:
        env.update(MULTICAST_OFF)
    env.update(extra or {})
    return env


def wait_for(step: str, ranks: list[int], collect, phases, deadline: float, since: float,
             poll_s: float = POLL_S) -> StepOutcome:
    """Poll (``collect(outcome)``) until every rank reported, one failed (plus a grace), or the deadline."""
    out = StepOutcome(step)
    first_failure: float | None = None
    while True:
        collect(out)
        now = time.monotonic()
        if len(out.reports) + len(out.dead) == len(ranks):
            break
        failed = out.dead or any(r.get("status") != "ok" for r in out.reports.values())
        if failed and first_failure is None:
            first_failure = now
        if now >= deadline or (first_failure is not None and now - first_failure >= ERROR_GRACE_S):
            break
        time.sleep(poll_s)
    out.missing = [r for r in ranks if r not in out.reports and r not in out.dead]
    out.phases = phases()
    out.elapsed_s = time.monotonic() - since
    return out


def _die_with_parent() -> None:
    """In the child, before exec: get SIGKILL when the parent dies (a killed gang leaks no rank)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    except OSError:
        pass  # not Linux: ranks still leave when their command pipe closes


class RankSet:
    """This node's ranks of one process group: all W of them, or (in a gang spread over nodes, see
    :mod:`pkb_ray.spread`) ranks ``first_rank ..`` of W, meeting at another process's store."""

    def __init__(
        self,
        devices: list[str],
        *,
        backend: str,
        job_dir: Path,
        pg_timeout_s: float = 600.0,
        num_threads: int = 1,
        multicast: bool = True,
        env: dict[str, str] | None = None,
        first_rank: int = 0,
        world_size: int | None = None,
        store_addr: str | None = None,
        prefix: str | None = None,
    ):
        self.world_size = world_size or len(devices)
        self.ranks = list(range(first_rank, first_rank + len(devices)))
        self.job_dir = Path(job_dir)
        self.job_dir.mkdir(parents=True, exist_ok=True)
        self.backend = backend
        self._store = None
        if store_addr is None:  # the whole group is here: hold the rendezvous ourselves
            self._store = dist.TCPStore("127.0.0.1", 0, None, True, wait_for_workers=False, use_libuv=True)
            store_addr = f"127.0.0.1:{self._store.port}"
        prefix = prefix or uuid.uuid4().hex
        self.procs: list[subprocess.Popen] = []
        child = child_env(env, num_threads, multicast=multicast, collective_timeout_s=pg_timeout_s)
        for rank, device in zip(self.ranks, devices):
            log = open(self.job_dir / f"rank{rank}.log", "wb")
            cmd = [
                sys.executable, "-m", "pkb_ray.runner.rank",
                "--rank", str(rank), "--world-size", str(self.world_size),
                "--store", store_addr, "--prefix", prefix,
                "--backend", backend, "--device", device, "--job-dir", str(self.job_dir),
                "--pg-timeout", str(pg_timeout_s), "--num-threads", str(num_threads),
            ]
            proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT,
                                    env=child, cwd=self.job_dir, start_new_session=True,
                                    preexec_fn=_die_with_parent)
            log.close()
            self.procs.append(proc)
        self.started_at = time.monotonic()
        self.closed = False

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def wait_ready(self, timeout_s: float) -> StepOutcome:
        return self.wait("ready", time.monotonic() + timeout_s, since=self.started_at)

    def send(self, cmd: dict[str, Any]) -> None:
        line = (json.dumps(cmd) + "\n").encode()
        for proc in self.procs:
            try:
                proc.stdin.write(line)
                proc.stdin.flush()
            except (BrokenPipeError, OSError):
                pass  # a dead rank: the wait that follows reports it

    def run(self, cmd: dict[str, Any], timeout_s: float) -> StepOutcome:
        started = time.monotonic()
        self.send(cmd)
        return self.wait(cmd["step"], started + timeout_s, since=started)

    def collect(self, step: str, out: StepOutcome) -> None:
        """One look at each rank not yet accounted for in ``out``: its report, or its death."""
        for rank, proc in zip(self.ranks, self.procs):
            if rank in out.reports or rank in out.dead:
                continue
            report = protocol.read_report(self.job_dir, rank, step)
            if report is not None:
                out.reports[rank] = report
            elif proc.poll() is not None:
                report = protocol.read_report(self.job_dir, rank, step)  # may have landed just now
                if report is not None:
                    out.reports[rank] = report
                else:
                    out.dead[rank] = proc.returncode

    def phases(self) -> dict[int, str]:
        return {r: protocol.read_phase(self.job_dir, r) for r in self.ranks}

    def wait(self, step: str, deadline: float, since: float) -> StepOutcome:
        return wait_for(step, self.ranks, lambda out: self.collect(step, out), self.phases, deadline, since)

    def log_tail(self, rank: int, chars: int = LOG_TAIL_CHARS) -> str:
        try:
            data = (self.job_dir / f"rank{rank}.log").read_bytes()
        except OSError:
            return ""
        return data[-chars:].decode(errors="replace").strip()

    def close(self, grace_s: float = 1.0) -> None:
        """Ask the ranks to exit; kill every process session that is still there."""
        if self.closed:
            return
        self.closed = True
        self.send({"step": "exit"})
        deadline = time.monotonic() + grace_s
        for proc in self.procs:
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        self.kill()

    def kill(self) -> None:
        """SIGKILL every rank's process session and reap the processes (up to 30 s)."""
        self.signal_kill()
        for proc in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
            if proc.stdin:
                try:
                    proc.stdin.close()
                except OSError:
                    pass
        self._store = None  # closes the rendezvous server

    def signal_kill(self) -> None:
        """SIGKILL every rank's process session now, without waiting for them to go."""
        self.closed = True
        for proc in self.procs:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # the rank and anything it spawned
            except (ProcessLookupError, PermissionError):
                pass
