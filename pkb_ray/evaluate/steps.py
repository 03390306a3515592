"""One sample's steps on its candidate rank set, gathering the evidence stage by stage and stopping at
the first verdict (:func:`pkb_ray.evaluate.verdict.judge` decides, and in which order its rules apply):
ready, trials (the outputs read from the stopped ranks' memory), the clean set's checks of them, the
timed rounds, the checks of the picked timed calls."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Protocol

from pkb_ray.cuda import DEFAULT_ARCH
from pkb_ray.evaluate import figures
from pkb_ray.evaluate.attempt import Attempt, Subject
from pkb_ray.evaluate.deadlines import MARGIN_S, Deadline, uses_torch_compile
from pkb_ray.evaluate.figures import PhaseClock, records, view
from pkb_ray.evaluate.rounds import FREEZE_TIMEOUT_S, RoundDriver, pair
from pkb_ray.evaluate.verdict import Evidence, Verdict, judge
from pkb_ray.isolation.memory import write_capture
from pkb_ray.isolation.rank_pool import CleanRanks, RankPool
from pkb_ray.isolation.ranks import Ranks, StepOutcome
from pkb_ray.measure.correctness import layout_aliases
from pkb_ray.measure.keys import InputKeys
from pkb_ray.problem import Problem, Tolerance
from pkb_ray.problems.references import Expected, References, base_seeds
from pkb_ray.runner import tensor_io
from pkb_ray.runner.extensions import arch_list
from pkb_ray.runner.protocol import tensor_file
from pkb_ray.spec import formats
from pkb_ray.spec.config import EvalConfig, HardwareConfig
from pkb_ray.spec.names import EvalPhase, Status, TimingMode
from pkb_ray.spec.wire import ChecksReport, Failure, RunTrials, Tol


class Host(Protocol):
    """What the steps use of the harness that runs them."""

    cfg: EvalConfig
    hardware: HardwareConfig
    devices: list[str]
    nodes: int
    references: References
    pool: RankPool
    clean: CleanRanks
    expect_within: Callable[[float], None]  # tell the gang pool's watch by when this gang answers
    tolerance: Callable[[Problem, str], Tolerance]


class SampleSteps:
    """The steps of one attempt: ``run()`` gives its :class:`Attempt`."""

    def __init__(self, host: Host, subject: Subject, ranks: Ranks, expected: Expected, keys: InputKeys,
                 trusted: Path, clock: PhaseClock):
        self.host, self.subject, self.ranks, self.expected = host, subject, ranks, expected
        self.keys, self.trusted, self.clock = keys, trusted, clock
        self.cfg = host.cfg
        # a sample whose format builds torch extensions (load_inline) may build them on the rank: the time too
        self.builds = formats.of(subject.sample.metadata).builds_extensions
        self.compiles = uses_torch_compile(subject.sample.source)  # torch.compile: its first calls compile
        self.rule = formats.second_verdict()
        self.deadline: Deadline | None = None
        self.evidence: Evidence | None = None
        self.attempt: Attempt | None = None
        self.allocations: dict[int, dict[str, list]] = {}  # rank -> the device allocations its trials exported

    def run(self) -> Attempt:
        self.evidence = self._ready()
        self._trials()
        found = judge(self.evidence)
        if found:  # by the second rule too, a sample that fails to run its first call fails
            return self._done(found, second=False)
        tol = self.host.tolerance(self.subject.problem, self.subject.dtype)
        self._check_trials(tol)
        found = judge(self.evidence)
        if found:
            return self._done(found)
        return self._timing(tol)

    def _done(self, verdict: Verdict, second: bool | None = None) -> Attempt:
        """The attempt as it stands, with ``verdict``; ``second``: the second rule's finding, where
        the checks did not give it."""
        attempt = self.attempt or Attempt(self.evidence, verdict)
        attempt.verdict = verdict
        if second is not None and self.rule is not None:
            attempt.second = {self.rule.column: second}
        return attempt

    def _ready(self) -> Evidence:
        """Once every rank joined its process group, the evidence begins: the device each one uses."""
        self.host.expect_within(self.cfg.startup_timeout_s)
        ready = self.ranks.wait_ready(self.cfg.startup_timeout_s)
        if not ready.ok:
            raise RuntimeError(f"rank processes did not start: {figures.describe(ready, self.ranks)}")
        evidence = Evidence(device={r: rep.device for r, rep in ready.reports.items()})
        self.clock.lap(EvalPhase.READY)
        return evidence

    def _trials(self) -> None:
        """The candidate's calls on the trial seeds; their outputs and inputs read from its stopped ranks."""
        candidate = self.ranks.job_dir / "candidate.py"
        candidate.write_text(self.subject.sample.source)
        # from here the sample's own deadline: every wait below ends by it (the clean set's by it plus the margin)
        self.deadline = Deadline.after(self.cfg.timeout_s + (self.cfg.inline_build_timeout_s if self.builds else 0.0)
                                       + (self.cfg.torch_compile_timeout_s if self.compiles else 0.0))
        self.host.expect_within(self.deadline.budget_s + MARGIN_S)
        cmd = RunTrials(case=self.subject.case, candidate_path=str(candidate), seeds=self.expected.seeds,
                        structure=self.expected.structure, prebuilt=self.subject.sample.metadata.get("torch_extensions", ""),
                        arch_list=arch_list(self.host.hardware.arch or DEFAULT_ARCH), keys=self.keys.as_wire())
        outcome = self.ranks.run(cmd, self.deadline.left())
        self.clock.lap(EvalPhase.TRIALS)
        self.evidence.trials = view(outcome, self.ranks)
        self.allocations = {r: dict(rep.handles) for r, rep in outcome.reports.items() if not isinstance(rep, Failure)}
        if outcome.ok:
            self.evidence.trial_aliases = self._read_trials(outcome, self.trusted / "trials", self.allocations)
        self.attempt = Attempt(self.evidence, Verdict(Status.CORRECT, ""), message_bytes=self.expected.message_bytes)
        if self.builds:
            self.attempt.rank_builds = max((getattr(rep, "rank_builds", 0) for rep in outcome.reports.values()),
                                           default=None)

    def _read_trials(self, outcome: StepOutcome, folder: Path,
                     allocations: dict[int, dict[str, list]]) -> dict[int, dict[str, list[str]]]:
        """Stop the candidate's processes (and see them stopped), then read every trial call's
        outputs and inputs where each rank said they lie, as captures in ``folder``; and what
        shares memory (rank -> seed -> findings). The set stays stopped until the timing step
        resumes it: the clean set reads what lies in its device memory while it is."""
        folder.mkdir()
        stopped = self.ranks.freeze(FREEZE_TIMEOUT_S)
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
                write_capture(path, lambda entries, r=rank: self.ranks.read_tensors(r, entries), outputs, inputs,
                              allocations.get(rank))
        return found

    def _check_trials(self, tol: Tolerance) -> None:
        """The clean set compares the trials' outputs with the reference's; the second rule's finding
        is its comparison of the first seed's call."""
        checks = self.host.references.check_trials(self.subject.case, self.expected, self.trusted / "trials", tol,
                                                   self.keys, self.deadline.left(margin=MARGIN_S))
        self.evidence.checks, self.evidence.reference = checks, self.expected.reference
        self.attempt.trials = records(checks)
        self.clock.lap(EvalPhase.CHECK)
        if self.rule is not None:
            first = [c.second for rep in checks.values() for c in rep.checks if c.id == self.expected.seeds[0]]
            self.attempt.second = {self.rule.column: bool(first) and all(first)}

    def _timing(self, tol: Tolerance) -> Attempt:
        """The timed rounds, then the checks of the calls picked after their regions."""
        self.host.pool.quiet()
        self.clock.lap(EvalPhase.QUIET)
        kept = self.trusted / "timed"
        kept.mkdir()
        timing = RoundDriver(self.ranks, self.host.clean.get(), self.subject.case, self.cfg, kept, base_seeds(self.cfg),
                             self.deadline, self.keys, Tol(atol=tol.atol, rtol=tol.rtol), self.allocations).run()
        self.clock.lap(EvalPhase.TIMING)
        e = self.evidence
        e.timing_failed = view(timing.failed, self.ranks) if timing.failed else None
        e.timing_what, e.watched, e.escaped, e.misplaced = timing.what, timing.watched, timing.escaped, timing.misplaced
        found = judge(e)
        if found:
            return self._done(found)
        timed = {rank: ChecksReport(checks=found) for rank, found in timing.checks.items()}
        self.clock.lap(EvalPhase.TIMED_CHECK)
        e.regions, e.picks, e.timed_checks = timing.regions, timing.picks, timed
        self.attempt.trials += records(timed, kind="timed")
        host, s = self.host, self.subject
        self.attempt.timed = figures.timed(timing, s.problem, s.knobs, s.dtype, host.hardware, len(host.devices),
                                           host.nodes, self.cfg.timing_mode == TimingMode.BOTH, self.expected.traffic)
        self.attempt.timing = timing
        return self._done(judge(e) or Verdict(Status.CORRECT, ""))
