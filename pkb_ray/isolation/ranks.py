"""A rank set: W fresh rank processes in one process group, driven one step at a time.

The W ranks share one sandbox (:mod:`pkb_ray.isolation.sandbox`, level ``eval.isolation``): a launcher
(:mod:`pkb_ray.runner.launch`) starts them inside it, each with its own command pipe, and
killing the sandbox kills whatever the candidate spawned, however it detached. Commands go down
one pipe per rank, reports come back up another (:mod:`pkb_ray.runner.protocol`): nothing crosses a
network. Where all W
ranks are here and sandboxed, the sandbox has a network of its own (loopback only) and rank 0
holds the rendezvous ``TCPStore`` inside it (:data:`SANDBOX_STORE`); otherwise (no sandbox, or a
gang spread over nodes) the store is the parent's, on the host's network, and each rank set uses
its own key prefix, so neighbouring or respawned sets never collide. Nothing here imports
candidate code. The sandbox's docstring says what it does not protect against.
"""

from __future__ import annotations

import itertools
import json
import os
import select
import secrets
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Protocol

import torch.distributed as dist

from pkb_ray.isolation import allowlist, freeze_group, procfs, sandbox
from pkb_ray.isolation.freezer import Freezer
from pkb_ray.isolation.memory import Unreadable, host_pids, read_entries, write_entries
from pkb_ray.isolation.procfs import SharedLookup
from pkb_ray.isolation.zygote import DESCRIBED as ZYGOTE_DESCRIBED
from pkb_ray.isolation.zygote import Forked, ZygoteFailed, Zygotes
from pkb_ray.isolation.zygote import request as forked_request
from pkb_ray.measure.keys import for_rank
from pkb_ray.runner import protocol
from pkb_ray.runner.launch import read_exit
from pkb_ray.spec.names import Role
from pkb_ray.spec.wire import (Answer, Command, Exit, Failure, Ready, RegionReport, Report, Step, as_dict,
                           parse_report)

ERROR_GRACE_S = 2.0  # after one rank fails, how long the others get to report before being killed
POLL_S = 0.02
EXIT_POLL_S = 0.005  # how often a wait reads the ranks' exit files
LOG_TAIL_CHARS = 1500
EARLY_SEND_BYTES = 32 << 10  # a command line this long fits in an empty pipe (64 KiB on Linux) with room to spare
CPU_RANK_MEMORY = 16 << 30  # address space of one CPU rank process in a sandbox (RLIMIT_AS)
SANDBOX_STORE = "127.0.0.1:29400"  # rank 0's rendezvous in a sandbox's own network: no other process can bind there
# a sandbox's own network has only loopback: gloo and NCCL's bootstrap must use it (one node: NVLink, P2P, SHM)
LOOPBACK_ONLY = {"GLOO_SOCKET_IFNAME": "lo", "NCCL_SOCKET_IFNAME": "lo"}


@dataclass
class StepOutcome:
    """What a step left behind: reports (each the step's record or a :class:`~pkb_ray.spec.wire.Failure`),
    ranks that died silently, ranks still running."""

    step: str
    reports: dict[int, Answer] = field(default_factory=dict)
    dead: dict[int, int] = field(default_factory=dict)  # rank -> exit code (negative: signal)
    missing: list[int] = field(default_factory=list)  # ranks with no report at the deadline
    phases: dict[int, str] = field(default_factory=dict)
    elapsed_s: float = 0.0
    answered_at: float = 0.0  # time.perf_counter() when the wait ended (before the reports were parsed)
    arrived: dict[int, float] = field(default_factory=dict)  # rank -> time.perf_counter() its report was seen
    # a fired region's (RankSet.fire): rank -> microseconds from resuming the set to its done line
    # (pkb_ray.runner.protocol.mark_done), and to its report, on the clock of the node that resumed it
    done_us: dict[int, float] = field(default_factory=dict)
    report_us: dict[int, float] = field(default_factory=dict)
    resumed: float = 0.0  # a fired region's: time.perf_counter() when the set was resumed

    @property
    def ok(self) -> bool:
        return not self.dead and not self.missing and not any(isinstance(r, Failure) for r in self.reports.values())


