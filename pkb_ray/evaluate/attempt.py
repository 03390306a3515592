"""The records one evaluation passes around: what is evaluated (:class:`Subject`) and what one
attempt at it found (:class:`Attempt`), typed, so that the harness, its steps and the interference
screen hand each other fields rather than string-keyed dicts."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from pkb_ray.evaluate.rounds import Timing
from pkb_ray.evaluate.verdict import Evidence, Verdict
from pkb_ray.problem import Problem
from pkb_ray.spec.schema import Sample, TrialRecord
from pkb_ray.spec.wire import Case


@dataclass(frozen=True)
class Subject:
    """One sample at one dtype and size: what an attempt evaluates."""

    sample: Sample
    problem: Problem
    dtype: str
    knobs: dict[str, Any]

    @property
    def case(self) -> Case:
        """The problem, dtype and size as the rank processes get them."""
        return Case(problem_path=str(self.problem.path), dtype=self.dtype, size=self.knobs)

    @property
    def key(self) -> tuple[str, str, str]:
        """Which reference this is (the quiet baselines are kept by it)."""
        return self.problem.id, self.dtype, json.dumps(self.knobs, sort_keys=True)

    def honest_copy(self) -> "Subject | None":
        """The same problem, dtype and size with the problem's own source as the sample (None for a
        problem without a source to copy)."""
        try:
            source = self.problem.source()
        except (OSError, ValueError):
            return None
        copy = Sample(problem_id=self.problem.id, model="(interference baseline)", sample_index=0, source=source)
        return Subject(copy, self.problem, self.dtype, self.knobs)


@dataclass
class Timed:
    """A correct sample's times, speedup and speed of light, as the result's columns name them."""

    ref_median_us: list[float]
    ref_iqr_us: list[float]
    cand_median_us: list[float]
    cand_iqr_us: list[float]
    ref_time_us: float
    cand_time_us: float
    speedup: float | None
    speedup_lo: float | None
    speedup_hi: float | None
    sol_time_us: float | None
    sol_fraction: float | None
    sol_source: str
    timed_seconds: float
    timing_mode: str
    calls_per_round: int
    timed_rounds: int
    graph_error: str
    by_mode: dict[str, float] = field(default_factory=dict)  # "<mode>_<side>_time_us" with timing_mode=both


@dataclass
class Attempt:
    """One evaluation on a fresh candidate rank set: the evidence, the verdict it gave, and what the
    result row takes from it."""

    evidence: Evidence | None
    verdict: Verdict
    trials: list[TrialRecord] = field(default_factory=list)
    timed: Timed | None = None
    timing: Timing | None = None  # the rounds' regions (the interference screen reads the reference's)
    second: dict[str, bool] = field(default_factory=dict)  # a format's second rule: its column -> passed
    rank_builds: int | None = None  # extensions built on the ranks (a format that builds them)
    message_bytes: int | None = None

    def columns(self) -> dict[str, Any]:
        """The result's fields that this attempt decides, besides status and message."""
        out: dict[str, Any] = {"trials": self.trials, **self.second}
        if self.timed is not None:
            timed = dict(vars(self.timed))
            out.update(timed.pop("by_mode"), **timed)
        if self.rank_builds is not None:
            out["rank_builds"] = self.rank_builds
        if self.message_bytes is not None:
            out["message_bytes"] = self.message_bytes
        return out
