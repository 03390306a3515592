"""What a result row says besides its status: a failed step's account, the clean set's findings as
trial records, and a correct sample's times, speedup and speed of light, all from what the trusted
side saw (the parent's clock around each region, :class:`pkb_ray.evaluate.verdict.Region`)."""

from __future__ import annotations

import platform
import signal
import time

import torch

from pkb_ray.evaluate.attempt import Timed
from pkb_ray.evaluate.rounds import Timing
from pkb_ray.evaluate.verdict import StepView
from pkb_ray.isolation.ranks import Ranks, StepOutcome
from pkb_ray.measure.timing import median_iqr, region_time, sample_time, speedup, speedup_interval
from pkb_ray.problem import Problem, Traffic, sol_time_us
from pkb_ray.spec.config import HardwareConfig
from pkb_ray.spec.names import Side, TimingMode
from pkb_ray.spec.schema import TrialRecord
from pkb_ray.spec.wire import ChecksReport, Failure


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


def view(outcome: StepOutcome, ranks: Ranks) -> StepView:
    """A step as the verdict sees it, with the parent's account of it when it went wrong."""
    return StepView(outcome.reports, outcome.dead, outcome.missing, "" if outcome.ok else describe(outcome, ranks))


def records(checks: dict[int, ChecksReport], kind: str = "trial") -> list[TrialRecord]:
    """The clean set's findings as the result's trial records."""
    return [TrialRecord(kind=kind, seed=c.id, rank=r, ok=c.ok, max_abs_error=c.max_abs_error,
                        message=f"{c.where}: {c.message}" if c.message else "")
            for r, rep in sorted(checks.items()) for c in rep.checks]


def software(hardware: HardwareConfig) -> dict[str, str]:
    """The versions every result of this process records."""
    found = {"torch": torch.__version__, "python": platform.python_version(), "backend": hardware.backend}
    if hardware.device == "cuda" and torch.cuda.is_available():
        found["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        found["gpu"] = torch.cuda.get_device_name(0)
    return found


class PhaseClock:
    """Seconds spent in each phase of one sample, for overhead accounting (Result.phase_seconds)."""

    def __init__(self) -> None:
        self.laps: dict[str, float] = {}
        self._last = time.monotonic()

    def lap(self, phase: str) -> None:
        now = time.monotonic()
        self.laps[phase] = round(self.laps.get(phase, 0.0) + now - self._last, 4)
        self._last = now


def _side_times(regions) -> tuple[tuple[list[tuple[float, float]], float], ...]:
    """(per-rank (median, IQR), the side's time) of each side, reference then candidate, all by the
    parent's clock: a rank's figure per call from resuming its set to its done line, the side's to
    its last rank's, each less the side's fixed work plus its charge (:attr:`Region.us`)."""
    ranks = sorted({r for g in regions for r in g.arrived_us})
    out = []
    for side in (Side.REF, Side.CAND):
        mine = [g for g in regions if g.side is side]
        per_rank = [median_iqr([region_time(g.arrived_us[r], g.fixed_us, g.charge_us) / g.k
                                for g in mine if r in g.arrived_us]) for r in ranks]
        out.append((per_rank, sample_time([median_iqr([g.us_per_call for g in mine])[0]])))
    return tuple(out)


def timed(timing: Timing, problem: Problem, knobs: dict, dtype: str, hardware: HardwareConfig, world_size: int,
          nodes: int, both_modes: bool, traced: dict | None = None) -> Timed:
    """Times, speedup and speed of light from the first mode that ran (graph before eager); with
    ``both_modes``, each mode's times too. ``traced``: each rank's traced traffic, the bound of a
    problem without one of its own (an imported one); no bound at all gives no fraction rather than 0."""
    by_mode = {mode: _side_times(timing.of(mode)) for mode in timing.modes}
    mode = timing.modes[0]
    (ref, ref_t), (cand, cand_t) = by_mode[mode]
    both = {f"{m}_{side.value}_time_us": t for m, sides in by_mode.items()
            for side, (_, t) in zip((Side.REF, Side.CAND), sides)} if both_modes else {}
    traffic = Traffic(**{k: max(t[k] for t in traced.values())
                         for k in ("interconnect_bytes", "flops", "hbm_bytes")}) if traced else None
    sol_us = sol_time_us(problem, knobs, world_size, dtype, hardware, nodes=nodes, traffic=traffic) or None
    spread = speedup_interval(*([g.us_per_call for g in timing.of(mode) if g.side is side]
                                for side in (Side.REF, Side.CAND)))
    return Timed(ref_median_us=[m for m, _ in ref], ref_iqr_us=[q for _, q in ref],
                 cand_median_us=[m for m, _ in cand], cand_iqr_us=[q for _, q in cand],
                 ref_time_us=ref_t, cand_time_us=cand_t, speedup=speedup(ref_t, cand_t),
                 speedup_lo=spread[0] if spread else None, speedup_hi=spread[1] if spread else None,
                 sol_time_us=sol_us, sol_fraction=sol_us / cand_t if sol_us and cand_t > 0 else None,
                 sol_source=("traced" if traffic else "model") if sol_us else "",
                 timed_seconds=timing.seconds, timing_mode=mode,
                 calls_per_round=timing.k_graph if mode == TimingMode.GRAPH else timing.k,
                 timed_rounds=sum(1 for g in timing.of(mode) if g.side is Side.CAND),
                 graph_error=timing.graph_error, by_mode=both)
