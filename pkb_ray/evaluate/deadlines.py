"""Deadlines no sample can stretch: one per sample, every wait of the parent bounded by it.

A sample gets ``eval.timeout_s`` (plus ``eval.inline_build_timeout_s`` when it builds extensions
on its ranks, and ``eval.torch_compile_timeout_s`` when it uses torch.compile: :func:`uses_torch_compile`)
from the moment its trials start, for everything its own processes do: trials,
warmup, calibration, every timed region. The evaluator's own steps for it (the clean set's
reference regions and checks, freezing and resuming its processes) end by that deadline plus
:data:`MARGIN_S`. Each wait takes the smaller of its own limit and what is left
(:meth:`Deadline.left`), so a sample whose every step stays just inside a per-step limit still
ends at its deadline. Pure: no processes.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field

MARGIN_S = 10.0  # what the evaluator's own waits for a sample may take beyond the sample's deadline
# the gang pool's watch: a gang whose sample is past its deadline by this much is silent, and restarted
WATCH_MARGIN_S = 30.0


# torch.compile and the modules behind it, however imported: compiling is the first calls' work, on the rank
_TORCH_COMPILE = re.compile(r"\btorch\s*\.\s*(compile|_dynamo|_inductor)\b"
                            r"|\bfrom\s+torch\s+import\s+[^\n]*\b(compile|_dynamo|_inductor)\b"
                            r"|\bimport\s+torch\.(_dynamo|_inductor)\b")


def uses_torch_compile(source: str) -> bool:
    """Whether a sample's source names torch.compile (its time budget grows by
    ``eval.torch_compile_timeout_s``). Only a budget: a sample that names it without using it gets
    more time for itself, nothing else."""
    return bool(_TORCH_COMPILE.search(source))


@dataclass
class Deadline:
    """A point in time (``time.monotonic``) by which a sample's processes must be done."""

    at: float
    started: float = field(default_factory=time.monotonic)

    @classmethod
    def after(cls, seconds: float) -> "Deadline":
        now = time.monotonic()
        return cls(at=now + seconds, started=now)

    def left(self, limit: float | None = None, margin: float = 0.0) -> float:
        """Seconds left (never negative), at most ``limit``; ``margin`` for the evaluator's own waits."""
        left = max(0.0, self.at + margin - time.monotonic())
        return left if limit is None else min(limit, left)

    @property
    def passed(self) -> bool:
        return time.monotonic() >= self.at

    @property
    def budget_s(self) -> float:
        return self.at - self.started