# NVLink multicast (NVLS) switches. Lent machines set them and forbid multicast; a rank keeps what
# its environment says, and gets them forced on it when the hardware profile says multicast is off.
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def child_env(extra: dict[str, str] | None = None, num_threads: int = 1, *, multicast: bool = True,
              collective_timeout_s: float = 600.0, isolation: sandbox.Isolation = sandbox.Isolation.NONE) -> dict[str, str]:
    """Environment of a rank: an allowlist of ours (no credentials, whatever the isolation level;
    the multicast switches included) plus NCCL settings that fail fast.

    NCCL's defaults would let a rank stuck in a collective hang for 10-30 minutes. The parent kills
    a step at its deadline anyway; these make the rank itself give up soon after, should the
    parent be unable to (``collective_timeout_s`` is also the process group's timeout).
    """
    ours = {"PYTHONPATH": allowlist.ranks_pythonpath(), "PYTHONUNBUFFERED": "1"}
    defaults = {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",  # a failed or timed-out collective ends the process
                "TORCH_NCCL_DUMP_ON_TIMEOUT": "0",  # no flight-recorder dump on the way down
                "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC": str(int(collective_timeout_s)),  # a stuck watchdog too
                "OMP_NUM_THREADS": str(num_threads),
                # glibc's malloc with fixed thresholds: large CPU tensors (a region's fresh inputs)
                # come from a heap that is kept, not from mmap and page faults whose cost follows the
                # dynamic threshold, which depends on each process's history. The clean set (long
                # lived) and a candidate's (fresh) then pay the same for the same work.
                "MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(1 << 30)}
    ours.update({k: v for k, v in defaults.items() if k not in os.environ})
    if not multicast:
        ours.update(MULTICAST_OFF)
    ours.update(extra or {})
    env = sandbox.child_env(os.environ, ours, isolation)
    env.pop("RANK", None)  # a candidate must not see a launcher's variables that contradict ours
    env.pop("LOCAL_RANK", None)
    return env


def wait_for(step: str, ranks: list[int], collect, phases, deadline: float, since: float,
             poll_s: float = POLL_S, kind: type[Report] = Report, answered=None,
             readable=None) -> StepOutcome:
    """Poll (``collect(outcome)``, which adds the raw reports) until every rank reported, one failed
    (plus a grace), or the deadline; then call ``answered()`` (the parent's rounds stop the set
    there: before the reports are read, so that reading them stays outside the bracket), and read
    each report as the step's record ``kind``. Between looks, ``readable(poll_s)`` waits until a
    report pipe has something to read or ``poll_s`` passed (a plain sleep without it): a report is
    seen when it lands, not up to a sleep later, so a region's bracket holds no polling delay."""
    out = StepOutcome(step)
    first_failure: float | None = None
    while True:
        collect(out)
        seen = time.perf_counter()
        for rank in out.reports:
            out.arrived.setdefault(rank, seen)
        now = time.monotonic()
        if len(out.reports) + len(out.dead) == len(ranks):
            break
        failed = out.dead or any(r.get("status") != "ok" for r in out.reports.values())
        if failed and first_failure is None:
            first_failure = now
        if now >= deadline or (first_failure is not None and now - first_failure >= ERROR_GRACE_S):
            break
        if readable is not None:
            readable(poll_s)
        else:
            time.sleep(poll_s)
    out.answered_at = time.perf_counter()
    if answered is not None:
        answered()
    out.missing = [r for r in ranks if r not in out.reports and r not in out.dead]
    out.phases = phases()
    out.elapsed_s = time.monotonic() - since
    out.reports = {rank: parse_report(kind, raw) for rank, raw in out.reports.items()}
    return out


@dataclass(frozen=True)
class RankIsolation:
    """How a rank set is isolated: the probed level (see :func:`pkb_ray.isolation.sandbox.probe`), the folders
    its ranks may read besides the system allowlist (:mod:`pkb_ray.isolation.allowlist`), those they may
    write, the paths masked should a shown folder hold them, and the limits. Plain data, so that a
    spread gang can send it to the other nodes' hosts."""

    level: str = sandbox.Isolation.NONE.value
    hide: tuple[str, ...] = ()  # masked where a shown folder holds them (results, secrets, the cache's key)
    readable: tuple[str, ...] = ()  # problem folders, an imported benchmark's checkout, build caches
    writable: tuple[str, ...] = ()  # besides the rank set's own job folder
    gpu: bool = False

    def policy(self, job_dir: Path, ranks: int, network: sandbox.Network = sandbox.Network.OWN) -> sandbox.Policy:
        # processes count threads, of every rank in the sandbox (NCCL starts many); the memory cap is
        # RLIMIT_AS per process on CPU only (CUDA reserves huge address ranges) unless a cgroup holds it
        limits = sandbox.Limits(max_processes=512 * ranks, memory_bytes=None if self.gpu else CPU_RANK_MEMORY)
        return sandbox.Policy(writable=[job_dir, *map(Path, self.writable)], hide=[Path(p) for p in self.hide],
                              readable=list(map(Path, self.readable)), gpu=self.gpu, limits=limits, network=network)


class Ranks(Protocol):
    """The rank set that the harness, the reference checks and the timed rounds drive: W rank
    processes of one sample (or the clean set) on one node (:class:`RankSet`), or spread over
    nodes (:class:`pkb_ray.isolation.spread.SpreadRankSet`)."""

    job_dir: Path  # where the ranks read commands' files and write their reports

    @property
    def ranks(self) -> list[int]: ...  # the global ranks

    def wait_ready(self, timeout_s: float) -> StepOutcome: ...  # until every rank joined its process group

    def run(self, cmd: Command, timeout_s: float, poll_s: float = POLL_S, answered=None,
            resume: Callable[[], None] | None = None) -> StepOutcome: ...
    # one step on every rank; ``resume()`` resumes the set around the send (see RankSet.send), and
    # ``answered()`` is called as soon as the wait ends (see wait_for)

    def fire(self, blank: bool, timeout_s: float, poll_s: float = POLL_S, answered=None) -> StepOutcome: ...
    # the armed region of every rank of the stopped set, fired and the set resumed (see RankSet.fire)

    def log_tail(self, rank: int, chars: int = LOG_TAIL_CHARS) -> str: ...  # the end of a rank's output

    def freeze(self, timeout_s: float) -> bool: ...  # stop every process of the set (False: not in time)

    def thaw(self) -> None: ...  # resume them

    def ran_while_frozen(self) -> str: ...  # why a process of the set ran since its freeze was proven, or ""

    def read_tensors(self, rank: int, entries: list[list[int]]) -> list[bytes]: ...
    # the bytes of a rank's CPU tensors at its layout entries, read by the trusted side (pkb_ray.isolation.memory)

    def write_tensors(self, rank: int, entries: list[list[int]], blobs: list[bytes]) -> None: ...
    # bytes written into a rank's CPU tensors at its layout entries, by the trusted side (staged inputs)

    def signal_kill(self) -> None: ...  # SIGKILL to every rank, without waiting

    def kill(self) -> None: ...  # kill and reap every rank


def _rendezvous(store_addr: str | None, own_network: bool,
                env: dict[str, str] | None) -> tuple[dist.TCPStore | None, str, dict[str, str] | None]:
    """Where the ranks meet: the store held here for them (None: rank 0's or another process's),
    its address, and the ranks' extra environment. All ranks here, in a sandbox (``own_network``):
    a network of its own, the rendezvous inside it (rank 0's); the whole group here, unsandboxed:
    this process holds it."""
    if own_network:
        return None, SANDBOX_STORE, {**(env or {}), **LOOPBACK_ONLY}
    if store_addr is None:
        store = dist.TCPStore("127.0.0.1", 0, None, True, wait_for_workers=False, use_libuv=True)
        return store, f"127.0.0.1:{store.port}", env
    return None, store_addr, env


class RankSet:
    """This node's ranks of one process group: all W of them, or (in a gang spread over nodes, see
    :mod:`pkb_ray.isolation.spread`) ranks ``first_rank ..`` of W, meeting at another process's store."""

    def __init__(self, devices: list[str], *, backend: str, job_dir: Path, pg_timeout_s: float = 600.0,
                 num_threads: int = 1, multicast: bool = True, env: dict[str, str] | None = None, first_rank: int = 0,
                 world_size: int | None = None, store_addr: str | None = None, prefix: str | None = None,
                 isolation: RankIsolation = RankIsolation(), role: Role = Role.CANDIDATE, zygotes: Zygotes | None = None):
        """``role``: ``clean`` for a set that never imports a candidate (the reference, the checks).
        ``zygotes``: where a candidate's set in a sandbox of its own network is forked from a
        template that imported torch once (:mod:`pkb_ray.isolation.zygote`), instead of a sandbox and
        interpreter of its own; the isolation is the same."""
        self.world_size = world_size or len(devices)
        self.ranks = list(range(first_rank, first_rank + len(devices)))
        self.job_dir = Path(job_dir)
        self.job_dir.mkdir(parents=True, exist_ok=True)
        self.backend = backend
        self.role = Role(role)  # a candidate's tensors are read and written only in private memory
        self._shared: dict[int, SharedLookup] = {}  # pid -> what backs its memory, asked while stopped
        self._tags = itertools.count()
        self._exits_seen = 0.0  # when a wait last read the exit files (EXIT_POLL_S)
        level = sandbox.Isolation(isolation.level)
        probe = sandbox.probe(level)
        own_network = store_addr is None and probe.level is sandbox.Isolation.SANDBOX  # see _rendezvous
        self._store, store_addr, env = _rendezvous(store_addr, own_network, env)
        child = child_env(env, num_threads, multicast=multicast, collective_timeout_s=pg_timeout_s, isolation=level)
        rank_args = self._rank_args(store_addr, prefix, pg_timeout_s, num_threads, role, own_network)
        spec = self._launch_spec(devices, rank_args)
        policy = isolation.policy(self.job_dir, len(self.ranks),
                                  sandbox.Network.OWN if own_network else sandbox.Network.HOST)
        forked = self._start(spec, child, policy, probe, zygotes if role == Role.CANDIDATE and own_network else None)
        self.freezer = Freezer(self.proc.pid, self._slot.path)
        self._freeze_group = self._new_freeze_group(probe)
        self.isolation = probe.describe() + (f"; {ZYGOTE_DESCRIBED}" if forked else "") + \
            f"; stopped by the {'cgroup v2 freezer' if self._freeze_group or self._slot.path else 'SIGSTOP freezer'}"
        self.host_pids: dict[int, int] = {}  # rank -> its process's pid on the host (read_tensors)
        self.started_at = time.monotonic()
        self.closed = False

    def _rank_args(self, store_addr: str, prefix: str | None, pg_timeout_s: float, num_threads: int, role: Role,
                   own_network: bool) -> list[str]:
        """The command line every rank of the set shares (the launcher adds its rank, device and pipe)."""
        cores = os.environ.get("PKB_GPU_RANK_CORES")
        return ["--world-size", str(self.world_size), "--store", store_addr,
                "--prefix", prefix or uuid.uuid4().hex,  # keys of its own: neighbouring or respawned sets never collide
                "--backend", self.backend, "--job-dir", str(self.job_dir),
                "--pg-timeout", str(pg_timeout_s), "--num-threads", str(num_threads), "--role", Role(role).value,
                *(["--host-store"] if own_network else []), *(["--gpu-rank-cores", cores] if cores else [])]

    def _launch_spec(self, devices: list[str], rank_args: list[str]) -> dict:
        """What :mod:`pkb_ray.runner.launch` starts the ranks from. Opens each rank's command and
        report pipes: this process keeps its ends; the ranks' ends, in the spec, are the launcher's
        to inherit and closed here once it started (:meth:`_start`)."""
        reads, writes, self._pipes, self._reports = [], [], [], {}
        for rank in self.ranks:
            r, w = os.pipe()  # commands down
            reads.append(r)
            self._pipes.append(os.fdopen(w, "wb"))
            r, w = os.pipe()  # reports up
            writes.append(w)
            self._reports[rank] = protocol.ReportReader(r)
        return {"job_dir": str(self.job_dir), "rank_args": rank_args, "ranks": self.ranks, "fds": reads,
                "report_fds": writes, "devices": {str(r): d for r, d in zip(self.ranks, devices)}}

    def _start(self, spec: dict, child: dict[str, str], policy: sandbox.Policy, probe: sandbox.Probe,
               zygotes: Zygotes | None) -> bool:
        """Start the launcher in its sandbox (``self.proc``): forked from a template of ``zygotes``
        where given and the set has no cgroup slot of its own, else a process of its own; True where
        it was forked."""
        fds = spec["fds"] + spec["report_fds"]
        self._slot = sandbox.CgroupSlot(probe, policy.limits)
        zygote = zygotes.get(child, policy, probe) if zygotes is not None and self._slot.path is None else None
        try:
            if zygote is not None:
                try:
                    self.proc = zygote.fork(forked_request(spec, child, policy, self.job_dir), fds,
                                            zygotes.startup_timeout_s)
                except ZygoteFailed as exc:  # this set starts the usual way; the next gets a new template
                    zygotes.lost(zygote, str(exc))
                    zygote = None
            if zygote is None:
                launch = sandbox.Spec([sys.executable, "-m", "pkb_ray.runner.launch", json.dumps(spec)], policy, probe,
                                      child, pass_fds=tuple(fds),
                                      host_cwd=self.job_dir if probe.level is sandbox.Isolation.NONE else None)
                with open(self.job_dir / "launch.log", "wb") as log:  # the limits include SIGKILL on our death
                    self.proc = sandbox.start(launch, log, self._slot)
        finally:
            for fd in fds:
                os.close(fd)
        return zygote is not None

    @property
    def pids(self) -> list[int]:
        return [self.proc.pid]

    def _new_freeze_group(self, probe: sandbox.Probe) -> freeze_group.FreezeGroup | None:
        """A cgroup for the kernel's freezer alone (:mod:`pkb_ray.isolation.freeze_group`) where the set
        has no cgroup slot and one can be made; None keeps the SIGSTOP freezer."""
        where, _ = freeze_group.parent()
        if self._slot.path is not None or where is None or probe.level is not sandbox.Isolation.SANDBOX:
            return None
        try:
            return freeze_group.FreezeGroup(where)
        except OSError:  # a limit on cgroups (cgroup.max.descendants): the signals freezer holds too
            return None

    def wait_ready(self, timeout_s: float) -> StepOutcome:
        ready = self.wait(Step.READY, time.monotonic() + timeout_s, since=self.started_at, kind=Ready)
        group = self._freeze_group
        if ready.ok and group is not None and not group.adopted:
            # every process of the set runs only our runner until its first command: moved in now,
            # what the candidate forks later starts inside
            if group.adopt(procfs.descendants(self.proc.pid)):
                self.freezer.use_cgroup(group.path)
            else:
                group.close()
                self._freeze_group = None
        return ready

    def read_tensors(self, rank: int, entries: list[list[int]]) -> list[bytes]:
        pid = self._host_pid(rank)
        return read_entries(pid, entries, shared=self._shared_of(pid))

    def write_tensors(self, rank: int, entries: list[list[int]], blobs: list[bytes]) -> None:
        pid = self._host_pid(rank)
        write_entries(pid, entries, blobs, shared=self._shared_of(pid))

    def _shared_of(self, pid: int) -> SharedLookup | None:
        """What backs a candidate's process's memory (:func:`pkb_ray.isolation.memory.check_private`),
        one lookup for the process's life; None for the clean set (its tensors are not checked)."""
        if self.role is not Role.CANDIDATE:
            return None
        if pid not in self._shared:
            self._shared[pid] = SharedLookup(pid)
        return self._shared[pid]

    def _host_pid(self, rank: int) -> int:
        if not self.host_pids:  # where each rank's process is on the host, from the pid its ready
            ready = self.wait_ready(0.0)  # report gave (kept: written before any candidate came)
            self.host_pids = host_pids(self.proc.pid, {r: rep.pid for r, rep in ready.reports.items()
                                                       if not isinstance(rep, Failure)})
        if rank not in self.host_pids:
            raise Unreadable(f"rank {rank}'s process was not found when it started")
        return self.host_pids[rank]

    def send(self, cmd: Command, resume: Callable[[], None] | None = None) -> None:
        """``cmd`` down every rank's pipe; where it carries input keys, each rank's line holds its
        own key and the shared one only (:mod:`pkb_ray.measure.keys`), and of a ``peer`` its own rank's.
        ``resume()``, where given, resumes the set: after the lines are in the pipes where each fits
        in a pipe's buffer (the ranks wake with their command waiting: no wake-up on data after the
        one on SIGCONT), else before writing (a stopped reader would never drain a longer one)."""
        raw = as_dict(cmd)
        peer = raw.get("peer") or {}
        lines = {}
        for rank in self.ranks:
            mine = raw
            if cmd.keys or peer:
                mine = {**raw, "keys": for_rank(cmd.keys, rank)}
                if peer:  # what of the candidate's set only this rank's counterpart staged (wire.Stage)
                    mine["peer"] = {str(rank): peer[str(rank)]} if str(rank) in peer else {}
            lines[rank] = (json.dumps(mine) + "\n").encode()
        if resume is not None and max(map(len, lines.values())) > EARLY_SEND_BYTES:
            resume()
            resume = None
        for rank, pipe in zip(self.ranks, self._pipes):
            try:
                pipe.write(lines[rank])
                pipe.flush()
            except (BrokenPipeError, OSError, ValueError):
                pass  # a dead rank: the wait that follows reports it
        if resume is not None:
            resume()

    def tag(self, cmd: Command) -> Command:
        """``cmd`` with a tag of its own: its reports never meet an earlier step's, and none can be
        sent before the command (the tag is unpredictable)."""
        return replace(cmd, tag=f"{cmd.step}.{next(self._tags)}.{secrets.token_hex(6)}")

    def run(self, cmd: Command, timeout_s: float, poll_s: float = POLL_S, answered=None,
            resume: Callable[[], None] | None = None) -> StepOutcome:
        started = time.monotonic()
        cmd = self.tag(cmd)
        self.send(cmd, resume)
        return self.wait(cmd.tag, started + timeout_s, since=started, poll_s=poll_s, kind=cmd.answer,
                         answered=answered)

    def fire(self, blank: bool, timeout_s: float, poll_s: float = POLL_S, answered=None) -> StepOutcome:
        """Fire the armed region (:meth:`pkb_ray.runner.session.RankSession.fire`) of every rank of
        the set, which is stopped: the fire line goes into every pipe first, then the set is
        resumed, so the ranks wake with it waiting and run their calls with nothing to decode. The
        outcome's ``done_us`` and ``report_us``: each rank's done line and report, microseconds
        from the resume (read as they land: the wait looks at the pipes, it does not sleep)."""
        return self.fire_tagged(self.fire_tag(), blank, timeout_s, poll_s, answered)

    def fire_tag(self) -> str:
        return f"fire.{next(self._tags)}.{secrets.token_hex(6)}"  # unpredictable, as a command's

    def fire_tagged(self, tag: str, blank: bool, timeout_s: float, poll_s: float = POLL_S,
                    answered=None) -> StepOutcome:
        """:meth:`fire` under ``tag`` (a spread set's, the same on every node)."""
        started = time.monotonic()
        self.fire_lines(tag, blank)
        t0 = time.perf_counter()
        self.thaw()
        out = self.wait(tag, started + timeout_s, since=started, poll_s=poll_s, kind=RegionReport, answered=answered)
        self.fired(tag, t0, out)
        return out

    def fire_lines(self, tag: str, blank: bool) -> None:
        """The fire line of ``tag`` in every rank's pipe (the set stopped)."""
        line = protocol.go_line(tag, blank)
        for pipe in self._pipes:
            try:
                pipe.write(line)
                pipe.flush()
            except (BrokenPipeError, OSError, ValueError):
                pass  # a dead rank: the wait that follows reports it

    def fired(self, tag: str, t0: float, out: StepOutcome) -> None:
        """``out``'s done and report times, microseconds from ``t0`` (this node's clock)."""
        out.resumed = t0
        for rank in self.ranks:
            at = self._reports[rank].done.pop(tag, None)
            if at is not None:
                out.done_us[rank] = (at - t0) * 1e6
            if rank in out.arrived:
                out.report_us[rank] = (out.arrived[rank] - t0) * 1e6

    def collect(self, tag: str, out: StepOutcome) -> None:
        """One look at each rank not yet accounted for in ``out``: its report, or (at most every
        EXIT_POLL_S: a region polls much faster) its death."""
        gone = self.proc.poll() is not None
        now = time.monotonic()
        deaths = gone or now - self._exits_seen >= EXIT_POLL_S
        if deaths:
            self._exits_seen = now
        for rank in self.ranks:
            if rank in out.reports or rank in out.dead:
                continue
            report = self._reports[rank].take(tag)
            if report is not None:
                out.reports[rank] = report
                continue
            if not deaths:
                continue
            code = read_exit(self.job_dir, rank)
            if code is None and gone:
                code = self.proc.returncode if self.proc.returncode else -signal.SIGKILL
            if code is not None:
                report = self._reports[rank].take(tag)  # may have landed just now
                if report is not None:
                    out.reports[rank] = report
                else:
                    out.dead[rank] = code

    def phases(self) -> dict[int, str]:
        return {r: self._reports[r].phase for r in self.ranks}

    def wait(self, tag: str, deadline: float, since: float, poll_s: float = POLL_S,
             kind: type[Report] = Report, answered=None) -> StepOutcome:
        return wait_for(tag, self.ranks, lambda out: self.collect(tag, out), self.phases, deadline, since, poll_s,
                        kind, answered, readable=self._readable)

    def _readable(self, timeout_s: float) -> None:
        """Until a report pipe has bytes (or its writer closed it), at most ``timeout_s``."""
        fds = [r.fd for r in self._reports.values() if r.fd >= 0 and not r.eof]
        if not fds:
            time.sleep(timeout_s)
            return
        poller = select.poll()  # not select(): it refuses descriptors numbered 1024 or more
        for fd in fds:
            poller.register(fd, select.POLLIN)
        try:
            poller.poll(max(0.0, timeout_s * 1000))  # rounded up to a millisecond: a report wakes it at once
        except OSError:  # interrupted: the next look says what happened
            pass

    def log_tail(self, rank: int, chars: int = LOG_TAIL_CHARS) -> str:
        try:
            data = (self.job_dir / f"rank{rank}.log").read_bytes()
        except OSError:
            return ""
        return data[-chars:].decode(errors="replace").strip()

    def freeze(self, timeout_s: float) -> bool:
        """Stop every process of the sandbox (see :mod:`pkb_ray.isolation.freezer`)."""
        return self.freezer.freeze(timeout_s)

    def thaw(self) -> None:
        for lookup in self._shared.values():  # what the processes map may change once they run
            lookup.forget()
        self.freezer.thaw()

    def ran_while_frozen(self) -> str:
        return self.freezer.ran_while_frozen()

    def close(self, grace_s: float = 1.0) -> None:
        """Ask the ranks to exit; kill the sandbox if it is still there."""
        if self.closed:
            return
        self.closed = True
        self.send(Exit())
        try:
            self.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
        self.kill()

    def kill(self) -> None:
        """SIGKILL the sandbox (and every process in it) and reap it (up to 30 s)."""
        self.signal_kill()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        self._slot.close()
        if self._freeze_group is not None:
            self._freeze_group.close()
        self.freezer.close()
        for lookup in self._shared.values():
            lookup.close()
        self._shared = {}
        for pipe in self._pipes:
            try:
                pipe.close()
            except OSError:
                pass
        for reader in self._reports.values():
            reader.close()
        self._store = None  # closes the rendezvous server

    def signal_kill(self) -> None:
        """SIGKILL the sandbox's process session now, without waiting for it to go. In a sandbox
        that takes everything inside with it (its PID namespace ends); without one, processes
        that left the session survive (isolation ``none`` is for debugging)."""
        self.closed = True
        if isinstance(self.proc, Forked):
            self.proc.send_kill()
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

