"""Evaluating one sample on W fresh rank processes, and the reference outputs it is judged by.

Order of events for one sample (all limits from :class:`pkb_ray.config.EvalConfig`):

1. Reference outputs for (problem, W, dtype, size, seeds, device) come from
   :class:`ReferenceCache`: computed once by rank processes that never import a candidate.
2. A rank set (started while earlier samples ran, ``prewarm`` of them ahead) imports the candidate
   and runs the trials; each rank saves outputs and post-call inputs; we compare them here.
3. Only if every trial on every rank is right: timing (see :mod:`pkb_ray.timing`), which also
   checks every timed output.
4. The rank set is killed (process sessions and all) whatever happened.

Any failure becomes a :class:`~pkb_ray.schema.Result` with its status; nothing raises out of
:meth:`Harness.evaluate` for a bad sample.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import shutil
import signal
import tempfile
import threading
import time
from collections import deque
from datetime import datetime, timezone
from pathlib import Path

import torch

from pkb_ray.config import EvalConfig, HardwareConfig
from pkb_ray.correctness import compare
from pkb_ray.cuda import DEFAULT_ARCH, ENV_ARCH, ENV_CACHE, ENV_TIMEOUT
from pkb_ray.problem import Problem, Tolerance, sol_time_us
from pkb_ray.ranks import RankSet, StepOutcome
from pkb_ray.runner.protocol import tensor_file
from pkb_ray.schema import Result, Sample, Status, TrialRecord
from pkb_ray.timing import median_iqr, sample_time, speedup

TIMING_SEED_OFFSET = 1_000_000  # timing inputs never coincide with trial inputs


class ReferenceFailed(RuntimeError):
    """The reference itself failed: a problem or evaluator bug, never a sample's fault."""


def seeds_for(cfg: EvalConfig) -> tuple[list[int], list[int]]:
    trial = [cfg.seed + i for i in range(cfg.trials)]
    timing = [cfg.seed + TIMING_SEED_OFFSET + i for i in range(cfg.timing_sets)]
    return trial, timing


class ReferenceCache:
    """Reference outputs on disk, keyed by everything they depend on."""

    def __init__(self, root: Path, take, release):
        self.root = Path(root) / "references"
        self.root.mkdir(parents=True, exist_ok=True)
        self._take = take  # (job_dir) -> a RankSet on this gang's devices that has imported no candidate
        self._release = release  # (RankSet) -> None: kill it

    def ensure(self, problem: Problem, world_size: int, dtype: str, size: dict, seeds: list[int],
               device_type: str, timeout_s: float, startup_timeout_s: float, nodes: int = 1) -> Path:
        # over nodes, NCCL may sum in another order than inside one: a layout has its own references
        key = json.dumps([problem.id, hashlib.sha256(problem.source().encode()).hexdigest(), world_size,
                          dtype, sorted(size.items()), seeds, device_type, torch.__version__]
                         + ([nodes] if nodes > 1 else []))
        final = self.root / hashlib.sha256(key.encode()).hexdigest()[:24]
        if (final / "complete").exists():
            return final
        work = Path(tempfile.mkdtemp(prefix="ref-", dir=self.root))
        ranks = self._take(work / "job")
        try:
            ready = ranks.wait_ready(startup_timeout_s)
            if not ready.ok:
                raise ReferenceFailed(f"reference ranks did not start: {describe(ready, ranks)}")
            out_dir = work / "out"
            out_dir.mkdir()
            cmd = {"step": "reference", "problem_path": str(problem.path), "dtype": dtype, "size": size,
                   "seeds": seeds, "out_dir": str(out_dir)}
            outcome = ranks.run(cmd, timeout_s)
            if not outcome.ok:
                raise ReferenceFailed(f"reference of {problem.id} failed: {describe(outcome, ranks)}")
        finally:
            self._release(ranks)
        (out_dir / "complete").write_text(key)
        try:
            out_dir.rename(final)  # atomic; another gang may have won the race, which is fine
        except OSError:
            pass
        shutil.rmtree(work, ignore_errors=True)
        return final


