"""From what the steps of one sample left behind to its status: pure, no processes, no I/O.

Inputs are of two trust levels. What a *candidate's* rank set reports (its times, commitments,
output devices, the names of functions it found replaced) is forgeable: the candidate shares the
process. What a *clean* rank set reports (the comparisons) and what the parent observed itself
(deaths, deadlines, its clock around each region, the freezer's proof) is not. A forged report can only make a
candidate look worse, or be caught here: never pass a check that the clean side or the parent's
clock decides. Every report arrives as its step's :mod:`pkb_ray.spec.wire` record, or as a
:class:`~pkb_ray.spec.wire.Failure` when it did not parse (``unreadable_report``: tampering, rule 1).

The harness gathers :class:`Evidence` stage by stage and asks :func:`judge` after each; the rules
apply in the order of :data:`RULES`, first match wins, each to the evidence it needs (one whose
stage has not run yet does not apply):
1. The trials' step failed: a silent death is a crash, a reported error its status, a missing
   report a timeout, a report that is not the step's record tampering (:func:`step_failure`).
2. The candidate's process says, after the trials, the evaluator's functions were replaced: tampering.
3. Trials: outputs on another device than the inputs, sharing memory with an input where the
   reference's do not, or a clean comparison that failed: wrong output.
4. A timing step failed (as in 1), or the candidate's process reported replacements then or after
   the rounds: its status, or tampering.
   A process of the candidate's set that ran while the set was stopped (the freezer's proof, by
   CPU time) escaped it: tampering. Staged inputs that do not fit the reference's, or lie where
   the trusted side cannot write them (:mod:`pkb_ray.evaluate.staging`): tampering.
5. Timing: an output on another device, or one buffer returned by every call: wrong output. A
   picked timed output not handed over: tampering; one that differs from the clean reference:
   wrong output. (Times are the parent's: nothing a rank reports about its time is judged.)
6. A correct sample beside which the reference ran slower than alone and than beside an honest
   copy of itself, in two evaluations: tampering (the findings are gathered after the sample's set
   is gone, by :mod:`pkb_ray.evaluate.screen`, measured by :mod:`pkb_ray.evaluate.interference`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from pkb_ray.measure.timing import region_time
from pkb_ray.spec.names import Side, Status, TimingMode
from pkb_ray.spec.wire import Answer, ChecksReport, Failure, Pick, RegionReport, TrialsReport

REPORTED_STATUSES = {Status.IMPORT_ERROR.value, Status.RUNTIME_ERROR.value}


@dataclass(frozen=True)
class Verdict:
    status: Status
    message: str
    rank: int | None = None


@dataclass
class StepView:
    """A step as the verdict sees it: reports by rank, silent deaths (exit codes), ranks with no
    answer, and the parent's account of what went wrong (log tails, phases) for the message."""

    reports: dict[int, Answer]
    dead: dict[int, int] = field(default_factory=dict)
    missing: list[int] = field(default_factory=list)
    account: str = ""


@dataclass
class Region:
    """One timed region as the parent saw it: the side, k calls, the parent's bracket (microseconds
    from resuming the side's set to its last rank's done line, for a fired region; to seeing every
    process of it stopped again otherwise), when each rank said it was done (microseconds from the
    same start), and each rank's report (the rank's own figures: diagnostics, never a time the
    verdict uses). Its time is the bracket less the side's fixed work plus the charge for work done
    after the done lines (:func:`pkb_ray.measure.timing.region_time`)."""

    side: Side
    k: int
    bracket_us: float
    reports: dict[int, RegionReport]
    nonce: int = 0
    mode: str = TimingMode.EAGER  # eager calls, or a graph replay
    arrived_us: dict[int, float] = field(default_factory=dict)
    aliases: dict[int, list[str]] = field(default_factory=dict)  # rank -> the parent's findings from the layouts
    started: float = 0.0  # the parent's perf_counter at the resume (a diagnostic, beside RegionReport.stamps)
    after_us: float = 0.0  # from the last done line to the last report (the work after the calls)
    fixed_us: float = 0.0  # the side's fixed work, subtracted (its blank regions)
    charge_us: float = 0.0  # work after the done lines beyond the reference's, added (candidates only)

    @property
    def us(self) -> float:
        return region_time(self.bracket_us, self.fixed_us, self.charge_us)

    @property
    def us_per_call(self) -> float:
        return self.us / self.k


