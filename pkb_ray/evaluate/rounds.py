"""The timing step of one sample, driven region by region from the parent (the convention is in
:mod:`pkb_ray.measure.timing`; this is its parent side).

Two rank sets take turns on the same devices: the gang's clean set times the reference, the
sample's own set the candidate. Exactly one set runs at a time: a step resumes its side's set and
ends by stopping it again, and seeing every process of it stopped (:class:`pkb_ray.isolation.freezer.Freezer`);
the other set stays stopped throughout. While the reference runs, nothing the candidate patched,
registered or started can run or touch it; before the candidate's next step the parent checks that
none of its processes gained CPU time while stopped (else it escaped the freezer).

Before a mode's rounds each set stages its timed calls' input buffers; for every round the parent
draws a fresh nonce, and the clean set makes the round's inputs from it and the sample's keys and
the trusted side writes them into both sides' buffers, the candidate stopped
(:mod:`pkb_ray.evaluate.staging`): call n of each side's region runs on the same inputs, and no candidate's
rank ever gets the nonce. Each side is armed once a mode and every region is fired by a line
(:meth:`RoundDriver._fire`): the parent times it with its own clock from resuming the set to the
last rank's done line, less the side's fixed work its blank regions time, plus any work after the
done lines beyond the reference's (:func:`settle`): the region's time, whatever the ranks report. After each
of the candidate's regions, its set stopped, the parent decides which calls to check (each with
probability ``checked_calls`` / the mode's calls, independently, never sent to the ranks); when
the round ends it reads those calls' outputs and inputs from both sets' memory itself
(:mod:`pkb_ray.isolation.memory`) and compares the candidate's with the reference's
(:mod:`pkb_ray.evaluate.round_checks`). A call with a tensor in the candidate's device memory is read,
recomputed and compared by the clean rank on that device at once, the candidate still stopped. From
where the ranks said their tensors lie the parent also judges what shares memory. Every wait ends
by the sample's :class:`~pkb_ray.evaluate.deadlines.Deadline` (the clean set's by it plus the margin).
"""

from __future__ import annotations

import secrets
import statistics
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from pkb_ray.evaluate.deadlines import MARGIN_S, Deadline
from pkb_ray.evaluate.round_checks import check_call
from pkb_ray.evaluate.staging import Copies, misfit
from pkb_ray.evaluate.verdict import Region
from pkb_ray.isolation.memory import Unreadable, write_capture
from pkb_ray.isolation.ranks import Ranks, StepOutcome
from pkb_ray.measure.correctness import entry_span, in_allocations
from pkb_ray.measure.correctness import layout_aliases
from pkb_ray.measure.keys import InputKeys
from pkb_ray.measure.timing import (calls_per_round, deferral_allowance, deferral_charge, fixed_times, round_order,
                                   speedup_interval)
from pkb_ray.runner.protocol import tensor_file
from pkb_ray.spec.config import EvalConfig
from pkb_ray.spec.names import Side
from pkb_ray.spec.names import TimingMode
from pkb_ray.spec.wire import (Answer, Capture, Case, CheckTimed, Command, Fill, Finding, Pick, RegionReport, Stage, Step,
                           TimeRegion, Tol, Watch)

REGION_POLL_S = 0.0002  # the parent's bracket is as fine as its look at the reports
FIRE_POLL_S = 0.02  # a fired region's wait: woken by the lines themselves; this bounds a look for deaths
# A graph replay's region holds at most this many times the eager region's calls. More calls share
# the synchronisations around a region better, but every call still costs its fresh inputs and
# its commitment on the rank: on 1 x H200 (NCCL at W=1), 16x read 1.07-1.10 us a call at 4 KiB
# against 1.19-1.26 us at 4x, and made the timing step 2-5x dearer (docs/benchmarks/timing.md).
GRAPH_CALLS_FACTOR = 4
FREEZE_TIMEOUT_S = 5.0  # how long the candidate's processes may take to stop (one in a driver call)
# a side's blank regions (the fixed work subtracted: settle) come in the first two rounds of every
# BLANK_EVERY: once where the side goes first (its set resumed right after its own last region) and
# once second (after the other set's), as its regions come
BLANK_EVERY = 8
STOP_EVERY = 10  # rounds between looks at the speedup's interval (sequential stopping: eval.min_rounds)
KEEP_BYTES = 256 << 20  # a clean rank's rounds of inputs made ahead, at most (host memory only)


class CleanSetFailed(RuntimeError):
    """A step of the clean set failed or did not answer: the evaluator's fault, never the sample's."""

    def __init__(self, what: str, outcome: StepOutcome):
        super().__init__(f"{what}: the clean rank set failed (dead {outcome.dead}, no answer from {outcome.missing}, "
                         f"reports {outcome.reports})"[:2000])
        self.outcome = outcome


