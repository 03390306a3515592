"""The one reader of other processes' ``/proc``: the freezer, the reaper, the trusted side's memory
reads and the sandbox's probes all go through here.

Reads are plain system calls, no file objects: a freeze reads a few files per task, and every timed
region ends with one. A process or task that is gone reads as '' / None / an empty list, never an
exception: the callers decide what a vanished process means.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
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


class _ProcmapQuery(ctypes.Structure):  # struct procmap_query of <linux/fs.h> (Linux 6.11+)
    _fields_ = [("size", ctypes.c_uint64), ("query_flags", ctypes.c_uint64), ("query_addr", ctypes.c_uint64),
                ("vma_start", ctypes.c_uint64), ("vma_end", ctypes.c_uint64), ("vma_flags", ctypes.c_uint64),
                ("vma_page_size", ctypes.c_uint64), ("vma_offset", ctypes.c_uint64), ("inode", ctypes.c_uint64),
                ("dev_major", ctypes.c_uint32), ("dev_minor", ctypes.c_uint32), ("vma_name_size", ctypes.c_uint32),
                ("build_id_size", ctypes.c_uint32), ("vma_name_addr", ctypes.c_uint64),
                ("build_id_addr", ctypes.c_uint64)]


PROCMAP_QUERY = 0xC0686611  # _IOWR('f', 17, struct procmap_query)
_VMA_SHARED = 0x08  # PROCMAP_QUERY_VMA_SHARED: the 's' of a maps line (VM_MAYSHARE)
_COVERING_OR_NEXT_VMA = 0x10  # the mapping holding the address, or else the next one above it


class SharedLookup:
    """Which shared mappings of one process overlap an address range, asked of the kernel one range
    at a time: the ``PROCMAP_QUERY`` ioctl on ``/proc/PID/maps`` (Linux 6.11+; a few microseconds
    a query, on a descriptor kept open for the process's life) where the kernel has it, else the
    whole of :func:`shared_mappings`, read once until :meth:`forget` (a torch process has hundreds
    of mappings: ~0.5 ms a read, which before every write of a round's inputs cost the pipeline
    13-16 % of its throughput). The answer holds while the process stays stopped."""

    def __init__(self, pid: int, query: bool = True):
        self.pid = pid
        self._fd: int | None = None
        self._listed: list[Mapping] | None = None  # the text's answer, without the ioctl
        self._query = query  # False: the text only (what an older kernel gives; tests compare both)
        if query:
            try:
                self._fd = os.open(f"/proc/{pid}/maps", os.O_RDONLY)
            except OSError:
                self._query = False

    def overlapping(self, start: int, end: int) -> list[Mapping]:
        """The shared mappings that overlap ``[start, end)``, in address order."""
        if self._query and self._fd is not None:
            try:
                return self._ask(start, end)
            except OSError as exc:
                if exc.errno not in (errno.ENOTTY, errno.EINVAL, errno.EOPNOTSUPP):
                    raise  # the process is gone, or its address space (an exec): the caller decides
                self._query = False  # an older kernel: the text from here on
        if self._listed is None:
            self._listed = shared_mappings(self.pid)
        return [m for m in self._listed if m.start < end and start < m.end]

    def _ask(self, start: int, end: int) -> list[Mapping]:
        found, addr = [], start
        name = ctypes.create_string_buffer(4096)
        while addr < end:
            q = _ProcmapQuery(size=ctypes.sizeof(_ProcmapQuery), query_flags=_COVERING_OR_NEXT_VMA, query_addr=addr,
                              vma_name_size=len(name), vma_name_addr=ctypes.addressof(name))
            try:
                fcntl.ioctl(self._fd, PROCMAP_QUERY, q)
            except OSError as exc:
                if exc.errno == errno.ENOENT:  # nothing mapped at or above addr
                    break
                raise
            if q.vma_start >= end:
                break
            if q.vma_flags & _VMA_SHARED:
                found.append(Mapping(q.vma_start, q.vma_end, name.value.decode(errors="replace")))
            addr = q.vma_end
        return found

    def forget(self) -> None:
        """The process may have run: a list read from the text is stale (the ioctl asks anew)."""
        self._listed = None

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def memory_path(pid: int) -> str:
    """Where ``pid``'s memory is read and written (with ptrace-level permission over it)."""
    return f"/proc/{pid}/mem"
