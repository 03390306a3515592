"""Evaluating one sample on W fresh rank processes: the orchestration, nothing else.

Order of events for one sample (all limits from :class:`pkb_ray.spec.config.EvalConfig`):

1. Keys for the sample's inputs are drawn (:mod:`pkb_ray.measure.keys`: one per rank, one shared), and the
   gang's clean rank set (which never imports a candidate) computes the reference's outputs on the
   trial inputs, into a folder of the sample's that no candidate sees
   (:meth:`~pkb_ray.problems.references.References.for_sample`).
2. A candidate's rank set (fresh, sandboxed; started ahead by :class:`~pkb_ray.isolation.rank_pool.RankPool`)
   imports the candidate and runs the trials, holding what each call returned; with its processes
   stopped, the parent reads those outputs and inputs from the ranks' memory (:mod:`pkb_ray.isolation.memory`),
   and the clean set compares them.
3. Only if every trial on every rank is right: timing, driven region by region from here and timed
   by the parent's clock (:mod:`pkb_ray.evaluate.rounds`); the clean set recomputes the checked timed calls
   and compares.
4. The candidate's rank set is killed (its whole sandbox) whatever happened, and the sample's folder
   removed.
5. A correct sample beside which the reference ran slower than alone is screened further
   (:mod:`pkb_ray.evaluate.screen`).

The steps are :mod:`pkb_ray.evaluate.steps`', the sets' sandboxes :mod:`pkb_ray.evaluate.rank_sets`',
the figures :mod:`pkb_ray.evaluate.figures`'. Every decision is :mod:`pkb_ray.evaluate.verdict`'s. Any
failure becomes a :class:`~pkb_ray.spec.schema.Result` with its status; nothing raises out of
:meth:`Harness.evaluate` for a bad sample.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from pkb_ray.evaluate.attempt import Attempt, Subject
from pkb_ray.evaluate.deadlines import MARGIN_S, Deadline
from pkb_ray.evaluate.figures import PhaseClock, software
from pkb_ray.evaluate.interference import RefTimes
from pkb_ray.evaluate.rank_sets import RankSets
from pkb_ray.evaluate.rounds import CleanSetFailed, RoundDriver
from pkb_ray.evaluate.screen import InterferenceScreen
from pkb_ray.evaluate.steps import SampleSteps
from pkb_ray.isolation.rank_pool import CleanRanks, RankPool
from pkb_ray.isolation.ranks import Ranks
from pkb_ray.measure.keys import InputKeys
from pkb_ray.problem import Problem, Tolerance
from pkb_ray.problems.references import ReferenceFailed, References, base_seeds, trial_seeds
from pkb_ray.spec.config import EvalConfig, HardwareConfig
from pkb_ray.spec.names import EvalPhase
from pkb_ray.spec.schema import Result, Sample, Where
from pkb_ray.spec.wire import Case

__all__ = ["Harness", "ReferenceFailed"]


class Harness:
    """Evaluates samples one at a time on one set of W devices (a gang's worth)."""

    def __init__(self, devices: list[str], eval_cfg: EvalConfig, hardware: HardwareConfig,
                 problems: dict[str, Problem], work_dir: Path, cache_dir: Path,
                 launcher: Callable[..., Ranks] | None = None, private: list[Path] = (), name: str = ""):
        """``launcher``, ``private``: see :class:`~pkb_ray.evaluate.rank_sets.RankSets` (a gang spread
        over nodes passes a :class:`pkb_ray.isolation.spread.SpreadRankSet` maker, ``devices`` then
        listing all W). ``name``: the gang's, in every result."""
        self.devices, self.name, self.cfg, self.hardware, self.problems = devices, name, eval_cfg, hardware, problems
        self.work_dir = Path(work_dir)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.rank_sets = RankSets(devices, eval_cfg, hardware, problems, self.work_dir, Path(cache_dir), launcher,
                                  private)
        self.nodes, self.probe, self.isolation = self.rank_sets.nodes, self.rank_sets.probe, self.rank_sets.isolation
        self.pool = RankPool(self.rank_sets.spawn, self.work_dir, eval_cfg.prewarm, eval_cfg.quiet_timing,
                             eval_cfg.startup_timeout_s)
        self.clean = CleanRanks(self.rank_sets.spawn, self.work_dir, eval_cfg.startup_timeout_s)
        self.references = References(self.clean, eval_cfg.timeout_s)
        self.screen = InterferenceScreen(self._attempt, self._quiet_baseline)
        self.deadline_epoch: float | None = None  # by when (time.time()) this gang answers: the pool's watch
        self.versions = software(hardware)

    def prewarm(self) -> None:
        self.pool.prewarm()

    def close(self) -> None:
        """Kill the prewarmed rank sets and the clean one; wait until every rank process is gone."""
        self.pool.close()
        self.clean.close()
        self.rank_sets.close()

    def evaluate(self, sample: Sample, where: Where | None = None) -> Result:
        """``sample``'s result at ``where``'s size and dtype (by default: eval.size, and eval.dtype or
        the problem's first)."""
        started, t0 = datetime.now(timezone.utc), time.monotonic()
        clock = PhaseClock()
        problem = self.problems[sample.problem_id]
        dtype = (where.dtype if where else "") or self.cfg.dtype or problem.meta.dtypes[0]
        size_label, knobs = (where.size, problem.knobs_of(where.size)) if where and where.size \
            else problem.size(self.cfg.size)
        subject = Subject(sample, problem, dtype, knobs)
        try:
            attempt = self.screen.judge(subject, self._attempt(subject, clock), lambda: self._attempt(subject, clock))
        finally:
            self.deadline_epoch = None
        verdict = attempt.verdict
        return Result.for_sample(sample, verdict.status, verdict.message, failed_rank=verdict.rank, started_at=started,
                                 finished_at=datetime.now(timezone.utc), eval_seconds=time.monotonic() - t0,
                                 phase_seconds=clock.laps, category=problem.meta.category,
                                 world_size=len(self.devices), nodes=self.nodes, dtype=dtype, size=size_label,
                                 hardware=self.hardware.name, device_backend=self.hardware.backend,
                                 versions=self.versions, isolation=self.isolation, gang=self.name,
                                 **attempt.columns())

    def expect_within(self, seconds: float) -> None:
        """Tell the gang pool's watch by when this gang answers (:data:`deadline_epoch`)."""
        self.deadline_epoch = time.time() + seconds + MARGIN_S

    def _attempt(self, subject: Subject, clock: PhaseClock | None = None) -> Attempt:
        """One evaluation on a fresh candidate rank set, killed (its whole sandbox) whatever happened:
        on inputs from keys drawn for it (:mod:`pkb_ray.measure.keys`), so its references are computed
        for it by the clean set, into a folder no candidate sees (the work folder is hidden from
        candidates but for their own job folder)."""
        clock = clock or PhaseClock()
        keys = InputKeys.draw(list(range(len(self.devices))))
        trusted = Path(tempfile.mkdtemp(prefix="trusted-", dir=self.work_dir))
        ranks = None
        try:
            self.expect_within(self.cfg.startup_timeout_s + self.cfg.timeout_s)  # the reference, the ranks' start
            expected = self.references.for_sample(subject.problem, subject.dtype, subject.knobs,
                                                  trial_seeds(self.cfg), keys, trusted / "reference")
            clock.lap(EvalPhase.REFERENCE)
            ranks = self.pool.take()
            if not self.cfg.quiet_timing:
                self.pool.prewarm()
            return SampleSteps(self, subject, ranks, expected, keys, trusted, clock).run()
        except CleanSetFailed as exc:  # the evaluator's fault: a fresh clean set for the next sample
            self.clean.fail()
            raise ReferenceFailed(str(exc)) from None
        finally:
            if ranks is not None:
                self.pool.retire(ranks)
            shutil.rmtree(trusted, ignore_errors=True)
            clock.lap(EvalPhase.CLEANUP)

    def _quiet_baseline(self, case: Case, mode: str, k: int) -> RefTimes:
        """The reference's regions timed by the clean set with no candidate alive."""
        self.pool.settle()  # the last candidate's set gone, the next ones started and idle
        self.expect_within(self.cfg.timeout_s)
        driver = RoundDriver(None, self.clean.get(), case, self.cfg, self.work_dir, base_seeds(self.cfg),
                             Deadline.after(self.cfg.timeout_s))
        try:
            return RefTimes.of(driver.quiet(mode, k))
        except CleanSetFailed as exc:
            self.clean.fail()
            raise ReferenceFailed(str(exc)) from None

    def tolerance(self, problem: Problem, dtype: str) -> Tolerance:
        """The problem's tolerance for ``dtype``, unless ``eval.tolerances`` overrides it."""
        override = self.cfg.tolerance_override(problem.id, dtype)
        if override is None:
            return problem.tolerance(dtype)
        return Tolerance(atol=override.atol, rtol=override.rtol, reason="set by eval.tolerances")