def describe(outcome: StepOutcome, ranks: RankSet) -> str:
    """A one-paragraph account of a failed step, for result messages."""
    for rank, code in sorted(outcome.dead.items()):
        how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
        tail = ranks.log_tail(rank)
        return f"rank {rank} {how} during {outcome.phases.get(rank, '?')!r}" + (f"; its output:\n{tail}" if tail else "")
    for rank, report in sorted(outcome.reports.items()):
        if report.get("status") != "ok":
            return f"rank {rank}: {report.get('message', '')}"
    if outcome.missing:
        where = "; ".join(f"rank {r} in {outcome.phases.get(r, '?')!r}" for r in outcome.missing)
        return f"no answer after {outcome.elapsed_s:.1f} s: {where}"
    return "ok"


def failure_status(outcome: StepOutcome) -> tuple[Status, int | None] | None:
    """Root cause of a failed step: a silent death first, then a reported error, then a hang."""
    if outcome.dead:
        return Status.CRASH, min(outcome.dead)
    errors = [(r, rep) for r, rep in sorted(outcome.reports.items()) if rep.get("status") != "ok"]
    if errors:
        rank, report = errors[0]
        return Status(report["status"]), rank
    if outcome.missing:
        return Status.TIMEOUT, outcome.missing[0]
    return None


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
                 problems: dict[str, Problem], work_dir: Path, cache_dir: Path, launcher=None):
        """``launcher(job_dir=..., backend=..., ...)`` starts a rank set with RankSet's interface;
        by default a :class:`~pkb_ray.ranks.RankSet` on ``devices`` (one node). A gang spread over
        nodes passes a :class:`pkb_ray.spread.SpreadRankSet` maker, ``devices`` then listing all W."""
        self.devices = devices
        self._launcher = launcher or functools.partial(RankSet, devices)
        self.nodes = getattr(launcher, "nodes", 1)
        self.cfg = eval_cfg
        self.hardware = hardware
        self.problems = problems
        self.work_dir = Path(work_dir)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.references = ReferenceCache(cache_dir, self._clean_ranks, self._retire)
        self._ahead: deque[RankSet] = deque()  # started, oldest first
        self._reapers: list[threading.Thread] = []
        # where load_cuda in a rank finds what the compile stage built (pkb_ray.cuda), and the
        # profile's NCCL settings (network interfaces between nodes, transports)
        self._rank_env = {ENV_ARCH: hardware.arch or DEFAULT_ARCH, ENV_CACHE: str(Path(cache_dir) / "cuda"),
                          ENV_TIMEOUT: str(eval_cfg.compile_timeout_s), **hardware.nccl_env,
                          **(hardware.spread_nccl_env if self.nodes > 1 else {})}
        self.versions = {"torch": torch.__version__, "python": platform.python_version(),
                         "backend": hardware.backend}
        if hardware.device == "cuda" and torch.cuda.is_available():
            self.versions["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
            self.versions["gpu"] = torch.cuda.get_device_name(0)

    def _spawn(self, job_dir: Path) -> RankSet:
        threads = max(1, (os.cpu_count() or 1) * self.nodes // len(self.devices))
        # the ranks' own collective timeout is a backstop: the parent kills a step at timeout_s first,
        # so a hang is reported as a timeout, not as the crash NCCL's watchdog would make of it
        return self._launcher(backend=self.hardware.backend, job_dir=job_dir, pg_timeout_s=self.cfg.timeout_s + 15.0,
                              num_threads=threads, multicast=self.hardware.nvlink_multicast, env=self._rank_env)

    def _clean_ranks(self, job_dir: Path) -> RankSet:
        """Ranks for reference outputs: a prewarmed set if one is there (it has imported no
        candidate, and it saves a start: ~4 s on GPU, paid once per new problem), else a new one."""
        if self._ahead:
            ranks = self._ahead.popleft()
            self.prewarm()
            return ranks
        return self._spawn(job_dir)

    def _take_ranks(self) -> RankSet:
        if not self._ahead:  # quiet timing: the next batch starts together with this sample's set
            self._fill(self.cfg.prewarm + 1)
        return self._ahead.popleft()

    def _new_ranks(self) -> RankSet:
        return self._spawn(Path(tempfile.mkdtemp(prefix="sample-", dir=self.work_dir)))

    def _fill(self, depth: int) -> None:
        while len(self._ahead) < depth:
            self._ahead.append(self._new_ranks())

    def prewarm(self) -> None:
        """Have rank sets starting ahead (``prewarm`` of them), so the next samples find theirs ready.

        A set takes ~4 s to start on GPU (torch import, CUDA context, NCCL communicator), longer
        than a quick sample takes. But a set starting on the GPUs while a sample is timed disturbs
        the timing (copies of the reference on 2 x H200: speedup stdev 0.038 against 0.014). So
        with ``quiet_timing`` sets start in batches, when none is left, and the timing step first
        waits for any still starting; without it a new set starts as soon as one is taken.
        """
        if self.cfg.quiet_timing and self._ahead:
            return
        self._fill(self.cfg.prewarm)

    def _quiet(self) -> None:
        """Wait until no prewarmed set is still starting (quiet_timing); drop any that failed to."""
        if not self.cfg.quiet_timing:
            return
        for ranks in list(self._ahead):
            if not ranks.wait_ready(self.cfg.startup_timeout_s).ok:
                self._ahead.remove(ranks)
                self._retire(ranks)

    def _retire(self, ranks: RankSet) -> None:
        """Kill a used rank set now; reap it and delete its folder in the background."""
        ranks.signal_kill()

        def reap() -> None:
            ranks.kill()
            shutil.rmtree(ranks.job_dir, ignore_errors=True)

        self._reapers = [t for t in self._reapers if t.is_alive()]
        thread = threading.Thread(target=reap, name=f"reap-{ranks.job_dir.name}", daemon=True)
        thread.start()
        self._reapers.append(thread)

    def close(self) -> None:
        """Kill the prewarmed rank sets and wait until every rank process is gone."""
        while self._ahead:
            self._retire(self._ahead.popleft())
        for thread in self._reapers:
            thread.join(timeout=60)
        self._reapers.clear()

    def evaluate(self, sample: Sample) -> Result:
        started, t0 = datetime.now(timezone.utc), time.monotonic()
        clock = PhaseClock()
        problem = self.problems[sample.problem_id]
        dtype = self.cfg.dtype or problem.meta.dtypes[0]
        size_label, knobs = problem.size(self.cfg.size)
        common = dict(category=problem.meta.category, world_size=len(self.devices), nodes=self.nodes, dtype=dtype,
                      size=size_label,
                      hardware=self.hardware.name, device_backend=self.hardware.backend, versions=self.versions)
        trial_seeds, timing_seeds = seeds_for(self.cfg)
        expected_dir = self.references.ensure(problem, len(self.devices), dtype, knobs, trial_seeds + timing_seeds,
                                              self.hardware.device, self.cfg.timeout_s, self.cfg.startup_timeout_s,
                                              nodes=self.nodes)
        clock.lap("reference")
        ranks = self._take_ranks()
        try:
            if not self.cfg.quiet_timing:
                self.prewarm()
            fields = self._run(sample, problem, ranks, dtype, knobs, expected_dir, trial_seeds, timing_seeds, clock)
        finally:
            self._retire(ranks)
            clock.lap("cleanup")
        status, message = fields.pop("status"), fields.pop("message", "")
        return Result.for_sample(sample, status, message, started_at=started, finished_at=datetime.now(timezone.utc),
                                 eval_seconds=time.monotonic() - t0, phase_seconds=clock.laps, **common, **fields)

    def _run(self, sample, problem, ranks, dtype, knobs, expected_dir, trial_seeds, timing_seeds, clock) -> dict:
        ready = ranks.wait_ready(self.cfg.startup_timeout_s)
        if not ready.ok:
            raise RuntimeError(f"rank processes did not start: {describe(ready, ranks)}")
        clock.lap("ready")
        candidate = ranks.job_dir / "candidate.py"
        candidate.write_text(sample.source)
        out_dir = ranks.job_dir / "outputs"
        out_dir.mkdir()
        base = {"problem_path": str(problem.path), "dtype": dtype, "size": knobs}
        outcome = ranks.run({**base, "step": "trials", "candidate_path": str(candidate), "seeds": trial_seeds,
                             "expected_dir": str(expected_dir), "out_dir": str(out_dir)}, self.cfg.timeout_s)
        clock.lap("trials")
        failed = failure_status(outcome)
        if failed:
            return {"status": failed[0], "failed_rank": failed[1], "message": describe(outcome, ranks)}
        tol = self.tolerance(problem, dtype)
        trials = [self._check_trial(expected_dir, out_dir, seed, rank, tol)
                  for seed in trial_seeds for rank in range(len(self.devices))]
        clock.lap("check")
        bad = next((t for t in trials if not t.ok), None)
        if bad:
            return {"status": Status.WRONG_OUTPUT, "failed_rank": bad.rank, "trials": trials,
                    "message": f"trial seed={bad.seed} rank {bad.rank}: {bad.message}"}
        self._quiet()
        clock.lap("quiet")
        outcome = ranks.run({**base, "step": "timing", "seeds": timing_seeds, "warmup": self.cfg.warmup,
                             "rounds": self.cfg.rounds, "round_us": self.cfg.round_us,
                             "max_round_calls": self.cfg.max_round_calls, "expected_dir": str(expected_dir),
                             "tolerance": {"atol": tol.atol, "rtol": tol.rtol}},
                            self.cfg.timeout_s)
        clock.lap("timing")
        failed = failure_status(outcome)
        if failed:
            return {"status": failed[0], "failed_rank": failed[1], "trials": trials,
                    "message": "during timing: " + describe(outcome, ranks)}
        return self._timing_fields(problem, dtype, knobs, outcome, trials)

    def tolerance(self, problem: Problem, dtype: str) -> Tolerance:
        """The problem's tolerance for ``dtype``, unless ``eval.tolerances`` overrides it."""
        override = self.cfg.tolerance_override(problem.id, dtype)
        if override is None:
            return problem.tolerance(dtype)
        return Tolerance(atol=override.atol, rtol=override.rtol, reason="set by eval.tolerances")

    def _check_trial(self, expected_dir: Path, out_dir: Path, seed: int, rank: int, tol) -> TrialRecord:
        expected = torch.load(tensor_file(expected_dir, seed, rank))
        try:
            actual = torch.load(tensor_file(out_dir, seed, rank))
        except Exception as exc:  # noqa: BLE001 - a missing or unreadable output file
            return TrialRecord(seed=seed, rank=rank, ok=False, message=f"outputs unreadable: {exc}")
        found = compare(expected["outputs"], actual["outputs"], tol.atol, tol.rtol, "output")
        found = found or compare(expected["inputs_after"], actual["inputs_after"], 0.0, 0.0, "input")
        if found and found.where.startswith("input"):
            found = type(found)(found.where, "changed by the call (the reference leaves it as it was): " + found.message)
        return TrialRecord(seed=seed, rank=rank, ok=found is None, message=str(found) if found else "",
                           max_abs_error=found.max_abs_error if found else 0.0)

    def _timing_fields(self, problem, dtype, knobs, outcome: StepOutcome, trials) -> dict:
        reports = [outcome.reports[r] for r in range(len(self.devices))]
        timed = [TrialRecord(kind="timed", seed=m["seed"], rank=r, ok=False, message=f"{m['side']} iter {m['iter']}: {m['message']}",
                             max_abs_error=m["max_abs_error"]) for r, rep in enumerate(reports) for m in rep["mismatches"]]
        ref = [median_iqr(rep["ref_us"]) for rep in reports]
        cand = [median_iqr(rep["cand_us"]) for rep in reports]
        ref_t, cand_t = sample_time([m for m, _ in ref]), sample_time([m for m, _ in cand])
        sol_us = sol_time_us(problem, knobs, len(self.devices), dtype, self.hardware, nodes=self.nodes)
        fields = dict(trials=trials + timed, ref_median_us=[m for m, _ in ref], ref_iqr_us=[q for _, q in ref],
                      cand_median_us=[m for m, _ in cand], cand_iqr_us=[q for _, q in cand],
                      ref_time_us=ref_t, cand_time_us=cand_t, speedup=speedup(ref_t, cand_t),
                      sol_time_us=sol_us, sol_fraction=sol_us / cand_t if cand_t > 0 else None,
                      timed_seconds=max(rep["timed_seconds"] for rep in reports),
                      calls_per_round=reports[0]["calls_per_round"])
        ref_bad = [t for t in timed if t.message.startswith("ref ")]
        cand_bad = [t for t in timed if t.message.startswith("cand ")]
        if ref_bad:
            return {**fields, "status": Status.WRONG_OUTPUT, "failed_rank": ref_bad[0].rank,
                    "message": "the reference gave a wrong answer in the candidate's processes (the candidate "
                               f"changed torch or shared state): rank {ref_bad[0].rank} {ref_bad[0].message}"}
        if cand_bad:
            return {**fields, "status": Status.WRONG_OUTPUT, "failed_rank": cand_bad[0].rank,
                    "message": f"a timed call gave a wrong answer (e.g. a cached result): rank {cand_bad[0].rank} "
                               f"seed={cand_bad[0].seed} {cand_bad[0].message}"}
        return {**fields, "status": Status.CORRECT}
