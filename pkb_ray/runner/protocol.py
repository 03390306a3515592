"""The file contract between a rank process and the parent that started it.

The parent sends one JSON line per step on the rank's command pipe. The rank answers each step
with ``rank<R>.<tag>.json`` (tag: the step's name, or the command's ``tag``) in the job directory, written to a temporary name and renamed, so
a report is either absent or complete. Tensors go through :mod:`pkb_ray.runner.tensor_io` files
named by :func:`tensor_file`. ``rank<R>.phase`` holds what the rank is doing now, for timeout messages.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from pkb_ray.names import Side

__all__ = ["Side", "Step", "StepFailed", "read_report", "write_report", "tensor_file", "set_phase", "read_phase"]


class Step:
    """The steps a rank runs: a command's ``step``, and the name of its report."""

    READY = "ready"  # the report a rank writes once its process group is up (not a command)
    REFERENCE = "reference"  # compute the reference outputs (clean ranks)
    TRIALS = "trials"  # the candidate on each trial seed
    REGION = "region"  # one timed region of k back-to-back calls (see pkb_ray.rounds)
    KEEP = "keep"  # keep one timed call's outputs for the check
    CAPTURE = "capture"  # capture one side's k calls into a CUDA graph (graph timing mode)
    CHECK_TRIALS = "check_trials"  # compare the candidate's trial outputs with the references (clean ranks)
    CHECK_TIMED = "check_timed"  # the same for the timed calls kept
    EXIT = "exit"


class StepFailed(Exception):
    """A step ends with a named status (import_error, runtime_error) and a message."""

    def __init__(self, status: str, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


def report_path(job_dir: Path, rank: int, step: str) -> Path:
    return job_dir / f"rank{rank}.{step}.json"


def write_report(job_dir: Path, rank: int, step: str, report: dict[str, Any]) -> None:
    path = report_path(job_dir, rank, step)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(report))
    os.replace(tmp, path)


def read_report(job_dir: Path, rank: int, step: str) -> dict[str, Any] | None:
    path = report_path(job_dir, rank, step)
    if not path.exists():
        return None
    try:
        report = json.loads(path.read_text())
    except (OSError, ValueError) as exc:  # the folder is the rank's: anything can be in it
        return {"status": "unreadable_report", "message": f"{path.name}: {exc}"}
    return report if isinstance(report, dict) else {"status": "unreadable_report", "message": f"{path.name}: not an object"}


def tensor_file(directory: Path, seed: int, rank: int) -> Path:
    return directory / f"seed{seed}.rank{rank}.tensors"


def phase_path(job_dir: Path, rank: int) -> Path:
    return job_dir / f"rank{rank}.phase"


def set_phase(job_dir: Path, rank: int, phase: str) -> None:
    phase_path(job_dir, rank).write_text(phase)


def read_phase(job_dir: Path, rank: int) -> str:
    try:
        return phase_path(job_dir, rank).read_text()
    except OSError:
        return "starting"
