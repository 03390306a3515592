"""Reference outputs and the comparisons against them, all done by the gang's clean rank set.

Only the clean set (:class:`pkb_ray.isolation.rank_pool.CleanRanks`: rank processes that never import a
candidate) computes reference outputs: for every sample anew, since its inputs derive from keys
drawn for it (:mod:`pkb_ray.measure.keys`), into a folder of the sample's that no candidate sees, each file
with the SHA-256 its writer computed (a clean rank keeps what it wrote on its device, by that
hash, and checks any file it reads against it). The comparisons run in the clean ranks too, on
their devices, against what the trusted side read from the candidate's memory, so no verdict
rests on a check made inside a candidate's process.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pkb_ray.isolation.rank_pool import CleanRanks
from pkb_ray.isolation.ranks import StepOutcome
from pkb_ray.measure.keys import InputKeys
from pkb_ray.problem import Problem, Tolerance
from pkb_ray.spec.config import EvalConfig
from pkb_ray.spec.wire import Case, CheckTrials, ChecksReport, Command, ComputeReference, Failure, Tol

log = logging.getLogger(__name__)


class ReferenceFailed(RuntimeError):
    """The reference itself (or the clean rank set) failed: a problem or evaluator bug, never a sample's fault."""


def trial_seeds(cfg: EvalConfig) -> list[int]:
    """The trials' input seeds."""
    return [cfg.seed + i for i in range(cfg.trials)]


def base_seeds(cfg: EvalConfig) -> list[int]:
    """Seeds of the base input sets that every timed call's inputs are made from (pkb_ray.measure.timing)."""
    return [cfg.seed + 1_000_000 + i for i in range(cfg.timing_sets)]


@dataclass(frozen=True)
class Expected:
    """One sample's reference outputs: their folder, seeds, file hashes and what they look like."""

    entry: Path
    seeds: list[int]
    sha256: dict[str, str]
    structure: dict[str, dict[str, list]]  # rank -> seed -> [[shape, dtype], ...]
    reference: dict[str, Any]  # {"aliases": seed -> what the reference's outputs share with its inputs}
    traffic: dict[str, dict[str, float]] | None = None  # rank -> traced volume of one call (TRACE_SOL problems)
    input_bytes: dict[str, int] | None = None  # rank -> bytes of one call's inputs

    @property
    def message_bytes(self) -> int | None:
        """The inputs of one call on the rank with the most (the x of size sweeps)."""
        return max(self.input_bytes.values()) if self.input_bytes else None


class References:
    """The clean set's side of one gang: reference outputs for each sample, and the comparisons."""

    def __init__(self, clean: CleanRanks, timeout_s: float):
        self.clean = clean
        self.timeout_s = timeout_s

    def for_sample(self, problem: Problem, dtype: str, size: dict, seeds: list[int], keys: InputKeys,
                   folder: Path) -> Expected:
        """The reference's outputs on the trial inputs of one sample (``seeds`` are their labels,
        ``keys`` the sample's secrets), computed by the clean set into ``folder`` (which no
        candidate sees), with their hashes as the clean ranks wrote them."""
        folder.mkdir(parents=True, exist_ok=True)
        cmd = ComputeReference(case=Case(problem_path=str(problem.path), dtype=dtype, size=size), seeds=seeds,
                               out_dir=str(folder), keys=keys.as_wire())
        outcome = self._run(cmd, f"reference of {problem.id}")
        reports = {str(r): rep for r, rep in sorted(outcome.reports.items())}
        aliases = {str(s): sorted({a for rep in reports.values() for a in rep.aliases[str(s)]}) for s in seeds}
        traffic = {r: rep.traffic for r, rep in reports.items()} if all(rep.traffic for rep in reports.values()) else None
        return Expected(entry=folder, seeds=seeds, sha256={n: d for rep in reports.values() for n, d in rep.digests.items()},
                        structure={r: rep.structure for r, rep in reports.items()}, reference={"aliases": aliases},
                        traffic=traffic, input_bytes={r: rep.input_bytes for r, rep in reports.items()})

    def check_trials(self, case: Case, expected: Expected, actual_dir: Path, tol: Tolerance, keys: InputKeys,
                     timeout_s: float | None = None) -> dict[int, ChecksReport]:
        """Per rank: the clean set's comparison of each trial's outputs and inputs after the call."""
        cmd = CheckTrials(case=case, seeds=expected.seeds, expected_dir=str(expected.entry),
                          expected_sha256=expected.sha256, actual_dir=str(actual_dir),
                          tolerance=Tol(atol=tol.atol, rtol=tol.rtol), keys=keys.as_wire())
        return self._run(cmd, "checking the trials", timeout_s).reports

    def _run(self, cmd: Command, what: str, timeout_s: float | None = None) -> StepOutcome:
        """``cmd`` on the clean set, within ``timeout_s`` (a sample's deadline plus the margin; by
        default eval.timeout_s); a set that fails or does not answer is restarted."""
        ranks = self.clean.get()
        outcome = ranks.run(cmd, self.timeout_s if timeout_s is None else timeout_s)
        failures = {r: rep for r, rep in sorted(outcome.reports.items()) if isinstance(rep, Failure)}
        if not outcome.ok:
            reason = next((f"rank {r}: {rep.status}: {rep.message}" for r, rep in failures.items()),
                          f"dead {outcome.dead}, no answer from {outcome.missing}")
            self.clean.fail()
            raise ReferenceFailed(f"{what} failed in the clean rank set: {reason}")
        return outcome
