"""Stopping every process of a candidate's sandbox, proving that they stopped, and resuming them.

With a cgroup of its own (a full slot, :class:`pkb_ray.isolation.sandbox.CgroupSlot`, or one for
freezing alone, :mod:`pkb_ray.isolation.freeze_group`) the sandbox is frozen by the cgroup freezer
(``cgroup.freeze``), which holds every task, those it forks too, until thawed, and says so
(``frozen 1`` in ``cgroup.events``). Without one, every process below
the sandbox's first process gets SIGSTOP, found by walking its descendants in /proc (a process that
double-forks is re-parented to the sandbox's PID namespace's init, which is below it too).

Signals alone prove nothing: a process not yet stopped can SIGCONT one that is (two helpers that
resume each other keep running). So :meth:`Freezer.freeze` returns True only after one pass over
every task (thread) of every process below the root sees each one stopped (``T``/``t``) or dead,
re-signalling what it finds running, within a deadline; a pair that keeps resuming each other is
never seen stopped in one pass, and the freeze fails.

A process found running while the freeze is under way (a peer's SIGCONT, a timer of its own
that the kernel fires with SIGCONT) is signalled again, leaders included, until one pass sees every
task stopped or the deadline passes.

A pass reads each task at a different moment, so a task seen stopped could still be resumed by one
read later that had not stopped yet, and the kernel itself can resume a stopped process (a POSIX
timer armed with SIGCONT, an I/O signal set to SIGCONT) with no task of the set running. To prove
that nothing ran while stopped, :meth:`Freezer.ran_while_frozen` looks at the whole set against
what it was when the freeze was proven: a process or a thread that did not exist then (only a task
that ran can start one), a process whose whole CPU time grew (``/proc/PID/stat``: every thread's,
those that ended since included, in clock ticks), or a task whose own CPU time grew
(``/proc/PID/task/TID/schedstat``, nanoseconds) escaped, whatever the route. :data:`RAN_SLACK_NS`
and :data:`RAN_SLACK_TICKS` allow for the accounting of the context switch into the stop, which
the kernel may book just after the task shows as stopped.

Nothing stops GPU work already queued: the parent freezes a set only after its step reported
(every stream of its device synchronised), and whatever a sample left running on the device
shows up as a reference slower than its quiet baseline (:mod:`pkb_ray.evaluate.interference`).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from pkb_ray.isolation import procfs
from pkb_ray.isolation.procfs import cpu_ns, descendants, process_cpu_ticks, tasks

STOPPED_STATES = {"T", "t", "Z", "X"}  # stopped, stopped by a tracer, dead (exited, not yet reaped)
RAN_SLACK_NS = 200_000  # CPU time a task may still be booked after it shows as stopped
RAN_SLACK_TICKS = 1  # a process's whole CPU time is counted in ticks: the booked remainder may cross one
STOP_POLL_S = 0.00005  # between looks at signalled processes
TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def task_state(pid: int, tid: str) -> str:
    """A task's scheduler state letter ('' when it is gone)."""
    st = procfs.stat(pid, tid)
    return st.state if st else ""


