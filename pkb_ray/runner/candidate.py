"""A candidate's rank set's steps: ``trials`` (import the candidate, run it on the trial seeds,
hold what it returned and say where it lies), ``region`` and ``capture`` (its timed calls,
:mod:`pkb_ray.runner.session`) and ``watch`` (what the watches found, after the rounds).

Everything this set reports is forgeable (the candidate shares its process); the parent treats it
so: it reads the outputs itself, where the report says they lie, with the set stopped. After each
step the watches (:mod:`pkb_ray.runner.watch`) report what the candidate replaced.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

import torch

from pkb_ray.measure.correctness import output_devices, poison_like
from pkb_ray.runner import extensions
from pkb_ray.runner.loading import candidate_traceback, load_candidate
from pkb_ray.runner.protocol import Side, StepFailed
from pkb_ray.runner.session import RankSession
from pkb_ray.runner.watch import TorchWatch, behaviour, changed, watched
from pkb_ray.spec.names import Status
from pkb_ray.spec.wire import Capture, Command, Report, RunTrials, Stage, TimeRegion, TrialsReport, Watch, Watched, WatchReport


class CandidateSession(RankSession):
    """A rank of one sample's set: the candidate's calls only (the reference is timed in the clean set)."""

    side = Side.CAND

    def __init__(self, rank: int, world_size: int, device: torch.device, job_dir: Path):
        super().__init__(rank, world_size, device, job_dir)
        self.candidate: Callable[..., Any] | None = None
        self._originals: dict[str, tuple] = {}  # the evaluator's functions as they were before the candidate came
        self._torch: TorchWatch | None = None  # torch's functions likewise

    def steps(self) -> dict[type[Command], Callable[[Any], Report]]:
        return {RunTrials: self.trials, TimeRegion: self.region, Watch: self.watch, Capture: self.capture,
                Stage: self.stage}

    def timed_fn(self) -> Callable[..., Any]:
        if self.candidate is None:
            raise StepFailed(Status.RUNTIME_ERROR.value, "no candidate imported")
        return self.candidate

    def run(self, cmd: Command) -> Report:
        report = super().run(cmd)
        # not inside a region's bracket: the clean set's regions have no watch to match its cost; a
        # replacement made during regions is still there at the watch step that ends the rounds
        if self._torch is not None and isinstance(report, Watched):
            report = replace(report, tampered=changed(self._originals, watched()) + self._torch.replaced())
        return report

    def trials(self, cmd: RunTrials) -> TrialsReport:
        # torch extensions a candidate builds on the rank (load_inline) go to its own job folder;
        # those the compile stage built for this sample are imported from its cache folder
        os.environ["TORCH_EXTENSIONS_DIR"] = str(self.job_dir / "torch_extensions")
        builds = extensions.install(Path(cmd.prebuilt) if cmd.prebuilt else None,
                                    self.job_dir / "torch_extensions", cmd.arch_list or None)
        self._phase("import")
        try:
            self._originals = {name: behaviour(fn) for name, fn in watched().items()}
            self._torch = TorchWatch()
            module = load_candidate(cmd.candidate_path)
        except BaseException:  # noqa: BLE001 - SystemExit too: whatever import does is its verdict
            raise StepFailed(Status.IMPORT_ERROR.value, candidate_traceback()) from None
        solution = getattr(module, "solution", None)
        if not callable(solution):
            raise StepFailed(Status.IMPORT_ERROR.value, "the module defines no callable solution(...)")
        self.candidate = solution
        devices, held = {}, []  # every call's outputs and inputs stay alive until the next step
        for seed in cmd.seeds:
            self._phase(f"trial seed={seed}")
            inputs = self._inputs(seed)
            poison = poison_like(cmd.structure[str(self.rank)][str(seed)], self.device)
            del poison  # the blocks go back to the allocator, poisoned
            try:
                out = solution(*inputs)
                self._sync()
            except BaseException:  # noqa: BLE001
                raise StepFailed(Status.RUNTIME_ERROR.value, f"trial seed={seed}:\n{candidate_traceback()}") from None
            devices[str(seed)] = output_devices(out)
            held.append((out, inputs))
        self._held = held
        placed = dict(zip(map(str, cmd.seeds), self.placed([o for o, _ in held], [i for _, i in held])))
        return TrialsReport(devices=devices, calls=placed, rank_builds=builds["built"], handles=self.exported())

    def watch(self, cmd: Watch) -> WatchReport:
        self._held = None
        return WatchReport()