@dataclass
class Evidence:
    """What one sample's evaluation has shown so far; None where its stage has not run."""

    device: dict[int, str]  # each rank's device, from its ready report
    trials: StepView | None = None  # the candidate's trials step
    trial_aliases: dict[int, dict[str, list[str]]] = field(default_factory=dict)  # rank -> seed -> the parent's findings
    checks: dict[int, ChecksReport] | None = None  # the clean set's comparisons of the trials
    reference: dict | None = None  # the reference's aliases per seed (from the store)
    timing_failed: StepView | None = None  # the timing step that failed, if one did
    timing_what: str = ""  # which
    regions: list[Region] | None = None  # the timed regions
    watched: dict[int, Answer] = field(default_factory=dict)  # the candidate's reports after the rounds
    picks: dict[int, Pick] = field(default_factory=dict)
    timed_checks: dict[int, ChecksReport] | None = None  # the clean set's comparisons of the picked calls
    escaped: str = ""  # how the candidate's processes ran while stopped (the freezer's CPU-time proof)
    misplaced: str = ""  # why its staged inputs could not be filled where it said they lie (pkb_ray.evaluate.staging)
    interference: list[str] = field(default_factory=list)  # each evaluation's finding of a slowed reference


def _trials_failed(e: Evidence) -> Verdict | None:
    """Rule 1: a trial step that did not end well (no report in time, a crash, an error raised by
    the sample, an unreadable report) gives that step's status."""
    return _step(e.trials) if e.trials is not None else None


def _trials_tampered(e: Evidence) -> Verdict | None:
    """Rule 2: what the candidate's watches found replaced during the trials (the evaluator's or
    torch's functions) is tampering."""
    return tampering(e.trials.reports) if e.trials is not None else None


def _trials_wrong(e: Evidence) -> Verdict | None:
    """Rule 3: the trials' outputs, read by the trusted side, against the reference's: a mismatch,
    an output that aliases an input, an input written that the reference leaves alone, or an
    output on another device is wrong_output."""
    if e.checks is None:
        return None
    return trial_verdict(e.trials.reports, e.checks, e.reference or {}, e.device, e.trial_aliases)


def _timing_failed(e: Evidence) -> Verdict | None:
    """Rule 4: during timing, a process that ran while its set was proven stopped, staged inputs
    that are not where the rank said, a failed step or a replaced function is tampering (or the
    failed step's status)."""
    if e.escaped:
        return Verdict(Status.TAMPERING, f"during timing ({e.timing_what}): {e.escaped}: it escaped the freezer "
                                         "while the reference was timed")
    if e.misplaced:
        return Verdict(Status.TAMPERING, f"during timing ({e.timing_what}): {e.misplaced}: its timed calls' inputs "
                                         "are not where its rank said they lie")
    if e.timing_failed is not None:
        return _step(e.timing_failed, f"during timing ({e.timing_what}): ") or tampering(e.timing_failed.reports)
    return tampering(e.watched)


def _timing_wrong(e: Evidence) -> Verdict | None:
    """Rule 5: the timed calls picked after their regions, checked as the trials are (rule 3's
    checks, on the round's own inputs): any that fails is wrong_output."""
    if e.regions is None or e.timed_checks is None:
        return None
    return timed_verdict(e.regions, e.timed_checks, e.picks, e.device, e.reference or {})


def _interfered(e: Evidence) -> Verdict | None:
    """Rule 6: the reference ran slower beside the sample than alone and than beside an honest copy
    of itself, in two evaluations (each finding's words): tampering. One evaluation is not enough:
    the machine's own load of the moment can do it once."""
    if len(e.interference) < 2:
        return None
    first, again = e.interference[:2]
    return Verdict(Status.TAMPERING, "the reference ran slower beside this sample than beside an honest copy of "
                                     f"itself, in two evaluations (interference): {first}; again: {again}")


RULES: tuple[Callable[[Evidence], Verdict | None], ...] = (
    _trials_failed, _trials_tampered, _trials_wrong, _timing_failed, _timing_wrong, _interfered)


def judge(evidence: Evidence) -> Verdict | None:
    """The first rule (in the order of :data:`RULES`) that the evidence so far breaks, or None."""
    for rule in RULES:
        found = rule(evidence)
        if found is not None:
            return found
    return None


def _step(step: StepView, prefix: str = "") -> Verdict | None:
    found = step_failure(step)
    if found is None:
        return None
    message = found.message if found.status is Status.TAMPERING else step.account
    return Verdict(found.status, prefix + message, found.rank)


def step_failure(step: StepView) -> Verdict | None:
    """Root cause of a failed step: a silent death first, then a reported error, then a hang."""
    if step.dead:
        return Verdict(Status.CRASH, "", min(step.dead))
    for rank, report in sorted(step.reports.items()):
        if not isinstance(report, Failure):
            continue
        if report.status in REPORTED_STATUSES:
            return Verdict(Status(report.status), report.message, rank)
        return Verdict(Status.TAMPERING, f"rank {rank} wrote a report the runner never writes "
                                         f"({report.status}): {report.message[:300]}", rank)
    if step.missing:
        return Verdict(Status.TIMEOUT, "", step.missing[0])
    return None


