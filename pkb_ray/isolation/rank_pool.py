"""Rank sets on one gang's devices: candidates' sets started ahead, and the one clean set.

A candidate's rank set serves one sample and is killed after it; starting one costs ~4 s on GPU
(torch import, CUDA context, NCCL communicator), so ``prewarm`` of them start while earlier
samples run (:class:`RankPool`). The clean set (:class:`CleanRanks`) never imports a candidate;
it lives as long as the gang and computes reference outputs and every comparison a verdict
rests on.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections import deque
from pathlib import Path
from typing import Callable

from pkb_ray.isolation.ranks import Ranks
from pkb_ray.spec.names import Role


def retire(ranks: Ranks, reapers: list[threading.Thread]) -> None:
    """Kill a rank set now; reap it and delete its folder in the background."""
    ranks.signal_kill()

    def reap() -> None:
        ranks.kill()
        shutil.rmtree(ranks.job_dir, ignore_errors=True)

    reapers[:] = [t for t in reapers if t.is_alive()]
    thread = threading.Thread(target=reap, name=f"reap-{ranks.job_dir.name}", daemon=True)
    thread.start()
    reapers.append(thread)


class RankPool:
    """Candidates' rank sets, fresh for every sample, started ``prewarm`` ahead."""

    def __init__(self, spawn: Callable[[Path, str], Ranks], work_dir: Path, prewarm: int, quiet_timing: bool,
                 startup_timeout_s: float):
        self._spawn = spawn  # (job_dir, role) -> a started rank set
        self.work_dir = work_dir
        self.depth = prewarm
        self.quiet_timing = quiet_timing
        self.startup_timeout_s = startup_timeout_s
        self._ahead: deque[Ranks] = deque()  # started, oldest first
        self.reapers: list[threading.Thread] = []

    def take(self) -> Ranks:
        if not self._ahead:  # quiet timing: the next batch starts together with this sample's set
            self._fill(self.depth + 1)
        return self._ahead.popleft()

    def _fill(self, depth: int) -> None:
        while len(self._ahead) < depth:
            self._ahead.append(self._spawn(Path(tempfile.mkdtemp(prefix="sample-", dir=self.work_dir)), Role.CANDIDATE))

    def prewarm(self) -> None:
        """Have rank sets starting ahead (``prewarm`` of them), so the next samples find theirs ready.

        A set starting on the GPUs while a sample is timed disturbs the timing (copies of the
        reference on 2 x H200: speedup stdev 0.038 against 0.014). So with ``quiet_timing`` sets
        start in batches, when none is left, and the timing waits for any still starting
        (:meth:`quiet`); without it a new set starts as soon as one is taken.
        """
        if self.quiet_timing and self._ahead:
            return
        self._fill(self.depth)

    def quiet(self) -> None:
        """Wait until no prewarmed set is still starting and no retired one still dying
        (quiet_timing); drop any that failed to start. A killed set's CUDA contexts are torn down
        after its processes die, and that teardown slows the GPU: with prewarm=3 on one H200, the
        next sample's timing began right after the last set's kill and 2 of 8 honest reference
        copies were judged tampering (their reference 40-50 % slower than its quiet baseline);
        with prewarm=0 (a set starting in between) none of 8 (docs/benchmarks/interference.md)."""
        if not self.quiet_timing:
            return
        for thread in self.reapers:
            thread.join(timeout=self.startup_timeout_s)
        self.reapers[:] = [t for t in self.reapers if t.is_alive()]
        for ranks in list(self._ahead):
            if not ranks.wait_ready(self.startup_timeout_s).ok:
                self._ahead.remove(ranks)
                self.retire(ranks)

    def settle(self, timeout_s: float = 30.0) -> None:
        """Until no retired set is still dying and no prewarmed one still starting: nothing of a
        candidate alive, nothing loading the devices (for the quiet baseline of a reference)."""
        for thread in self.reapers:
            thread.join(timeout=timeout_s)
        self.reapers[:] = [t for t in self.reapers if t.is_alive()]
        for ranks in list(self._ahead):
            if not ranks.wait_ready(self.startup_timeout_s).ok:
                self._ahead.remove(ranks)
                self.retire(ranks)

    def retire(self, ranks: Ranks) -> None:
        retire(ranks, self.reapers)

    def close(self) -> None:
        """Kill the prewarmed sets and wait until every rank process is gone."""
        while self._ahead:
            self.retire(self._ahead.popleft())
        for thread in self.reapers:
            thread.join(timeout=60)
        self.reapers.clear()


class CleanRanks:
    """The gang's clean rank set: started on first use, restarted if it ever fails."""

    def __init__(self, spawn: Callable[[Path, str], Ranks], work_dir: Path, startup_timeout_s: float):
        self._spawn = spawn
        self.work_dir = work_dir
        self.startup_timeout_s = startup_timeout_s
        self._ranks: Ranks | None = None
        self.reapers: list[threading.Thread] = []

    def get(self) -> Ranks:
        """The running clean set, started now if there is none; raises if it cannot start."""
        if self._ranks is None:
            ranks = self._spawn(Path(tempfile.mkdtemp(prefix="clean-", dir=self.work_dir)), Role.CLEAN)
            ready = ranks.wait_ready(self.startup_timeout_s)
            if not ready.ok:
                retire(ranks, self.reapers)
                raise RuntimeError(f"clean rank processes did not start: dead {ready.dead}, no answer from "
                                   f"{ready.missing}; {ranks.log_tail(min(ranks.ranks))}")
            self._ranks = ranks
        return self._ranks

    def fail(self) -> None:
        """A step of the clean set failed: kill it; the next :meth:`get` starts another."""
        if self._ranks is not None:
            retire(self._ranks, self.reapers)
            self._ranks = None

    def close(self) -> None:
        self.fail()
        for thread in self.reapers:
            thread.join(timeout=60)
        self.reapers.clear()
