"""Reference outputs and the comparisons against them, all done by the gang's clean rank set.

Only the clean set (:class:`pkb_ray.rank_pool.CleanRanks`: rank processes that never import a
candidate) writes reference outputs. They are stored in a
:class:`~pkb_ray.reference_store.ReferenceStore` with content hashes under a MAC, verified when
looked up and again by the clean ranks when they read each file; a tampered entry is logged and
computed anew, never used. The comparisons run in the clean ranks too, on their devices, so no
verdict rests on a check made inside a candidate's process.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from pkb_ray.config import EvalConfig
from pkb_ray.problem import Problem, Tolerance
from pkb_ray.rank_pool import CleanRanks
from pkb_ray.reference_store import ReferenceStore, TamperedReference
from pkb_ray.ranks import StepOutcome
from pkb_ray.wire import Case, CheckTimed, CheckTrials, ChecksReport, Command, ComputeReference, Failure, Pick, Tol

log = logging.getLogger("pkb_ray.reference_store")
INFO_FILE = "reference.json"  # per rank and seed: output structure (for poisoning) and aliasing


class ReferenceFailed(RuntimeError):
    """The reference itself (or the clean rank set) failed: a problem or evaluator bug, never a sample's fault."""


class ReferenceChanged(ReferenceFailed):
    """A clean rank found a reference file that no longer matches its verified hash."""


def trial_seeds(cfg: EvalConfig) -> list[int]:
    """The trials' input seeds."""
    return [cfg.seed + i for i in range(cfg.trials)]


def base_seeds(cfg: EvalConfig) -> list[int]:
    """Seeds of the base input sets that every timed call's inputs are made from (pkb_ray.timing)."""
    return [cfg.seed + 1_000_000 + i for i in range(cfg.timing_sets)]


@dataclass(frozen=True)
class Expected:
    """A verified store entry: its folder, seeds, file hashes and what the reference's outputs look like."""

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


ENTRY_FORMAT = 2  # what an entry's info holds; entries of another format are computed again


class References:
    def __init__(self, root: Path, clean: CleanRanks, timeout_s: float):
        self.store = ReferenceStore(root)
        self.clean = clean
        self.timeout_s = timeout_s

    def ensure(self, problem: Problem, world_size: int, dtype: str, size: dict, seeds: list[int], device_type: str,
               nodes: int = 1) -> Expected:
        # over nodes, NCCL may sum in another order than inside one: a layout has its own references
        key = json.dumps([ENTRY_FORMAT, problem.id, hashlib.sha256(problem.source().encode()).hexdigest(), world_size,
                          dtype, sorted(size.items()), seeds, device_type, torch.__version__]
                         + ([nodes] if nodes > 1 else []))
        for _ in range(3):
            entry = self.store.lookup(key)  # None when missing, or tampered (logged and removed)
            if entry is None:
                entry = self._compute(key, problem, dtype, size, seeds)
            try:
                info = json.loads(self.store.read_verified(entry, INFO_FILE))
                return Expected(entry=entry, seeds=seeds, sha256=self.store.hashes(entry),
                                structure=info["structure"], reference={"aliases": info["aliases"]},
                                traffic=info.get("traffic"), input_bytes=info.get("input_bytes"))
            except TamperedReference as exc:  # changed since lookup: the next lookup discards it
                log.warning("reference entry changed while in use, computing it again: %s", exc)
        raise ReferenceFailed(f"the reference entry of {problem.id} keeps changing under us")

    def _compute(self, key: str, problem: Problem, dtype: str, size: dict, seeds: list[int]) -> Path:
        staged = self.store.staging()
        try:
            cmd = ComputeReference(case=Case(problem_path=str(problem.path), dtype=dtype, size=size), seeds=seeds,
                                   out_dir=str(staged))
            outcome = self._run(cmd, f"reference of {problem.id}")
            reports = {str(r): rep for r, rep in sorted(outcome.reports.items())}
            aliases = {str(s): sorted({a for rep in reports.values() for a in rep.aliases[str(s)]}) for s in seeds}
            info = {"structure": {r: rep.structure for r, rep in reports.items()}, "aliases": aliases,
                    "input_bytes": {r: rep.input_bytes for r, rep in reports.items()}}
            if all(rep.traffic for rep in reports.values()):
                info["traffic"] = {r: rep.traffic for r, rep in reports.items()}
            (staged / INFO_FILE).write_text(json.dumps(info))
            return self.store.commit(key, staged)
        finally:
            shutil.rmtree(staged, ignore_errors=True)

    def check_trials(self, case: Case, expected: Expected, actual_dir: Path, tol: Tolerance,
                     timeout_s: float | None = None) -> dict[int, ChecksReport]:
        """Per rank: the clean set's comparison of each trial's outputs and inputs after the call."""
        cmd = CheckTrials(case=case, seeds=expected.seeds, expected_dir=str(expected.entry),
                          expected_sha256=expected.sha256, actual_dir=str(actual_dir),
                          tolerance=Tol(atol=tol.atol, rtol=tol.rtol))
        return self._run(cmd, "checking the trials", timeout_s).reports

    def check_timed(self, case: Case, picks: dict[int, Pick], kept_dir: Path, tol: Tolerance,
                    seeds: list[int], timeout_s: float | None = None) -> dict[int, ChecksReport]:
        """Per rank: the clean set's recomputation and comparison of the picked timed calls."""
        if not picks:
            return {}
        cmd = CheckTimed(case=case, picks=list(picks.values()), base_seeds=seeds, actual_dir=str(kept_dir),
                         tolerance=Tol(atol=tol.atol, rtol=tol.rtol))
        return self._run(cmd, "checking the timed calls", timeout_s).reports

    def _run(self, cmd: Command, what: str, timeout_s: float | None = None) -> StepOutcome:
        """``cmd`` on the clean set, within ``timeout_s`` (a sample's deadline plus the margin; by
        default eval.timeout_s); a set that fails or does not answer is restarted."""
        ranks = self.clean.get()
        outcome = ranks.run(cmd, self.timeout_s if timeout_s is None else timeout_s)
        failures = {r: rep for r, rep in sorted(outcome.reports.items()) if isinstance(rep, Failure)}
        changed = [rep for rep in failures.values() if rep.status == "reference_changed"]
        if changed:  # the set itself is fine; the entry is not (ensure() will find it so and recompute)
            log.warning("%s: %s", what, changed[0].message)
            raise ReferenceChanged(changed[0].message)
        if not outcome.ok:
            reason = next((f"rank {r}: {rep.status}: {rep.message}" for r, rep in failures.items()),
                          f"dead {outcome.dead}, no answer from {outcome.missing}")
            self.clean.fail()
            raise ReferenceFailed(f"{what} failed in the clean rank set: {reason}")
        return outcome