def tampering(reports: dict[int, Answer]) -> Verdict | None:
    """The candidate's process found the evaluator's own functions, or torch's, replaced."""
    for rank, report in sorted(reports.items()):
        replaced = getattr(report, "tampered", None) or []
        if replaced:
            more = f" (and {len(replaced) - 10} more)" if len(replaced) > 10 else ""
            names = ", ".join(map(str, replaced[:10])) + more
            return Verdict(Status.TAMPERING, f"rank {rank}: the candidate replaced {names} (the evaluator's "
                                             "functions, or torch's that the reference runs on)", rank)
    return None


# a trial check's kind -> the status it gives: memory the rank pointed at but that holds nothing is a
# forged report; memory CUDA IPC cannot share is a sample the evaluator cannot read (it says how to fix)
_STATUS_OF_KIND = {"unreadable": Status.TAMPERING, "unshareable": Status.RUNTIME_ERROR}


def trial_verdict(candidate: dict[int, TrialsReport], checks: dict[int, ChecksReport],
                  reference: dict, device: dict[int, str], aliases: dict[int, dict[str, list[str]]]) -> Verdict | None:
    """Trials of every rank: ``candidate`` its reports (devices per seed), ``checks`` the clean
    set's comparisons, ``reference`` the reference's aliases per seed, ``device`` each rank's,
    ``aliases`` what the parent found sharing memory (rank -> seed -> findings, from the layouts)."""
    for rank, report in sorted(candidate.items()):
        for seed, devices in sorted(report.devices.items()):
            wrong = [d for d in devices if not _same_device(d, device[rank])]
            if wrong:
                return Verdict(Status.WRONG_OUTPUT, f"trial seed={seed} rank {rank}: an output is on {wrong[0]}, "
                                                    f"the inputs on {device[rank]}", rank)
        for seed, found in sorted(aliases.get(rank, {}).items()):
            allowed = set(reference.get("aliases", {}).get(seed, []))
            extra = [a for a in found if a not in allowed]
            if extra:
                return Verdict(Status.WRONG_OUTPUT, f"trial seed={seed} rank {rank}: {extra[0]} (the reference's "
                                                    "does not)", rank)
    for rank, report in sorted(checks.items()):
        bad = next((c for c in report.checks if not c.ok), None)
        if bad:
            status = _STATUS_OF_KIND.get(bad.kind, Status.WRONG_OUTPUT)
            return Verdict(status, f"trial seed={bad.id} rank {rank}: {bad.where}: {bad.message}", rank)
    return None


def timed_verdict(regions: list[Region], checks: dict[int, ChecksReport], picks: dict[int, Pick],
                  device: dict[int, str], reference: dict) -> Verdict | None:
    """Timing: region reports (devices), what the parent found sharing memory (the same rules as the
    trials', against the reference's aliases on any trial seed), and the clean checks of the picked
    calls, whose outputs and inputs the parent read from the ranks' memory."""
    allowed = {a for found in reference.get("aliases", {}).values() for a in found}
    for region in regions:
        for rank, rep in sorted(region.reports.items()):
            if region.side is Side.CAND:
                wrong = [d for d in rep.devices if not _same_device(d, device[rank])]
                if wrong:
                    return Verdict(Status.WRONG_OUTPUT, f"timed call rank {rank}: an output is on {wrong[0]}, "
                                                        f"the inputs on {device[rank]}", rank)
                extra = [a for a in region.aliases.get(rank, []) if a not in allowed]
                if extra:
                    why = "it returns the same buffer every call" if "earlier" in extra[0] else "the reference's does not"
                    return Verdict(Status.WRONG_OUTPUT, f"timed calls rank {rank}: {extra[0]} ({why})", rank)
    for rank, report in sorted(checks.items()):
        for check in report.checks:
            if check.ok:
                continue
            pick = picks[check.id]
            where = f"{pick.side} {pick.mode} region {pick.region} call {pick.index}"
            if check.kind == "unshareable":
                return Verdict(Status.RUNTIME_ERROR, f"rank {rank} {where}: {check.message}", rank)
            if check.kind == "unreadable":
                return Verdict(Status.TAMPERING, f"rank {rank}: the {where} left nothing readable where its report "
                                                 f"said its tensors lie: {check.message}", rank)
            return Verdict(Status.WRONG_OUTPUT, f"a timed call gave a wrong answer (e.g. a cached result): rank {rank} "
                                                f"{where}: {check.where}: {check.message}", rank)
    return None


def _same_device(found: str, expected: str) -> bool:
    """``cuda`` and ``cuda:0`` name the same device when the rank's is ``cuda:0``."""
    if found == expected:
        return True
    kind, _, index = expected.partition(":")
    return found == kind and index in ("", "0")
