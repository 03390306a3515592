"""Stopping every process of a candidate's sandbox while the reference is timed, and resuming them.

With a cgroup of its own (``PKB_CGROUP_PARENT``, :class:`pkb_ray.sandbox.CgroupSlot`) the sandbox
is frozen by the cgroup freezer (``cgroup.freeze``), which holds every task, those it forks too,
until thawed. Without one, every process below the sandbox's first process gets SIGSTOP, found
by walking its descendants in /proc (a process that double-forks is re-parented to the sandbox's PID namespace's
init, which is below it too), until a walk finds none not yet signalled; SIGCONT resumes them.
A stopped process cannot catch, block or ignore either signal, and none of its threads runs its
own code again once the signal is pending (the kernel checks before every return to user mode;
a thread on a CPU is interrupted): waiting for each of its many threads to be scheduled just to
park would cost milliseconds on a loaded machine and stop nothing more.

Nothing stops GPU work already queued: the parent freezes a set only after its step reported
(every stream of its device synchronised), and whatever a sample left running on the device
shows up as a reference slower than its quiet baseline (:mod:`pkb_ray.interference`).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path



def descendants(root: int) -> list[int]:
    """Every process below ``root`` (not ``root`` itself): from the kernel's per-thread lists of
    children where it keeps them (CONFIG_PROC_CHILDREN), else from one walk of /proc."""
    if not os.path.exists(f"/proc/{root}/task/{root}/children"):
        return _walk(root)
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue  # gone
        for task in tasks:
            try:
                with open(f"/proc/{pid}/task/{task}/children") as f:
                    kids = [int(k) for k in f.read().split()]
            except OSError:
                continue
            found += kids
            todo += kids
    return found


def _walk(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        parent = _parent(int(entry.name))
        if parent is not None:
            children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        kids = children.get(todo.pop(), [])
        found += kids
        todo += kids
    return found


def _stat(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read()
    except OSError:
        return None


def _parent(pid: int) -> int | None:
    stat = _stat(pid)
    if stat is None:
        return None
    fields = stat[stat.rfind(")") + 2:].split()  # the command name may hold spaces and parentheses
    return int(fields[1])


class Freezer:
    """Stops and resumes the processes of one sandbox: those below ``root`` (its first process)."""

    def __init__(self, root: int, cgroup: Path | None = None):
        self.root = root
        self.cgroup = cgroup if cgroup is not None and (cgroup / "cgroup.freeze").exists() else None
        self.stopped: list[int] = []
        self.frozen = False

    @property
    def how(self) -> str:
        return "cgroup freezer" if self.cgroup else "SIGSTOP"

    def freeze(self, timeout_s: float) -> bool:
        """Stop every process of the sandbox; False if some still ran after ``timeout_s``."""
        self.frozen = True
        deadline = time.monotonic() + timeout_s
        if self.cgroup is not None:
            (self.cgroup / "cgroup.freeze").write_text("1")
            while "frozen 1" not in _read(self.cgroup / "cgroup.events"):
                if time.monotonic() > deadline:
                    return False
                time.sleep(0.0005)
            return True
        while True:
            found = [p for p in descendants(self.root) if p not in self.stopped]
            if not found:  # a walk found nothing new, so nothing forked past the signals
                return True
            for pid in found:
                _signal(pid, signal.SIGSTOP)
            self.stopped += found
            if time.monotonic() > deadline:
                return False

    def thaw(self) -> None:
        if not self.frozen:
            return
        self.frozen = False
        if self.cgroup is not None:
            (self.cgroup / "cgroup.freeze").write_text("0")
            return
        for pid in self.stopped:
            _signal(pid, signal.SIGCONT)
        self.stopped = []


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""
