"""The contract between a rank process and the parent that started it.

The parent sends one command per step on the rank's command pipe, a JSON line of a
:mod:`pkb_ray.spec.wire` record. The rank answers on its report pipe, one JSON line per message:
``{"tag": ..., "report": {...}}`` when a step ends (tag: the command's, unpredictable, so no report
can be written ahead of its command), and ``{"phase": ...}`` when it starts something (what it was
doing, for timeout messages).

A timed region is fired, not commanded: a rank armed with it (a ``region`` command with ``fire``,
:mod:`pkb_ray.runner.firing`) waits for a plain line ``go TAG`` (or ``blank TAG``: the same with
no calls, which times the region's fixed work) on its command pipe, written while its set is
stopped, and the first thing it sends after its calls (and the device's synchronisation) is
``{"done": TAG}``; the region's report follows under TAG. The parent's clock runs from resuming
the set to that line (:mod:`pkb_ray.measure.timing`).

The parent reads the messages with a :class:`ReportReader`; a line that is not a message becomes
an ``unreadable_report``, and so does a report that is not the step's record
(:func:`pkb_ray.spec.wire.parse_report`): the verdict calls both tampering. Pipes rather than
files: on a VM's disk a file written, renamed and read costs ~0.7 ms, and its cost varies with the
folder, so two rank sets with folders of their own would pay differently for the same region.
Tensors go through :mod:`pkb_ray.runner.tensor_io` files named by :func:`tensor_file`.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from pkb_ray.spec.names import Side
from pkb_ray.spec.wire import Step

__all__ = ["Side", "Step", "StepFailed", "ReportReader", "use_report_pipe", "write_report", "set_phase",
           "tensor_file", "go_line", "parse_go", "mark_done"]

GO, BLANK = "go", "blank"  # the first word of a fire line: the armed region's calls, or none of them


class _ReportPipe:
    """The rank's end of its report pipe, once :func:`use_report_pipe` named it."""

    def __init__(self) -> None:
        self.fd: int | None = None


_report_pipe = _ReportPipe()


class StepFailed(Exception):
    """A step ends with a named status (import_error, runtime_error) and a message."""

    def __init__(self, status: str, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


def tensor_file(directory: Path, seed: int, rank: int) -> Path:
    return directory / f"seed{seed}.rank{rank}.tensors"


def use_report_pipe(fd: int) -> None:
    """In a rank: send reports and phases down ``fd`` (not inherited by what the rank starts)."""
    os.set_inheritable(fd, False)
    _report_pipe.fd = fd


def deliver(message: dict[str, Any]) -> None:
    """One JSON line down the report pipe, whole (a line under PIPE_BUF is one atomic write)."""
    data = (json.dumps(message) + "\n").encode()
    while data:
        data = data[os.write(_report_pipe.fd, data):]


def write_report(step: str, report: dict[str, Any]) -> None:
    deliver({"tag": step, "report": report})


def set_phase(phase: str) -> None:
    deliver({"phase": phase})


def go_line(tag: str, blank: bool = False) -> bytes:
    """The line that fires an armed rank's region (``blank``: with no calls)."""
    return f"{BLANK if blank else GO} {tag}\n".encode()


def parse_go(line: str) -> tuple[str, bool] | None:
    """(tag, blank) of a fire line; None for any other line (a JSON command)."""
    word, _, tag = line.strip().partition(" ")
    return (tag, word == BLANK) if word in (GO, BLANK) and tag else None


def mark_done(tag: str) -> None:
    """The fired region's calls are done: the parent's clock stops where it reads this line."""
    os.write(_report_pipe.fd, b'{"done": "%s"}\n' % tag.encode())


class ReportReader:
    """The parent's end of one rank's report pipe, read without blocking."""

    MAX_PENDING = 256 << 20  # bytes without a line end: more is a flood, not a report

    def __init__(self, fd: int):
        os.set_blocking(fd, False)
        self.fd = fd
        self.phase = "starting"
        self.eof = False
        self._reports: dict[str, dict[str, Any]] = {}
        self.done: dict[str, float] = {}  # fire tag -> time.perf_counter() when its done line was read
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._garbage = ""

    def take(self, tag: str) -> dict[str, Any] | None:
        """The report of ``tag`` once it came; an ``unreadable_report`` once garbage came."""
        self.poll()
        if tag == Step.READY:  # asked again whenever a set is waited for (prewarmed, then taken)
            found = self._reports.get(tag)
            if found is not None:
                return found
        elif tag in self._reports:
            return self._reports.pop(tag)  # a step's report is read once: a clean set's would pile up
        if self._garbage:
            return {"status": "unreadable_report", "message": self._garbage}
        return None

    def poll(self) -> None:
        while not self.eof and self.fd >= 0:
            try:
                chunk = os.read(self.fd, 1 << 20)
            except BlockingIOError:
                break
            except OSError:
                chunk = b""
            if not chunk:
                self.eof = True
                break
            self._add(chunk)

    def _add(self, chunk: bytes) -> None:
        *lines, rest = chunk.split(b"\n")
        if lines:
            self._line(b"".join(self._pending) + lines[0])
            for line in lines[1:]:
                self._line(line)
            self._pending, self._pending_bytes = [], 0
        if rest:
            self._pending.append(rest)
            self._pending_bytes += len(rest)
            if self._pending_bytes > self.MAX_PENDING:
                self._garbage = f"more than {self.MAX_PENDING >> 20} MiB on the report pipe without a line end"
                self._pending, self._pending_bytes = [], 0

    def _line(self, line: bytes) -> None:
        try:
            message = json.loads(line)
        except ValueError:
            message = None
        if isinstance(message, dict) and isinstance(message.get("done"), str) and len(message) == 1:
            self.done.setdefault(message["done"], time.perf_counter())  # the first: a repeat changes nothing
        elif isinstance(message, dict) and isinstance(message.get("phase"), str):
            self.phase = message["phase"][:500]
        elif isinstance(message, dict) and isinstance(message.get("tag"), str) and isinstance(message.get("report"), dict):
            if message["tag"] == Step.READY and Step.READY in self._reports:
                return  # the first is the rank's own, written before any candidate was imported: kept
            self._reports[message["tag"]] = message["report"]
        else:
            self._garbage = f"a line on the report pipe that is not a report: {line[:200]!r}"

    def close(self) -> None:
        """Close the pipe, once: a second os.close could close a descriptor reused since."""
        fd, self.fd, self.eof = self.fd, -1, True
        if fd >= 0:
            try:
                os.close(fd)
            except OSError:
                pass
