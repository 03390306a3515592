"""The trusted side reading a rank's memory itself: the bytes a verdict rests on never pass through
code that runs in the candidate's process.

A rank reports where its tensors lie (:func:`pkb_ray.measure.correctness.layout`); the parent stops the
rank's set (:mod:`pkb_ray.isolation.freezer`), then reads those bytes through ``/proc/PID/mem`` of the rank's
process, which the kernel allows an ancestor of the same user (and root) to do. The rank's pid on
the host comes from its ``NSpid`` line, matched with the pid it reported in its ready report,
before any candidate was imported (:func:`host_pids`). A read that fails (an address that is not
mapped, a process that made itself unreadable) says so: the rank pointed at nothing it made.

CPU tensors only: a GPU's memory is read by the clean rank on that device instead (CUDA IPC).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Callable

import torch

from pkb_ray.isolation import procfs
from pkb_ray.measure.correctness import entry_span, in_allocations
from pkb_ray.runner import tensor_io

MAX_READ_BYTES = 16 << 30  # what one tensor of a rank may ask the parent to read


class Unreadable(OSError):
    """A rank's memory could not be read where it said its tensors lie."""


class SharedMapping(Unreadable):
    """A candidate's tensor lies in memory another process can map (MAP_SHARED): what the trusted
    side wrote there (a timed call's inputs) every rank could read, and what it reads there (an
    output) any rank could have written."""


# shared mappings a tensor may lie in: the GPU driver's (page-locked host memory that torch's
# pin_memory allocates through cudaHostAlloc); no other process can map those pages without the
# driver's IPC, which exports device memory only
DRIVER_MAPPINGS = ("/dev/nvidia",)


def check_private(pid: int, entries: list[list[int]], shared: procfs.SharedLookup | None = None) -> None:
    """Raise :class:`SharedMapping` unless every layout entry of process ``pid`` lies in memory only
    it maps (private mappings: the heap, anonymous memory, a file mapped MAP_PRIVATE). Asked of the
    kernel (``shared``, kept open for the process, or a lookup made for this call) with the process
    stopped: a mapping can only change while it runs."""
    spans = sorted((s, s + n) for s, n in (entry_span(e) for e in entries) if n > 0)
    if not spans:
        return
    lookup = shared or procfs.SharedLookup(pid)
    try:
        for start, end in spans:
            for m in lookup.overlapping(start, end):
                if not m.path.startswith(DRIVER_MAPPINGS):
                    raise SharedMapping(f"a tensor at {start:#x} ({end - start} bytes) lies in a shared mapping "
                                        f"({m.path or 'anonymous'}, {m.start:#x}-{m.end:#x}) that other processes "
                                        "can map")
    except OSError as exc:
        if isinstance(exc, Unreadable):
            raise
        raise Unreadable(f"cannot ask what backs process {pid}'s memory: {exc.strerror}") from None
    finally:
        if shared is None:
            lookup.close()


def host_pids(root: int, inner: dict[int, int]) -> dict[int, int]:
    """rank -> pid on the host, for ranks that reported ``inner`` (rank -> pid as they see it) and
    run below ``root``. Without a PID namespace of their own both are the same."""
    wanted = {pid: rank for rank, pid in inner.items()}
    found = {}
    for pid in [root, *procfs.descendants(root)]:
        inside = procfs.inner_pid(pid)
        if inside in wanted and wanted[inside] not in found:
            found[wanted[inside]] = pid
    return found


@contextlib.contextmanager
def _memory(pid: int, flags: int, doing: str):
    """``/proc/PID/mem`` of ``pid`` open with ``flags``; any failure inside is :class:`Unreadable`."""
    try:
        fd = os.open(procfs.memory_path(pid), flags)
    except OSError as exc:
        raise Unreadable(f"cannot open the memory of process {pid}: {exc.strerror}") from None
    try:
        yield fd
    except Unreadable:
        raise
    except OSError as exc:
        raise Unreadable(f"{doing} process {pid} at a reported address: {exc.strerror}") from None
    finally:
        os.close(fd)


def read_entries(pid: int, entries: list[list[int]], shared: procfs.SharedLookup | None = None) -> list[bytes]:
    """The bytes each layout entry of process ``pid`` covers; given the process's ``shared``
    lookup, only where no entry touches a shared mapping (:func:`check_private`)."""
    if shared is not None:
        check_private(pid, entries, shared)
    out = []
    with _memory(pid, os.O_RDONLY, "reading") as fd:
        for entry in entries:
            start, size = entry_span(entry)
            if not 0 <= size <= MAX_READ_BYTES:
                raise Unreadable(f"a tensor of {size} bytes")
            data = os.pread(fd, size, start) if size else b""
            if len(data) != size:
                raise Unreadable(f"{size} bytes at {start:#x}: only {len(data)} there")
            out.append(data)
    return out


def write_entries(pid: int, entries: list[list[int]], blobs: list[bytes],
                  shared: procfs.SharedLookup | None = None) -> None:
    """``blobs`` written into process ``pid``'s memory, each at its layout entry (of the same size):
    the trusted side filling a rank's staged inputs while its set is stopped; given ``shared``, as
    for :func:`read_entries`."""
    if shared is not None:
        check_private(pid, entries, shared)
    with _memory(pid, os.O_WRONLY, "writing") as fd:
        for entry, blob in zip(entries, blobs, strict=True):
            start, size = entry_span(entry)
            if size != len(blob):
                raise Unreadable(f"{len(blob)} bytes for a tensor of {size} at {start:#x}")
            if size and os.pwrite(fd, blob, start) != size:
                raise Unreadable(f"{size} bytes at {start:#x}: not all written")


def write_capture(path: Path, read: Callable[[list[list[int]]], list[bytes]], outputs: list[list[int]],
                  inputs: list[list[int]], allocations: dict[str, list] | None = None) -> bool:
    """One call's outputs and inputs as the capture the clean rank compares
    (:func:`pkb_ray.runner.clean.read_capture`): where they were, and the bytes of every CPU tensor,
    read now (``read(entries)``, e.g. a rank set's :meth:`~pkb_ray.isolation.ranks.Ranks.read_tensors`). A
    tensor that lies in one of the rank's exported device ``allocations`` (base -> [size, IPC
    handle]) is left for the clean rank on that device to read (``remote``), which it does before
    the rank is resumed. Or why the bytes could not be read. True when something was left so."""
    entries = [*outputs, *inputs]
    remote = in_allocations(entries, allocations)
    try:
        blobs = read([e for i, e in enumerate(entries) if i not in remote]) if len(remote) < len(entries) else []
    except Unreadable as exc:
        tensor_io.write(path, {"error": str(exc)})
        return False
    it = iter(blobs)
    raw = [torch.empty(0, dtype=torch.uint8) if i in remote else
           (torch.frombuffer(bytearray(b), dtype=torch.uint8) if (b := next(it)) else torch.empty(0, dtype=torch.uint8))
           for i in range(len(entries))]
    used = {b: allocations[b] for b in (allocations or {}) if any(_inside(entry_span(entries[i]), [(int(b), int(allocations[b][0]))])
                                                              for i in remote)}
    tensor_io.write(path, {"layout": [outputs, inputs], "outputs": raw[:len(outputs)], "inputs": raw[len(outputs):],
                           "remote": remote, "allocations": used, "error": ""})
    return bool(remote)


def _inside(span: tuple[int, int], table: list[tuple[int, int]]) -> bool:
    start, size = span
    return size > 0 and any(base <= start and start + size <= base + length for base, length in table)