class Freezer:
    """Stops and resumes the processes of one sandbox: those below ``root`` (its first process)."""

    def __init__(self, root: int, cgroup: Path | None = None):
        self.root = root
        self.cgroup = cgroup if cgroup is not None and (cgroup / "cgroup.freeze").exists() else None
        self.frozen = False
        # every process found below the root so far, by pid, with a pidfd: a signal through it never
        # reaches another process that got the pid of one that exited
        self._known: dict[int, int] = {}
        self._cpu: dict[tuple[int, str], int] = {}  # each task's CPU time when the freeze was proven
        self._ticks: dict[int, int] = {}  # each process's CPU time (all its tasks ever) then

    def use_cgroup(self, cgroup: Path) -> None:
        """Freeze through ``cgroup`` from now on: the set's processes were moved into it (a
        :class:`pkb_ray.isolation.freeze_group.FreezeGroup`). Only while thawed."""
        if not self.frozen and (cgroup / "cgroup.freeze").exists():
            self.cgroup = cgroup

    @property
    def how(self) -> str:
        return "cgroup freezer" if self.cgroup else "SIGSTOP"

    @property
    def stopped(self) -> list[int]:
        """The processes the last freeze stopped (and proved stopped)."""
        return list(self._known) if self.frozen else []

    def freeze(self, timeout_s: float) -> bool:
        """Stop every process of the sandbox and see each stopped; False if that was not seen within
        ``timeout_s``. Without a cgroup: every process known from earlier freezes is signalled at
        once; then passes over their tasks until one sees each stopped (re-signalling what still
        runs), and one walk below the root for processes not known yet. Only a running process can
        start another, so when the walk after such a pass finds none new, the set is whole and
        stopped; :meth:`ran_while_frozen` later proves it stayed so."""
        self.frozen = True
        deadline = time.monotonic() + timeout_s
        if self.cgroup is not None:
            (self.cgroup / "cgroup.freeze").write_text("1")
            while "frozen 1" not in procfs.read(self.cgroup / "cgroup.events"):
                if time.monotonic() > deadline:
                    return False
                time.sleep(0.0005)
            return True
        self._stop([*self._known] or descendants(self.root))
        while True:
            # a signalled thread stops only once it is scheduled: on a busy machine, looking at
            # once would take the CPU it needs
            time.sleep(STOP_POLL_S)
            running = self._running_leaders()
            if running:  # resumed since its signal (a peer's SIGCONT, a timer's): stopped again
                self._stop(running)
            elif self._all_stopped():
                found = [p for p in descendants(self.root) if p not in self._known]
                if not found:
                    self._cpu = self._cpu_times()
                    self._ticks = {pid: t for pid in self._known if (t := process_cpu_ticks(pid)) is not None}
                    return True
                self._stop(found)
            if time.monotonic() > deadline:
                return False

    def _stop(self, pids: list[int]) -> None:
        for pid in pids:
            if pid not in self._known:
                try:
                    self._known[pid] = os.pidfd_open(pid)
                except OSError:  # gone already
                    continue
            if not self._send(pid, signal.SIGSTOP):
                os.close(self._known.pop(pid))

    def _send(self, pid: int, sig: int) -> bool:
        """``sig`` to a known process through its pidfd; False when it has exited."""
        try:
            signal.pidfd_send_signal(self._known[pid], sig)
            return True
        except ProcessLookupError:
            return False
        except PermissionError:
            return True  # not ours to signal (it changed its credentials): the pass finds it running

    def _running_leaders(self) -> list[int]:
        """The known processes whose first thread does not show stopped (or gone): one read a process."""
        return [pid for pid in self._known if task_state(pid, str(pid)) not in STOPPED_STATES | {""}]

    def _all_stopped(self) -> bool:
        """One pass over every task of every known process: True when each is stopped or gone.
        What still runs is signalled again (it may have been resumed since)."""
        still = {pid for pid in self._known for tid in tasks(pid)
                 if task_state(pid, tid) not in STOPPED_STATES | {""}}
        self._stop(list(still))
        return not still

    def _cpu_times(self) -> dict[tuple[int, str], int]:
        """Every task's CPU time, read after the pass that proved them stopped: a task shows as
        stopped a moment before the switch away from it books its last slice (up to a scheduler
        tick), so a time read in that pass could be short by a tick's worth."""
        return {(pid, tid): ns for pid in self._known for tid in tasks(pid)
                if (ns := cpu_ns(pid, tid)) is not None}

    def ran_while_frozen(self) -> str:
        """Why some task of the set ran since the freeze was proven ("" when none did): call it
        before :meth:`thaw`. No walk for new processes: when the freeze was proven every process
        below the root was known and stopped, and only a task that ran could have started one."""
        if not self.frozen or self.cgroup is not None:
            return ""
        born = [p for p in descendants(self.root) if p not in self._known]
        if born:  # only a task that ran can start a process
            return f"process {born[0]} started while its set was stopped"
        for pid in self._known:
            new = [tid for tid in tasks(pid) if (pid, tid) not in self._cpu]
            if new:  # likewise a thread: one a timer's signal woke, say, that spins where no recorded task did
                return f"process {pid} started task {new[0]} while its set was stopped"
        for pid, before in self._ticks.items():  # threads that ran and ended since count here
            now = process_cpu_ticks(pid)
            if now is not None and now > before + RAN_SLACK_TICKS:
                return (f"process {pid} used {(now - before) * 1000 // TICKS_PER_S} ms of CPU while its set was "
                        "stopped")
        for (pid, tid), before in self._cpu.items():
            now = cpu_ns(pid, tid)
            if now is not None and now > before + RAN_SLACK_NS:
                return f"process {pid} (task {tid}) ran {(now - before) / 1e3:.0f} us while its set was stopped"
        return ""

    def thaw(self) -> None:
        if not self.frozen:
            return
        self.frozen = False
        if self.cgroup is not None:
            (self.cgroup / "cgroup.freeze").write_text("0")
            return
        # the last found first: the ranks, below the sandbox's init and launcher, wake soonest
        for pid in reversed(list(self._known)):
            if not self._send(pid, signal.SIGCONT):
                os.close(self._known.pop(pid))
        self._cpu, self._ticks = {}, {}

    def close(self) -> None:
        """Let go of the pidfds (the set is gone)."""
        for fd in self._known.values():
            os.close(fd)
        self._known = {}
