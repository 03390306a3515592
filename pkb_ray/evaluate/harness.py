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

Every decision is :mod:`pkb_ray.evaluate.verdict`'s. Any failure becomes a :class:`~pkb_ray.spec.schema.Result`
with its status; nothing raises out of :meth:`Harness.evaluate` for a bad sample.
"""

from __future__ import annotations

import functools
import json
import os
import platform
import shutil
import signal
import tempfile
import time
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import torch

from pkb_ray.isolation import sandbox

from pkb_ray.cuda import DEFAULT_ARCH, ENV_ARCH, ENV_CACHE, ENV_TIMEOUT
from pkb_ray.evaluate.deadlines import MARGIN_S, Deadline
from pkb_ray.evaluate.interference import RefTimes, slowed
from pkb_ray.evaluate.rounds import FREEZE_TIMEOUT_S, CleanSetFailed, RoundDriver, Timing, pair
from pkb_ray.evaluate.verdict import Evidence, StepView, Verdict, interfered, judge
from pkb_ray.isolation.memory import write_capture
from pkb_ray.isolation.rank_pool import CleanRanks, RankPool
from pkb_ray.isolation.ranks import RankIsolation, Ranks, RankSet, StepOutcome
from pkb_ray.isolation.zygote import Zygotes
from pkb_ray.measure.correctness import layout_aliases
from pkb_ray.measure.keys import InputKeys
from pkb_ray.measure.timing import median_iqr, sample_time, speedup, speedup_interval
from pkb_ray.problem import Problem, Tolerance, Traffic, sol_time_us
from pkb_ray.problems.references import ReferenceFailed, References, base_seeds, trial_seeds
from pkb_ray.runner import tensor_io
from pkb_ray.runner.extensions import arch_list
from pkb_ray.runner.protocol import tensor_file
from pkb_ray.spec import formats
from pkb_ray.spec.config import EvalConfig, HardwareConfig
from pkb_ray.spec.names import EvalPhase, Role, Side, Status, TimingMode
from pkb_ray.spec.schema import Result, Sample, TrialRecord, Where
from pkb_ray.spec.wire import Case, ChecksReport, Failure, RunTrials, Tol

__all__ = ["Harness", "ReferenceFailed", "describe"]


def describe(outcome: StepOutcome, ranks: Ranks) -> str:
    """A one-paragraph account of a failed step, for result messages."""
    for rank, code in sorted(outcome.dead.items()):
        how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
        tail = ranks.log_tail(rank)
        return f"rank {rank} {how} during {outcome.phases.get(rank, '?')!r}" + (f"; its output:\n{tail}" if tail else "")
    for rank, report in sorted(outcome.reports.items()):
        if isinstance(report, Failure):
            return f"rank {rank}: {report.message}"
    if outcome.missing:
        where = "; ".join(f"rank {r} in {outcome.phases.get(r, '?')!r}" for r in outcome.missing)
        return f"no answer after {outcome.elapsed_s:.1f} s: {where}"
    return "ok"


def _side_times(regions) -> tuple[tuple[list[tuple[float, float]], float], ...]:
    """(per-rank (median, IQR), the side's time) of each side, reference then candidate, all by the
    parent's clock: a rank's figure per call from resuming its set to its report, the side's from
    resuming its set to seeing it stopped again (:class:`pkb_ray.evaluate.verdict.Region`)."""
    ranks = sorted({r for g in regions for r in g.arrived_us})
    out = []
    for side in (Side.REF, Side.CAND):
        mine = [g for g in regions if g.side is side]
        per_rank = [median_iqr([g.arrived_us[r] / g.k for g in mine if r in g.arrived_us]) for r in ranks]
        out.append((per_rank, sample_time([median_iqr([g.us_per_call for g in mine])[0]])))
    return tuple(out)


def _records(checks: dict[int, ChecksReport], kind: str = "trial") -> list[TrialRecord]:
    """The clean set's findings as the result's trial records."""
    return [TrialRecord(kind=kind, seed=c.id, rank=r, ok=c.ok, max_abs_error=c.max_abs_error,
                        message=f"{c.where}: {c.message}" if c.message else "")
            for r, rep in sorted(checks.items()) for c in rep.checks]


def view(outcome: StepOutcome, ranks: Ranks) -> StepView:
    """A step as the verdict sees it, with the parent's account of it when it went wrong."""
    return StepView(outcome.reports, outcome.dead, outcome.missing, "" if outcome.ok else describe(outcome, ranks))


class PhaseClock:
    """Seconds spent in each phase of one sample, for overhead accounting (Result.phase_seconds)."""

    def __init__(self) -> None:
        self.laps: dict[str, float] = {}
        self._last = time.monotonic()

    def lap(self, phase: str) -> None:
        now = time.monotonic()
        self.laps[phase] = round(self.laps.get(phase, 0.0) + now - self._last, 4)
        self._last = now


class Harness:
    """Evaluates samples one at a time on one set of W devices (a gang's worth)."""

    def __init__(self, devices: list[str], eval_cfg: EvalConfig, hardware: HardwareConfig,
                 problems: dict[str, Problem], work_dir: Path, cache_dir: Path, launcher=None,
                 private: list[Path] = (), name: str = ""):
        """``launcher(job_dir=..., backend=..., ...)`` starts a :class:`~pkb_ray.isolation.ranks.Ranks`;
        by default a :class:`~pkb_ray.isolation.ranks.RankSet` on ``devices`` (one node). A gang spread over
        nodes passes a :class:`pkb_ray.isolation.spread.SpreadRankSet` maker, ``devices`` then listing all W.
        ``private``: paths no rank may see (the run's results and sample files), besides the
        secrets under HOME and, for candidates, the cache. ``name``: the gang's, in every result."""
        self.devices = devices
        self.name = name
        self._launcher = launcher or functools.partial(RankSet, devices)
        self.nodes = getattr(launcher, "nodes", 1)
        self.cfg = eval_cfg
        self.hardware = hardware
        self.problems = problems
        self.work_dir = Path(work_dir)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        cache_dir = Path(cache_dir)
        (cache_dir / "cuda").mkdir(parents=True, exist_ok=True)
        (cache_dir / "torch_ext").mkdir(parents=True, exist_ok=True)  # load_inline builds (runner.extensions)
        self.probe = sandbox.probe(sandbox.Isolation(eval_cfg.isolation))  # raises when the level cannot be had
        self.isolation = self.probe.level.value
        hidden = [*map(str, sandbox.default_hidden()), *map(str, private)]
        gpu = hardware.device == "cuda"
        # the problem files, and what they name READABLE (an imported benchmark's checkout), wherever they are
        needed = tuple(sorted({str(p.path.parent) for p in problems.values()}
                              | {str(r) for p in problems.values() for r in getattr(p.module, "READABLE", ())}))
        self._isolation = {
            Role.CANDIDATE: RankIsolation(self.isolation, hide=(*hidden, str(cache_dir), str(self.work_dir)),
                                   readable=(str(cache_dir / "cuda"), str(cache_dir / "torch_ext"), *needed),
                                   gpu=gpu),
            # the clean set writes each sample's references and reads its captures (the work folder)
            Role.CLEAN: RankIsolation(self.isolation, hide=tuple(hidden), readable=needed,
                               writable=(str(self.work_dir),), gpu=gpu),
        }
        # candidates' sets forked from a template that imported torch once (one node's sets only)
        self._zygotes = Zygotes(self.work_dir, eval_cfg.startup_timeout_s) if (
            eval_cfg.zygote and launcher is None and self.probe.level is sandbox.Isolation.SANDBOX) else None
        self.pool = RankPool(self._spawn, self.work_dir, eval_cfg.prewarm, eval_cfg.quiet_timing,
                             eval_cfg.startup_timeout_s)
        self.clean = CleanRanks(self._spawn, self.work_dir, eval_cfg.startup_timeout_s)
        self.references = References(self.clean, eval_cfg.timeout_s)
        self._quiet: dict[tuple, RefTimes] = {}  # (problem, dtype, size, mode, k) -> the reference alone
        self.deadline_epoch: float | None = None  # by when (time.time()) this gang answers: the pool's watch
        # where load_cuda in a rank finds what the compile stage built (pkb_ray.cuda), and the
        # profile's NCCL settings (network interfaces between nodes, transports)
        self._rank_env = {ENV_ARCH: hardware.arch or DEFAULT_ARCH, ENV_CACHE: str(cache_dir / "cuda"),
                          ENV_TIMEOUT: str(eval_cfg.compile_timeout_s), **hardware.nccl_env,
                          **(hardware.spread_nccl_env if self.nodes > 1 else {})}
        self.versions = {"torch": torch.__version__, "python": platform.python_version(),
                         "backend": hardware.backend}
        if hardware.device == "cuda" and torch.cuda.is_available():
            self.versions["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
            self.versions["gpu"] = torch.cuda.get_device_name(0)

    def _spawn(self, job_dir: Path, role: Role) -> Ranks:
        threads = max(1, (os.cpu_count() or 1) * self.nodes // len(self.devices))
        # the ranks' own collective timeout is a backstop: the parent kills a step at timeout_s first,
        # so a hang is reported as a timeout, not as the crash NCCL's watchdog would make of it
        return self._launcher(backend=self.hardware.backend, job_dir=job_dir, pg_timeout_s=self.cfg.timeout_s + 15.0,
                              num_threads=threads, multicast=self.hardware.nvlink_multicast, env=self._rank_env,
                              isolation=self._isolation[role], role=role,
                              **({"zygotes": self._zygotes} if self._zygotes is not None else {}))

    def prewarm(self) -> None:
        self.pool.prewarm()

    def close(self) -> None:
        """Kill the prewarmed rank sets and the clean one; wait until every rank process is gone."""
        self.pool.close()
        self.clean.close()
        if self._zygotes is not None:
            self._zygotes.close()

    def evaluate(self, sample: Sample, where: Where | None = None) -> Result:
        """``sample``'s result at ``where``'s size and dtype (by default: eval.size, and eval.dtype or
        the problem's first)."""
        started, t0 = datetime.now(timezone.utc), time.monotonic()
        clock = PhaseClock()
        problem = self.problems[sample.problem_id]
        dtype = (where.dtype if where else "") or self.cfg.dtype or problem.meta.dtypes[0]
        size_label, knobs = (where.size, problem.knobs_of(where.size)) if where and where.size \
            else problem.size(self.cfg.size)
        common = dict(category=problem.meta.category, world_size=len(self.devices), nodes=self.nodes, dtype=dtype,
                      size=size_label, hardware=self.hardware.name, device_backend=self.hardware.backend,
                      versions=self.versions, isolation=self.isolation, gang=self.name)
        attempt = functools.partial(self._attempt, sample, problem, dtype, knobs, clock)
        try:
            fields = self._judge_interference(attempt(), attempt, problem, dtype, knobs)
        finally:
            self.deadline_epoch = None
        verdict = fields.pop("verdict")
        fields.pop("timing", None)
        return Result.for_sample(sample, verdict.status, verdict.message, failed_rank=verdict.rank, started_at=started,
                                 finished_at=datetime.now(timezone.utc), eval_seconds=time.monotonic() - t0,
                                 phase_seconds=clock.laps, **common, **fields)

    def _expect_within(self, seconds: float) -> None:
        """Tell the gang pool's watch by when this gang answers (:data:`deadline_epoch`)."""
        self.deadline_epoch = time.time() + seconds + MARGIN_S

    def _attempt(self, sample, problem, dtype, knobs, clock) -> dict:
        """One evaluation on a fresh candidate rank set, killed (its whole sandbox) whatever happened:
        on inputs from keys drawn for it (:mod:`pkb_ray.measure.keys`), so its references are computed for it
        by the clean set, into a folder no candidate sees."""
        keys = InputKeys.draw(list(range(len(self.devices))))
        trusted = self._trusted_dir()
        ranks = None
        try:
            self._expect_within(self.cfg.startup_timeout_s + self.cfg.timeout_s)  # the reference, the ranks' start
            expected = self.references.for_sample(problem, dtype, knobs, trial_seeds(self.cfg), keys,
                                                  trusted / "reference")
            clock.lap(EvalPhase.REFERENCE)
            ranks = self.pool.take()
            if not self.cfg.quiet_timing:
                self.pool.prewarm()
            return {"message_bytes": expected.message_bytes,
                    **self._run(sample, problem, ranks, dtype, knobs, expected, clock, keys, trusted)}
        except CleanSetFailed as exc:  # the evaluator's fault: a fresh clean set for the next sample
            self.clean.fail()
            raise ReferenceFailed(str(exc)) from None
        finally:
            if ranks is not None:
                self.pool.retire(ranks)
            shutil.rmtree(trusted, ignore_errors=True)
            clock.lap(EvalPhase.CLEANUP)

    def _judge_interference(self, fields: dict, attempt, problem, dtype, knobs) -> dict:
        """A correct sample beside which the reference ran slower than alone: the quiet baseline (the
        reference back to back, no candidate alive) is only the screen. A sample it flags is judged
        against the reference beside an honest copy of itself, timed through the same rounds (the
        candidate's calls, the checks and the fills between the reference's regions leave the
        machine otherwise than back to back: on the CPU VM at 4 MiB honest copies read +20-52 %
        against the quiet baseline alone, docs/benchmarks/trust.md). Slowed against that too, it is
        evaluated once more and judged against a second copy; slowed again, it is tampering
        (:mod:`pkb_ray.evaluate.interference`)."""
        key = (problem.id, dtype, json.dumps(knobs, sort_keys=True))
        case = Case(problem_path=str(problem.path), dtype=dtype, size=knobs)
        beside_copy = functools.partial(self._beside_copy, problem, dtype, knobs)
        first = self._slowed(fields, key, case) and self._slowed(fields, key, case, against=beside_copy)
        if first:
            fields = attempt()
            again = self._slowed(fields, key, case) and self._slowed(fields, key, case, against=beside_copy)
            if again:
                fields["verdict"] = interfered(first, again)
        return fields

    def _slowed(self, fields: dict, key: tuple, case: Case, against=None) -> str:
        """Why the reference ran materially slower in this evaluation's rounds than in the quiet
        baseline of its mode and calls per region (measured now if missing), or than ``against(mode)``
        gives, or ""."""
        timing = fields.get("timing")
        if timing is None or fields["verdict"].status is not Status.CORRECT:
            return ""
        for mode in timing.modes:
            during = RefTimes.of(timing.of(mode))
            if during is None:
                continue
            if against is not None:
                baseline = against(mode) or self._quiet_baseline(case, mode, during.k)
            else:
                slot = (*key, mode, during.k)
                if slot not in self._quiet:
                    self._quiet[slot] = self._quiet_baseline(case, mode, during.k)
                baseline = self._quiet[slot]
            found = slowed(during, baseline)
            if found:
                return f"{mode}: {found}"
        return ""

    def _beside_copy(self, problem, dtype, knobs, mode: str) -> RefTimes | None:
        """The reference's regions of ``mode`` beside an honest copy of itself (the problem's own
        source as the candidate), through the same rounds; None where that evaluation was not
        correct or has no such regions (the quiet baseline stands in)."""
        try:
            source = problem.source()
        except (OSError, ValueError):  # a problem without a source of its own to copy
            return None
        copy = Sample(problem_id=problem.id, model="(interference baseline)", sample_index=0, source=source)
        fields = self._attempt(copy, problem, dtype, knobs, PhaseClock())
        timing = fields.get("timing")
        found = RefTimes.of(timing.of(mode)) if timing is not None else None
        if found is None or fields["verdict"].status is not Status.CORRECT:
            return None
        return replace(found, where="beside an honest copy")

    def _quiet_baseline(self, case: Case, mode: str, k: int) -> RefTimes:
        """The reference's regions timed by the clean set with no candidate alive."""
        self.pool.settle()  # the last candidate's set gone, the next ones started and idle
        self._expect_within(self.cfg.timeout_s)
        driver = RoundDriver(None, self.clean.get(), case, self.cfg, self.work_dir, base_seeds(self.cfg),
                             Deadline.after(self.cfg.timeout_s))
        try:
            return RefTimes.of(driver.quiet(mode, k))
        except CleanSetFailed as exc:
            self.clean.fail()
            raise ReferenceFailed(str(exc)) from None

    def _run(self, sample, problem, ranks, dtype, knobs, expected, clock, keys, trusted) -> dict:
        """Gather the sample's evidence stage by stage, and stop at the first verdict
        (:func:`pkb_ray.evaluate.verdict.judge` decides, and in which order its rules apply)."""
        evidence = self._ready(ranks, clock)
        candidate = ranks.job_dir / "candidate.py"
        candidate.write_text(sample.source)
        case = Case(problem_path=str(problem.path), dtype=dtype, size=knobs)
        # a sample whose format builds torch extensions (load_inline) may build them on the rank: the time too
        builds = formats.of(sample.metadata).builds_extensions
        # from here the sample's own deadline: every wait below ends by it (the clean set's by it plus the margin)
        deadline = Deadline.after(self.cfg.timeout_s + (self.cfg.inline_build_timeout_s if builds else 0.0))
        self._expect_within(deadline.budget_s + MARGIN_S)
        outcome = ranks.run(self._trials_command(sample, case, candidate, expected, keys), deadline.left())
        clock.lap(EvalPhase.TRIALS)
        evidence.trials = view(outcome, ranks)
        allocations = {r: dict(rep.handles) for r, rep in outcome.reports.items() if not isinstance(rep, Failure)}
        if outcome.ok:
            evidence.trial_aliases = self._read_trials(ranks, outcome, trusted / "trials", allocations)
        rank_builds = {"rank_builds": max((getattr(rep, "rank_builds", 0) for rep in outcome.reports.values()),
                                          default=None)} if builds else {}
        rule = formats.second_verdict()
        found = judge(evidence)
        if found:  # by the second rule too, a sample that fails to run its first call fails
            return {"verdict": found, **({rule.column: False} if rule else {}), **rank_builds}
        tol = self.tolerance(problem, dtype)
        checks = self.references.check_trials(case, expected, trusted / "trials", tol, keys,
                                              deadline.left(margin=MARGIN_S))
        evidence.checks, evidence.reference = checks, expected.reference
        trials = _records(checks)
        clock.lap(EvalPhase.CHECK)
        first = [c.second for rep in checks.values() for c in rep.checks if c.id == expected.seeds[0]]
        second = {**({rule.column: bool(first) and all(first)} if rule else {}), **rank_builds}
        found = judge(evidence)
        if found:
            return {"verdict": found, "trials": trials, **second}
        self.pool.quiet()
        clock.lap(EvalPhase.QUIET)
        kept = trusted / "timed"
        kept.mkdir()
        timing = RoundDriver(ranks, self.clean.get(), case, self.cfg, kept, base_seeds(self.cfg), deadline,
                             keys, Tol(atol=tol.atol, rtol=tol.rtol), allocations).run()
        clock.lap(EvalPhase.TIMING)
        evidence.timing_failed = view(timing.failed, ranks) if timing.failed else None
        evidence.timing_what, evidence.watched, evidence.escaped = timing.what, timing.watched, timing.escaped
        evidence.misplaced = timing.misplaced
        found = judge(evidence)
        if found:
            return {"verdict": found, "trials": trials, **second}
        timed = {rank: ChecksReport(checks=found) for rank, found in timing.checks.items()}
        clock.lap(EvalPhase.TIMED_CHECK)
        evidence.regions, evidence.picks, evidence.timed_checks = timing.regions, timing.picks, timed
        trials += _records(timed, kind="timed")
        fields = self._timing_fields(problem, dtype, knobs, timing, trials, expected.traffic)
        return {**fields, **second, "verdict": judge(evidence) or Verdict(Status.CORRECT, ""), "timing": timing}

    def _ready(self, ranks: Ranks, clock: PhaseClock) -> Evidence:
        """Once every rank joined its process group, the evidence begins: the device each one uses."""
        self._expect_within(self.cfg.startup_timeout_s)
        ready = ranks.wait_ready(self.cfg.startup_timeout_s)
        if not ready.ok:
            raise RuntimeError(f"rank processes did not start: {describe(ready, ranks)}")
        evidence = Evidence(device={r: rep.device for r, rep in ready.reports.items()})
        clock.lap(EvalPhase.READY)
        return evidence

    def _trials_command(self, sample: Sample, case: Case, candidate: Path, expected, keys: InputKeys) -> RunTrials:
        """The candidate's first step: its calls on the trial seeds (its extensions, if any, built for
        this machine's architecture)."""
        return RunTrials(case=case, candidate_path=str(candidate), seeds=expected.seeds, structure=expected.structure,
                         prebuilt=sample.metadata.get("torch_extensions", ""),
                         arch_list=arch_list(self.hardware.arch or DEFAULT_ARCH), keys=keys.as_wire())

    def _trusted_dir(self) -> Path:
        """A folder for one sample's references and captures: the clean set reads it, no candidate
        sees it (the work folder is hidden from them but for their own job folder)."""
        return Path(tempfile.mkdtemp(prefix="trusted-", dir=self.work_dir))

    def _read_trials(self, ranks: Ranks, outcome: StepOutcome, folder: Path,
                     allocations: dict[int, dict[str, list]]) -> dict[int, dict[str, list[str]]]:
        """Stop the candidate's processes (and see them stopped), then read every trial call's
        outputs and inputs where each rank said they lie, as captures in ``folder``; and what
        shares memory (rank -> seed -> findings). The set stays stopped until the timing step
        resumes it: the clean set reads what lies in its device memory while it is."""
        folder.mkdir()
        stopped = ranks.freeze(FREEZE_TIMEOUT_S)
        found = {}
        for rank, rep in sorted(outcome.reports.items()):
            seeds = sorted(rep.calls, key=int)
            calls = [pair(rep.calls[s]) for s in seeds]
            found[rank] = dict(zip(seeds, layout_aliases(calls)))
            for seed, (outputs, inputs) in zip(seeds, calls):
                path = tensor_file(folder, int(seed), rank)
                if not stopped:
                    tensor_io.write(path, {"error": f"its processes were not all seen stopped within {FREEZE_TIMEOUT_S:.0f} s"})
                    continue
                write_capture(path, lambda entries, r=rank: ranks.read_tensors(r, entries), outputs, inputs,
                              allocations.get(rank))
        return found

    def tolerance(self, problem: Problem, dtype: str) -> Tolerance:
        """The problem's tolerance for ``dtype``, unless ``eval.tolerances`` overrides it."""
        override = self.cfg.tolerance_override(problem.id, dtype)
        if override is None:
            return problem.tolerance(dtype)
        return Tolerance(atol=override.atol, rtol=override.rtol, reason="set by eval.tolerances")

    def _timing_fields(self, problem, dtype, knobs, timing: Timing, trials, traced=None) -> dict:
        """Times, speedup and speed of light from the first mode that ran (graph before eager); with
        both, each mode's times too."""
        by_mode = {mode: _side_times(timing.of(mode)) for mode in timing.modes}
        mode = timing.modes[0]
        (ref, ref_t), (cand, cand_t) = by_mode[mode]
        both = {}
        if self.cfg.timing_mode == TimingMode.BOTH:
            both = {f"{m}_{side}_time_us": t for m, sides in by_mode.items()
                    for side, (_, t) in zip(("ref", "cand"), sides)}
        # the busiest rank's traced volume where the problem has no bound of its own (an imported one);
        # no bound at all gives no fraction rather than 0
        traffic = Traffic(**{k: max(t[k] for t in traced.values()) for k in ("interconnect_bytes", "flops",
                                                                             "hbm_bytes")}) if traced else None
        sol_us = sol_time_us(problem, knobs, len(self.devices), dtype, self.hardware, nodes=self.nodes,
                             traffic=traffic) or None
        spread = speedup_interval(*([g.us_per_call for g in timing.of(mode) if g.side is side]
                                    for side in (Side.REF, Side.CAND)))
        return dict(trials=trials, ref_median_us=[m for m, _ in ref], ref_iqr_us=[q for _, q in ref],
                    cand_median_us=[m for m, _ in cand], cand_iqr_us=[q for _, q in cand],
                    ref_time_us=ref_t, cand_time_us=cand_t, speedup=speedup(ref_t, cand_t),
                    speedup_lo=spread[0] if spread else None, speedup_hi=spread[1] if spread else None,
                    sol_time_us=sol_us, sol_fraction=sol_us / cand_t if sol_us and cand_t > 0 else None,
                    sol_source=("traced" if traffic else "model") if sol_us else "",
                    timed_seconds=timing.seconds, timing_mode=mode,
                    calls_per_round=timing.k_graph if mode == TimingMode.GRAPH else timing.k,
                    graph_error=timing.graph_error, **both)
