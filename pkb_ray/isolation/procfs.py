"""The one reader of other processes' ``/proc``: the freezer, the reaper, the trusted side's memory
reads and the sandbox's probes all go through here.

Reads are plain system calls, no file objects: a freeze reads a few files per task, and every timed
region ends with one. A process or task that is gone reads as '' / None / an empty list, never an
exception: the callers decide what a vanished process means.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Stat:
    """The fields of ``/proc/PID[/task/TID]/stat`` the evaluator uses."""

    state: str  # the scheduler's letter: R running, S sleeping, T stopped, Z zombie, ...
    ppid: int
    start_ticks: int  # when the process started, in clock ticks since boot: tells a reused pid apart


def read(path: str | Path, limit: int = 4096) -> str:
    """A small /proc file's text ('' when it is gone or unreadable)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return ""
    try:
        return os.read(fd, limit).decode(errors="replace")
    except OSError:
        return ""
    finally:
        os.close(fd)


def stat(pid: int, tid: int | str | None = None) -> Stat | None:
    """A process's (or one of its tasks') stat, None when it is gone."""
    text = read(f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat")
    if not text:
        return None
    fields = text[text.rfind(")") + 2:].split()  # the command name may hold spaces and parentheses
    return Stat(state=fields[0], ppid=int(fields[1]), start_ticks=int(fields[19]))


def pids() -> list[int]:
    """Every process visible here."""
    return [int(e.name) for e in os.scandir("/proc") if e.name.isdigit()]


def table() -> dict[int, Stat]:
    """Every visible process's stat, by pid."""
    found = {}
    for pid in pids():
        st = stat(pid)
        if st is not None:
            found[pid] = st
    return found


def tasks(pid: int) -> list[str]:
    """The thread ids of ``pid`` (empty when it is gone)."""
    try:
        return os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []


def descendants(root: int) -> list[int]:
    """Every process below ``root`` (not ``root`` itself): from the kernel's per-thread lists of
    children where it keeps them (CONFIG_PROC_CHILDREN), else from one walk of /proc."""
    if not os.path.exists(f"/proc/{root}/task/{root}/children"):
        return below({root}, table())
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        for task in tasks(pid):
            kids = [int(k) for k in read(f"/proc/{pid}/task/{task}/children").split()]
            found += kids
            todo += kids
    return found


def below(roots: set[int], processes: dict[int, Stat]) -> list[int]:
    """The processes of ``processes`` below ``roots`` (roots excluded), parents before children."""
    children: dict[int, list[int]] = {}
    for pid, st in processes.items():
        children.setdefault(st.ppid, []).append(pid)
    found, seen, todo = [], set(roots), list(roots)
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in seen:
                seen.add(child)
                found.append(child)
                todo.append(child)
    return found


def cpu_ns(pid: int, tid: int | str) -> int | None:
    """Nanoseconds the task has run on a CPU (None when it is gone)."""
    text = read(f"/proc/{pid}/task/{tid}/schedstat")
    return int(text.split()[0]) if text else None


def process_cpu_ticks(pid: int) -> int | None:
    """Clock ticks (USER_HZ) of CPU the whole process has used: every thread's, those that ended
    included, and its reaped children's (utime + stime + cutime + cstime); None when it is gone."""
    text = read(f"/proc/{pid}/stat")
    if not text:
        return None
    fields = text[text.rfind(")") + 2:].split()
    return sum(int(f) for f in fields[11:15])


def inner_pid(pid: int) -> int | None:
    """``pid`` as the innermost PID namespace it lives in numbers it (the last of ``NSpid``)."""
    line = next((ln for ln in read(f"/proc/{pid}/status", 1 << 14).splitlines() if ln.startswith("NSpid:")), "")
    ids = line.split()[1:]
    return int(ids[-1]) if ids else None


@dataclass(frozen=True)
class Mapping:
    """One line of ``/proc/PID/maps``: an address range other processes can share (MAP_SHARED)."""

    start: int
    end: int
    path: str  # the file mapped ('/memfd:x (deleted)', '/dev/shm/...', '/dev/zero (deleted)', ...)


# the permissions of a shared mapping's line ('rw-s'), between the range and the offset
_SHARED_PERMS = re.compile(r" [r-][w-][x-]s ")


def shared_mappings(pid: int) -> list[Mapping]:
    """The mappings of ``pid``'s address space that other processes can map too, in address order
    (empty when it has none, or is gone). Only the lines whose permissions say shared are parsed:
    a torch process has hundreds of private mappings, and the trusted side looks before every
    write of a round's inputs."""
    try:
        fd = os.open(f"/proc/{pid}/maps", os.O_RDONLY)
    except OSError:
        return []
    chunks = []
    try:
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
    except OSError:
        return []
    finally:
        os.close(fd)
    text = b"".join(chunks).decode(errors="replace")
    found = []
    for m in _SHARED_PERMS.finditer(text):  # few lines match: each is parsed whole
        begin = text.rfind("\n", 0, m.start()) + 1
        end = text.find("\n", m.end())
        fields = text[begin:end if end >= 0 else len(text)].split(None, 5)
        if len(fields) < 5 or fields[1][3:4] != "s":
            continue
        lo, _, hi = fields[0].partition("-")
        found.append(Mapping(int(lo, 16), int(hi, 16), fields[5] if len(fields) > 5 else ""))
    return found


def memory_path(pid: int) -> str:
    """Where ``pid``'s memory is read and written (with ptrace-level permission over it)."""
    return f"/proc/{pid}/mem"