@dataclass
class Timing:
    """What the timing step left: regions (timed ones only), the picked calls, or the step that failed."""

    regions: list[Region] = field(default_factory=list)
    picks: dict[int, Pick] = field(default_factory=dict)
    k: int = 1
    failed: StepOutcome | None = None
    what: str = ""  # which region failed
    seconds: float = 0.0
    graph_error: str = ""  # why graph mode was asked for and not used
    k_graph: int = 0  # calls per graph replay (calibrated on replays)
    watched: dict[int, Answer] = field(default_factory=dict)  # the candidate's reports after the rounds
    escaped: str = ""  # how the candidate's processes ran while stopped (the freezer's proof)
    misplaced: str = ""  # why the candidate's staged inputs could not be filled where it said they lie
    checks: dict[int, list[Finding]] = field(default_factory=dict)  # rank -> the clean set's findings on the picks
    blanks: list[Region] = field(default_factory=list)  # fired with no calls: each side's fixed work (k 0)

    def of(self, mode: str) -> list[Region]:
        return [r for r in self.regions if r.mode == mode]

    @property
    def modes(self) -> list[str]:
        """The timing modes that ran, the one the result's times use first (graph, where it ran)."""
        ran = {r.mode for r in self.regions}
        return [m for m in (TimingMode.GRAPH, TimingMode.EAGER) if m in ran]


class RoundDriver:
    """Runs warmup, calibration and the timed regions of one sample: the candidate's on its rank
    set ``ranks``, the reference's on the ``clean`` set with the candidate's processes stopped."""

    def __init__(self, ranks: Ranks | None, clean: Ranks, case: Case, cfg: EvalConfig, kept_dir: Path,
                 base_seeds: list[int], deadline: Deadline, keys: InputKeys | None = None, tol: Tol | None = None,
                 allocations: dict[int, dict[str, list]] | None = None):
        self.ranks, self.clean, self.case, self.cfg, self.kept_dir = ranks, clean, case, cfg, kept_dir
        self.tol = tol or Tol(atol=0.0, rtol=0.0)  # the problem's, for the checks of timed calls
        # rank -> the candidate's device allocations exported so far (base -> [size, IPC handle])
        self.allocations = allocations if allocations is not None else {}
        self.keys = keys.as_wire() if keys is not None else {}  # the sample's inputs' secrets (pkb_ray.measure.keys)
        self.clean_keys = keys.for_clean() if keys is not None else {}  # and the timed calls': clean sets only
        self.base_seeds = base_seeds  # make_inputs seeds of the base sets every timed call's inputs come from
        self.deadline = deadline
        self._bracket_us = 0.0  # of the last step: from resuming its set to seeing it stopped again
        self._arrived_us = {}  # of the last step: rank -> from resuming its set to its report
        self._started = 0.0  # of the last step: perf_counter at the resume
        self._described: dict[tuple, list] = {}  # (side, mode, rank) -> its last region's calls (as_before)
        self._stopped: dict[int, bool] = {}  # id(rank set) -> seen stopped since its last step
        self._pending: list[Pick] = []  # the round's picks the parent compares at its end
        self._held_outputs: dict[int, list[list[int]]] = {}  # rank -> its last eager region's outputs (still held)
        self._copies: dict[int, Copies] = {}  # rank -> its staged tensors in host memory, on both sides
        self._staged_inputs: dict[Side, dict[int, list]] = {}  # side -> rank -> its staged calls' input layouts
        self._host: dict[int, Copies] = {}  # the same, where every staged tensor lies in host memory
        self._kept: dict[int, list[list[list[int]]]] = {}  # rank -> rounds' inputs made ahead (where they lie)
        self._kept_from = 0  # the round the first of them is for
        self.rng = secrets.SystemRandom()
        self.timing = Timing()

    def run(self) -> Timing:
        t0 = time.monotonic()
        try:
            self._run()
        finally:
            self.resume_all()
            self.timing.seconds = time.monotonic() - t0
        return self.timing

    def _run(self) -> None:
        cfg = self.cfg
        for side in Side:  # JIT, allocator, NCCL channels
            if cfg.warmup and self._region(side, cfg.warmup, "warmup", timed=False) is None:
                return
        # k from the reference's own time per call (the clean set's clock: the candidate cannot slow it),
        # its last rank to start's (the others may wait for it in the first call: pkb_ray.evaluate.interference)
        region = self._region(Side.REF, cfg.timing_sets, "calibration", timed=False)
        k = self.timing.k = calls_per_round(min(r.us for r in region.reports.values()), cfg.round_us,
                                            cfg.max_round_calls)
        modes = {TimingMode.EAGER: [TimingMode.EAGER], TimingMode.GRAPH: [TimingMode.GRAPH],
                 TimingMode.BOTH: [TimingMode.EAGER, TimingMode.GRAPH]}[cfg.timing_mode]
        if TimingMode.GRAPH in modes:
            captured = self._capture_for_rounds(k)
            if captured is None:
                return
            if not captured:  # both sides eager, once
                modes = [TimingMode.EAGER]
        for mode in modes:
            if not self._rounds(mode, self.timing.k_graph if mode == TimingMode.GRAPH else k):
                return
        # the watches of the candidate's process run after this step, not in regions (runner.candidate)
        last = self._step(Side.CAND, Watch(case=self.case), "after the rounds")
        if last is not None:
            self.timing.watched = last.reports

    def quiet(self, mode: str, k: int) -> list[Region]:
        """The reference alone (this driver made with no candidate's ranks): a warmup, and ``rounds``
        timed regions of ``k`` calls in ``mode``, as the sample's rounds time it."""
        try:
            self._region(Side.REF, self.cfg.warmup or 1, "quiet warmup", timed=False)
            if mode == TimingMode.GRAPH:
                cmd = Capture(case=self.case, side=Side.REF, k=k, nonce=self.rng.getrandbits(55),
                              base_seeds=self.base_seeds)
                self._step(Side.REF, cmd, "capturing the reference alone")
            self._stage(mode, k)
            self._arm(Side.REF, k, mode, f"quiet {mode} rounds")
            nonces = [self.rng.getrandbits(56) for _ in range(self.cfg.rounds)]
            regions, blanks = [], []
            for i, nonce in enumerate(nonces):
                if i % BLANK_EVERY < 2:
                    blanks.append(self._blank(Side.REF, mode, f"quiet {mode} round {i}"))
                self._fill(mode, k, nonces, i, Side.REF, f"quiet {mode} round {i}")
                regions.append(self._fire(Side.REF, k, f"quiet {mode} round {i}", mode, nonce))
            settle(regions, blanks)
            return regions
        finally:
            self.resume_all()

    def _capture_for_rounds(self, k: int) -> bool | None:
        """Capture k calls a side, time one untimed replay a side, and capture again with more calls
        when a replay of k calls is much shorter than a round (replays cost less than eager calls;
        the synchronisation around a region is then shared by enough calls)."""
        captured = self._capture(k)
        if not captured:
            return captured
        region = self._region(Side.REF, k, "graph calibration", timed=False, mode=TimingMode.GRAPH)
        more = min(calls_per_round(min(r.us for r in region.reports.values()), self.cfg.round_us,
                                   self.cfg.max_round_calls), GRAPH_CALLS_FACTOR * k)
        self.timing.k_graph = k
        if more > 2 * k:
            captured = self._capture(more)
            self.timing.k_graph = more
        return captured

    def _capture(self, k: int) -> bool | None:
        """Each side's k calls captured into a CUDA graph on every rank: True, False (the reason in
        graph_error) or None (the step failed)."""
        for side in Side:
            cmd = Capture(case=self.case, side=side, k=k, nonce=self.rng.getrandbits(55), base_seeds=self.base_seeds,
                          keys=self.keys)
            outcome = self._step(side, cmd, f"capturing the {side.value} side")
            if outcome is None:
                return None
            refused = [(r, rep) for r, rep in sorted(outcome.reports.items()) if not rep.captured]
            if refused:
                rank, rep = refused[0]
                self.timing.graph_error = (f"{'reference' if side is Side.REF else 'candidate'} not captured (rank "
                                           f"{rank}): {rep.error[-1500:]}")
                return False
        return True

    def _rounds(self, mode: str, k: int) -> bool:
        """The timed rounds of one mode, interleaved; False when a step failed. Both sides' regions
        of a round get the same nonce (the same inputs, call for call). After the candidate's
        region (its processes stopped) the parent decides which of its calls to check (each with
        probability ``checked_calls`` / all the mode's calls, independently); when the round ends
        it compares them with the reference's same calls (:meth:`_check_round`)."""
        cfg = self.cfg
        # checks a sample of the calls of the rounds it will surely have (sequential stopping may end them early)
        chance = min(1.0, cfg.checked_calls / max(1, min(cfg.rounds, cfg.min_rounds or cfg.rounds) * k))
        if not self._stage(mode, k):
            return False
        for side in Side:
            if not self._arm(side, k, mode, f"{mode} rounds"):
                return False
        self._held_outputs = {}  # arming let go of what the candidate held
        nonces = [self.rng.getrandbits(56) for _ in range(cfg.rounds)]  # the rounds' inputs: never sent to the candidate
        regions, blanks = [], []
        try:
            for i, nonce in enumerate(nonces):
                pair_ = {}
                for side in round_order(i):
                    if i % BLANK_EVERY < 2:  # a blank a side in two rounds running: going first, then second
                        blank = self._blank(side, mode, f"{mode} round {i}")
                        if blank is None:
                            return False
                        blanks.append(blank)
                    if not self._fill(mode, k, nonces, i, side, f"{mode} round {i}"):
                        return False
                    region = pair_[side] = self._fire(side, k, f"{mode} round {i}", mode, nonce)
                    if region is None:
                        return False
                    regions.append(region)
                    if side is Side.CAND:
                        self._check_remote(region, i, chance)
                self._check_round(pair_[Side.REF], pair_[Side.CAND])
                if self._settled(i + 1, regions, blanks):
                    break
        finally:  # the regions timed so far, with their fixed work settled, whatever ended the rounds
            settle(regions, blanks)
            self.timing.regions.extend(regions)
            self.timing.blanks.extend(blanks)
        return True

    def _settled(self, done: int, regions: list[Region], blanks: list[Region]) -> bool:
        """Sequential stopping (``eval.min_rounds``): after ``done`` rounds, whether the speedup's
        interval already lies within ``eval.target_halfwidth`` of it (looked at every STOP_EVERY
        rounds from ``min_rounds`` on)."""
        cfg = self.cfg
        if cfg.min_rounds is None or done < cfg.min_rounds or (done - cfg.min_rounds) % STOP_EVERY:
            return False
        settle(regions, blanks)
        ref, cand = ([r.us_per_call for r in regions if r.side is side] for side in Side)
        spread = speedup_interval(ref, cand)
        if spread is None:
            return False
        mid = statistics.median(ref) / max(statistics.median(cand), 1e-12)
        return (spread[1] - spread[0]) / 2 <= cfg.target_halfwidth * mid

    def _arm(self, side: Side, k: int, mode: str, what: str) -> bool:
        """``side``'s ranks armed with the mode's region of k calls on their staged inputs (the
        region's command decoded, its calls laid out and the generation collected, untimed): each
        fire line runs it at once (:meth:`_fire`). False when the candidate's step failed."""
        described = mode == TimingMode.GRAPH and all((side, mode, r) in self._described for r in self.clean.ranks)
        cmd = TimeRegion(case=self.case, side=side, k=k, nonce=0, what=what, base_seeds=self.base_seeds, hold=True,
                         graph=mode == TimingMode.GRAPH, keys=self.keys, staged=True, described=described, fire=True)
        outcome = self._step(side, cmd, f"arming the {side.value} side's {what}")
        if outcome is None:
            return False
        self._note_handles(side, outcome.reports)
        return True

    def _blank(self, side: Side, mode: str, what: str) -> Region | None:
        """A blank region of ``side`` (fired with no calls: resumed, one device operation, done, its
        report, stopped): the fixed work its regions hold. On a GPU after the toucher's kernel, so
        that it starts with the same switch of context as a region after its fill."""
        if self.cfg.touch_devices and not self._host:
            cmd = Fill(case=self.case, k=0, nonces=[], base_seeds=self.base_seeds, graph=mode == TimingMode.GRAPH,
                       candidate=False, touch=True)
            self._step(Side.REF, cmd, f"touching the devices before a blank of {what}")
        return self._fire(side, 0, f"a blank of {what}", mode, 0, blank=True)

    def _fire(self, side: Side, k: int, what: str, mode: str, nonce: int, blank: bool = False) -> Region | None:
        """One armed region of ``side`` fired (:meth:`pkb_ray.isolation.ranks.RankSet.fire`), the other
        set stopped: its time is the parent's clock from the resume to the last rank's done line;
        the set is stopped once every report came (outside that time). None when the candidate's
        failed (``timing.failed``)."""
        what = f"{what} ({side.value})"
        ranks = self._runnable(side, Step.REGION, what)
        if ranks is None:
            return None
        left = self.deadline.left(self.cfg.timeout_s, margin=MARGIN_S if side is Side.REF else 0.0)
        ends: list = []
        self._stopped[id(ranks)] = False
        # the wait sleeps in select until a line lands (no polling: a parent that wakes every few
        # hundred microseconds takes the core a rank is pinned to, and delays its wake-up by a time slice)
        outcome = ranks.fire(blank, left, poll_s=FIRE_POLL_S, answered=lambda: ends.append(self._stop(ranks)))
        stopped = ends[0] if ends else self._stop(ranks)
        if self._concluded(side, outcome, stopped, Step.REGION, what) is None:
            return None
        if len(outcome.done_us) < len(ranks.ranks):  # a report with no done line before it
            rank = min(set(ranks.ranks) - set(outcome.done_us))
            return self._failed_with(Step.REGION, f"{what}: rank {rank} reported without saying its calls were done")
        done = max(outcome.done_us.values())
        after = max(max(outcome.report_us.get(r, d) - d for r, d in outcome.done_us.items()), 0.0)
        reports = {rank: self._as_before(side, mode, rank, rep) for rank, rep in outcome.reports.items()}
        if not blank:
            reports = {rank: with_staged_inputs(rep, self._staged_inputs.get(side, {}).get(rank, []))
                       for rank, rep in reports.items()}
        self._note_handles(side, outcome.reports)
        return Region(side=side, k=k, bracket_us=done, reports=reports, nonce=nonce, mode=mode,
                      arrived_us=dict(outcome.done_us), after_us=after, started=outcome.resumed)

    def _stage(self, mode: str, k: int) -> bool:
        """Both sides' staged inputs for the mode's k timed calls (:mod:`pkb_ray.evaluate.staging`): the
        candidate's first, then the clean set's, each clean rank told where its counterpart's lie.
        A candidate's that do not fit the reference's are tampering (``timing.misplaced``)."""
        graph, peer, staged = mode == TimingMode.GRAPH, {}, {}
        if self.ranks is not None:
            cmd = Stage(case=self.case, side=Side.CAND, k=k, base_seeds=self.base_seeds, graph=graph, keys=self.keys)
            outcome = self._step(Side.CAND, cmd, f"staging the candidate's {mode} inputs")
            if outcome is None:
                return False
            self._note_handles(Side.CAND, outcome.reports)
            for rank, rep in outcome.reports.items():
                staged[rank] = rep.inputs
                peer[str(rank)] = {"inputs": rep.inputs, "allocations": self.allocations[rank]}
        cmd = Stage(case=self.case, side=Side.REF, k=k, base_seeds=self.base_seeds, graph=graph, keys=self.clean_keys,
                    peer=peer, touch=self.cfg.touch_devices)
        outcome = self._step(Side.REF, cmd, f"staging the reference's {mode} inputs")
        self._staged_inputs = {Side.CAND: staged, Side.REF: {rank: rep.inputs for rank, rep in outcome.reports.items()}}
        self._copies, self._kept, self._kept_from = {}, {}, 0
        self._host = {}  # rank -> its clean rank's staged tensors, when every one lies in host memory
        for rank, rep in outcome.reports.items():
            self._host[rank] = Copies.of(rep.inputs, rep.on_device, rep.inputs)
        if any(len(c.reference) < sum(map(len, outcome.reports[r].inputs)) for r, c in self._host.items()):
            self._host = {}  # some lie in device memory: a fill step a round
        for rank, rep in outcome.reports.items():
            if rank not in staged:
                continue
            why = misfit(rep.inputs, rep.on_device, staged[rank], self.allocations.get(rank))
            if why:
                self.timing.misplaced, self.timing.what = f"rank {rank}: {why}", f"staging the {mode} inputs"
                return False
            self._copies[rank] = Copies.of(rep.inputs, rep.on_device, staged[rank])
            if self._host:
                self._host[rank] = self._copies[rank]
        return True

    def _fill(self, mode: str, k: int, nonces: list[int], i: int, side: Side, what: str) -> bool:
        """Round ``i``'s fresh inputs (from ``nonces[i]``) in ``side``'s staged buffers, just before
        its region (each side's inputs as fresh in its caches as the other's), the candidate
        stopped. Where every staged tensor lies in host memory the clean set makes many rounds'
        inputs in one step and the parent copies each into the buffers itself; else the clean set
        makes them in a step before each region and writes its own buffers, or the candidate's in
        device memory (the parent copying the rest)."""
        graph = mode == TimingMode.GRAPH
        if self._host:
            if i >= self._kept_from + len(next(iter(self._kept.values()), [])):  # the next rounds, made ahead
                nbytes = max(1, max(sum(entry_span(e)[1] for e in c.reference) for c in self._host.values()))
                ahead = nonces[i:i + max(1, KEEP_BYTES // nbytes)]
                cmd = Fill(case=self.case, k=k, nonces=ahead, base_seeds=self.base_seeds, graph=graph,
                           candidate=self.ranks is not None, keys=self.clean_keys, keep=True)
                outcome = self._step(Side.REF, cmd, f"making the inputs of {what} and the {len(ahead) - 1} after")
                self._kept = {rank: [[e for call in rnd for e in call] for rnd in rep.kept]
                              for rank, rep in outcome.reports.items()}
                self._kept_from = i
            return all(self._copy(rank, [self._kept[rank][i - self._kept_from][j] for j in copies.indexes], copies,
                                  side, what) for rank, copies in self._host.items())
        cmd = Fill(case=self.case, k=k, nonces=[nonces[i]], base_seeds=self.base_seeds, graph=graph,
                   candidate=side is Side.CAND, keys=self.clean_keys, touch=self.cfg.touch_devices)
        outcome = self._step(Side.REF, cmd, f"filling the inputs of {what} ({side.value})")
        if side is Side.REF:
            return True
        for rank, copies in self._copies.items():  # its tensors in host memory, from where the clean rank made them
            kept = [e for call in outcome.reports[rank].kept for e in call]
            if copies.indexes and not self._copy(rank, [kept[j] for j in copies.indexes], copies, side, what):
                return False
        return True

    def _copy(self, rank: int, source: list[list[int]], copies: Copies, side: Side, what: str) -> bool:
        """The bytes at ``source`` in clean rank ``rank``'s memory copied into ``side``'s staged host
        tensors; False (``timing.misplaced``) when the candidate's cannot be written where it said
        they lie."""
        try:
            blobs = self.clean.read_tensors(rank, source)
            if side is Side.REF:
                self.clean.write_tensors(rank, copies.reference, blobs)
                return True
        except Unreadable as exc:
            raise CleanSetFailed(f"copying the inputs of {what}: {exc}", StepOutcome(Step.FILL)) from None
        try:
            self.ranks.write_tensors(rank, copies.candidate, blobs)
        except Unreadable as exc:  # it said its buffers lie where nothing of its size does
            self.timing.misplaced, self.timing.what = f"rank {rank}: {exc}", f"filling the inputs of {what}"
            return False
        return True

    def _aliases(self, rank: int, mode: str, calls: list[tuple[list, list]]) -> list[str]:
        """What shares memory in one rank's region: an output with an input of its call or with an
        earlier call's output, the previous eager region's included. Each region's outputs stay held
        by the rank until its next region's calls are done (``TimeRegion.hold``), so no honest
        allocation can lie where one of them does: an output there is one buffer returned again
        (``shares_output_buffer.py``, whose regions of one call each a check inside a region never
        saw). A graph's replays write the outputs its capture made, by design: within the region only."""
        if mode != TimingMode.EAGER:
            return sorted({a for call in layout_aliases(calls) for a in call})
        earlier = self._held_outputs.get(rank, [])
        self._held_outputs[rank] = [e for outs, _ in calls for e in outs]
        found = layout_aliases([(earlier, []), *calls])[1:]
        return sorted({a for call in found for a in call})

    def _check_remote(self, region: Region, i: int, chance: float) -> None:
        """What shares memory (from where the ranks said their tensors lie); which calls of the
        region to check; and those of them with a tensor in the candidate's device memory, which
        only the clean rank on that device can read, read and compared by the clean set at once
        (a step of its own, the candidate still stopped): it recomputes the reference there. The
        other picks wait for the round's end (:meth:`_check_round`)."""
        region.aliases = {rank: self._aliases(rank, region.mode, [pair(c) for c in rep.calls])
                          for rank, rep in region.reports.items()}
        remote = []
        for index in range(region.k):
            if self.rng.random() >= chance:
                continue
            pick = Pick(id=len(self.timing.picks), side=Side.CAND, region=i, index=index, mode=region.mode,
                        nonce=region.nonce)
            self.timing.picks[pick.id] = pick
            calls = {rank: pair(rep.calls[index] if index < len(rep.calls) else None)
                     for rank, rep in region.reports.items()}
            if not any(in_allocations([*outs, *ins], self.allocations.get(rank))
                       for rank, (outs, ins) in calls.items()):
                self._pending.append(pick)
                continue
            remote.append(pick)
            for rank, (outputs, inputs) in calls.items():
                write_capture(tensor_file(self.kept_dir, pick.id, rank),
                              lambda entries, r=rank: self.ranks.read_tensors(r, entries), outputs, inputs,
                              self.allocations.get(rank))
        if remote:
            cmd = CheckTimed(case=self.case, picks=remote, base_seeds=self.base_seeds, actual_dir=str(self.kept_dir),
                             tolerance=self.tol, keys=self.clean_keys)
            outcome = self._step(Side.REF, cmd, f"checking calls of {region.mode} round {i}")
            for rank, report in outcome.reports.items():
                self.timing.checks.setdefault(rank, []).extend(report.checks)

    def _check_round(self, reference: Region, candidate: Region) -> None:
        """The round's picks left for its end, compared by the parent with the reference's same
        calls, both read from the ranks' memory (:mod:`pkb_ray.evaluate.round_checks`): neither set has
        run since its region, and both are stopped."""
        picks, self._pending = self._pending, []
        for pick in picks:
            for rank, rep in candidate.reports.items():
                ref = reference.reports[rank]
                try:
                    found = check_call(pick.id, pair(ref.calls[pick.index]),
                                       lambda entries, r=rank: self.clean.read_tensors(r, entries),
                                       pair(rep.calls[pick.index] if pick.index < len(rep.calls) else None),
                                       lambda entries, r=rank: self.ranks.read_tensors(r, entries), self.tol)
                except Unreadable as exc:  # the clean set's memory, where it said: the evaluator's fault
                    raise CleanSetFailed(f"reading the reference's call {pick.index} of round {pick.region}: {exc}",
                                         StepOutcome(Step.REGION)) from None
                self.timing.checks.setdefault(rank, []).append(found)

    def _step(self, side: Side, cmd: Command, what: str) -> StepOutcome | None:
        """One step on the set that runs ``side``, the other set stopped meanwhile: a candidate's
        by the sample's deadline, the clean set's by the deadline plus the margin. The bracket
        (:attr:`_bracket_us`) runs from resuming the set to seeing every process of it stopped
        again: whatever the set does in between, after its report too, is its time. None
        (``timing.failed`` set) when the candidate's step failed; the clean set's raises."""
        if isinstance(cmd, Capture):  # a new graph: its outputs are described again
            self._described = {slot: v for slot, v in self._described.items() if slot[0] is not side}
        ranks = self._runnable(side, cmd.step, what)
        if ranks is None:
            return None
        left = self.deadline.left(self.cfg.timeout_s, margin=MARGIN_S if side is Side.REF else 0.0)
        ends: list = []  # (seen stopped, when): set as soon as the last rank answered

        def stop() -> None:
            ends.append((self._stop(ranks), time.perf_counter()))

        t0 = time.perf_counter()
        self._stopped[id(ranks)] = False
        # resumed once its command is in the pipes: the ranks wake to it (RankSet.send)
        outcome = ranks.run(cmd, left, poll_s=REGION_POLL_S, answered=stop, resume=ranks.thaw)
        stopped, t1 = ends[0] if ends else (self._stop(ranks), time.perf_counter())
        self._bracket_us, self._started = (t1 - t0) * 1e6, t0
        self._arrived_us = {r: (at - t0) * 1e6 for r, at in outcome.arrived.items()}
        return self._concluded(side, outcome, stopped, cmd.step, what)

    def _runnable(self, side: Side, step: str, what: str) -> Ranks | None:
        """The set that runs ``side``'s step, once the other is stopped and, for the candidate's,
        proven not to have run while stopped; None (the step failed) otherwise."""
        if self.ranks is not None and self.deadline.left(self.cfg.timeout_s) <= 0:  # nothing more of this sample runs
            return self._failed_with(step, f"{what}, past the sample's deadline ({self.deadline.budget_s:.0f} s "
                                           "from its trials)")
        ranks, other = (self.ranks, self.clean) if side is Side.CAND else (self.clean, self.ranks)
        if not self._park(other, step, what):
            return None
        if side is Side.CAND:
            escaped = self.ranks.ran_while_frozen() if self._stopped.get(id(self.ranks)) else ""
            if escaped:  # it ran while the reference had the devices to itself
                self.timing.escaped, self.timing.what = escaped, what
                return None
        return ranks

    def _concluded(self, side: Side, outcome: StepOutcome, stopped: bool, step: str, what: str) -> StepOutcome | None:
        """``outcome``, or None (``timing.failed``) where the candidate's step failed or its set was
        not seen stopped after it; the clean set's failures raise."""
        if side is Side.REF:
            if not outcome.ok:
                raise CleanSetFailed(what, outcome)
            if not stopped:
                raise CleanSetFailed(f"{what}: the clean set did not stop", outcome)
            return outcome
        if not outcome.ok:
            late = outcome.missing and self.deadline.passed
            self.timing.failed, self.timing.what = outcome, what + (
                f", at the sample's deadline ({self.deadline.budget_s:.0f} s from its trials)" if late else "")
            return None
        if not stopped:
            return self._failed_with(step, f"{what}: the candidate's processes were not all seen stopped within "
                                           f"{FREEZE_TIMEOUT_S:.0f} s")
        return outcome

    def _stop(self, ranks: Ranks) -> bool:
        """Every process of ``ranks`` stopped, and seen so (:meth:`pkb_ray.isolation.freezer.Freezer.freeze`)."""
        stopped = ranks.freeze(FREEZE_TIMEOUT_S)
        self._stopped[id(ranks)] = stopped
        return stopped

    def _park(self, ranks: Ranks | None, step: str, what: str) -> bool:
        """The set that does not run this step stopped (it may be already); False (the step failed,
        or the clean set raised) when it could not be seen stopped in time."""
        if ranks is None or self._stopped.get(id(ranks)):
            return True
        if self._stop(ranks):
            return True
        if ranks is self.clean:
            raise CleanSetFailed(f"{what}: the clean set did not stop", StepOutcome(step))
        self._failed_with(step, f"{what}: the candidate's processes were not all seen stopped within "
                                f"{FREEZE_TIMEOUT_S:.0f} s")
        return False

    def resume_all(self) -> None:
        """Both sets running again (after the rounds: the checks, the watches, the next sample)."""
        for ranks in (self.ranks, self.clean):
            if ranks is not None:
                ranks.thaw()
                self._stopped[id(ranks)] = False

    def _failed_with(self, step: str, what: str) -> None:
        """The candidate's step as failed without an answer from its ranks (``what`` says why)."""
        self.timing.failed = StepOutcome(step, missing=list(self.ranks.ranks), phases=self.ranks.phases(),
                                         elapsed_s=time.monotonic() - self.deadline.started)
        self.timing.what = what
        return None

    def _region(self, side: Side, k: int, what: str, timed: bool, mode: str = TimingMode.EAGER,
                nonce: int | None = None) -> Region | None:
        staged = nonce is not None  # a timed round's: on the inputs the trusted side wrote (no nonce sent)
        nonce = self.rng.getrandbits(56) if nonce is None else nonce
        described = mode == TimingMode.GRAPH and all((side, mode, r) in self._described for r in self.clean.ranks)
        cmd = TimeRegion(case=self.case, side=side, k=k, nonce=0 if staged else nonce, what=what,
                         base_seeds=self.base_seeds, hold=timed, graph=mode == TimingMode.GRAPH, keys=self.keys,
                         staged=staged, described=described)
        outcome = self._step(side, cmd, f"{what} ({side.value})")
        if outcome is None:
            return None
        self._note_handles(side, outcome.reports)
        reports = {rank: self._as_before(side, mode, rank, rep) for rank, rep in outcome.reports.items()}
        if staged and timed:  # a call's inputs lie where the stage said: the report names its outputs only
            reports = {rank: with_staged_inputs(rep, self._staged_inputs.get(side, {}).get(rank, []))
                       for rank, rep in reports.items()}
        return Region(side=side, k=k, bracket_us=self._bracket_us, reports=reports, nonce=nonce,
                      mode=mode, arrived_us=self._arrived_us, started=self._started)

    def _note_handles(self, side: Side, reports: dict[int, Answer]) -> None:
        """The device allocations the candidate's ranks exported in a step (the clean rank reads its
        outputs and writes its staged inputs through them); the clean set's own are not kept."""
        if side is Side.CAND:
            for rank, rep in reports.items():
                self.allocations.setdefault(rank, {}).update(rep.handles)

    def _as_before(self, side: Side, mode: str, rank: int, rep: Answer) -> Answer:
        """``rep`` with its calls where its set's last region of ``mode`` said, when it says they lie
        as before (:attr:`~pkb_ray.spec.wire.RegionReport.as_before`: a graph's outputs); kept as the
        last description otherwise. A rank that says so with no description before names no call:
        its picked calls are not handed over (tampering)."""
        if not isinstance(rep, RegionReport):
            return rep
        slot = (side, mode, rank)
        if rep.as_before:  # only a graph's regions are told they may say so (TimeRegion.described)
            return replace(rep, calls=self._described.get(slot, []) if mode == TimingMode.GRAPH else [])
        if rep.calls and mode == TimingMode.GRAPH:
            self._described[slot] = rep.calls
        return rep


def settle(regions: list[Region], blanks: list[Region]) -> None:
    """Each fired region's fixed work and charge, from the blanks fired beside them
    (:func:`pkb_ray.measure.timing.fixed_times`, :func:`~pkb_ray.measure.timing.deferral_charge`),
    per mode."""
    for mode in {r.mode for r in regions}:
        mine = [r for r in regions if r.mode == mode]
        fixed = dict(zip(Side, fixed_times(*([b.bracket_us for b in blanks if b.mode == mode and b.side is side]
                                             for side in Side))))
        allowance = deferral_allowance([r.after_us for r in mine if r.side is Side.REF])
        for region in mine:
            region.fixed_us = fixed[region.side]
            region.charge_us = deferral_charge(region.after_us, allowance) if region.side is Side.CAND else 0.0


def with_staged_inputs(rep: Answer, inputs: list) -> Answer:
    """A region's report with each call's input layout taken from its set's stage report: a rank
    reports ``[outputs]`` for a call on staged inputs (the same, region after region, would cost
    time inside the bracket to describe again). A call reported otherwise is kept as it came."""
    if not isinstance(rep, RegionReport):
        return rep
    calls = [[*c, inputs[i]] if isinstance(c, list) and len(c) == 1 and i < len(inputs) else c
             for i, c in enumerate(rep.calls)]
    return replace(rep, calls=calls)


def pair(call) -> tuple[list, list]:
    """A call's (output layout, input layout) as a (forgeable) report gave it; nothing where it is malformed."""
    return (call[0], call[1]) if isinstance(call, list) and len(call) == 2 else ([], [])
