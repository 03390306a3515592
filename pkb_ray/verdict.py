"""From what the steps of one sample left behind to its status: pure, no processes, no I/O.

Inputs are of two trust levels. What a *candidate's* rank set reports (its times, commitments,
output devices, the names of functions it found replaced) is forgeable: the candidate shares the
process. What a *clean* rank set reports (the comparisons) and what the parent observed itself
(deaths, deadlines, its clock around each region) is not. A forged report can only make a
candidate look worse, or be caught here: never pass a check that the clean side or the parent's
clock decides. Every report arrives as its step's :mod:`pkb_ray.wire` record, or as a
:class:`~pkb_ray.wire.Failure` when it did not parse (``unreadable_report``: tampering, rule 1).

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
5. Timing: an output on another device, or one buffer returned by every call: wrong output. A time
   that cannot be true (more than the parent's bracket), or time hidden outside the reported
   figure (see :func:`forged_time`): tampering. A picked timed output not handed over: tampering;
   one that differs from the clean reference: wrong output.
6. (In the harness, after the sample's set is gone: :mod:`pkb_ray.interference`.) A correct
   sample beside which the reference ran slower than alone, in two evaluations: tampering
   (:func:`interfered`).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Callable

from pkb_ray.names import Side, Status, TimingMode
from pkb_ray.wire import Answer, ChecksReport, Failure, Pick, RegionReport, TrialsReport

REPORTED_STATUSES = {Status.IMPORT_ERROR.value, Status.RUNTIME_ERROR.value}
BRACKET_SLACK_US = 50.0  # clock reads on either side of a message: a report may exceed the bracket by this
HIDDEN_FLOOR_US = 200.0  # unexplained time per region the candidate side may have beyond the reference's...
HIDDEN_FRACTION = 0.5  # ...or this fraction of the reference's reported region, whichever is larger...
# ...or this fraction of the candidate's own reported region: outside its timed calls, a candidate
# that makes many collective calls leaves the collective library work that grows with them (16
# gloo all-reduces a call: +0.1-0.5 ms a region beyond the reference's on 2 cores, up to 3 % of
# its region). A forger hides at most this fraction of its time, so it gains at most ~10 %.
HIDDEN_FRACTION_OF_CAND = 0.1
NOISE_SIGMAS = 3.0  # ...or this many standard errors of the difference (the messages' own jitter)


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
    """One timed region as the parent saw it: the side, k calls, the parent's bracket (microseconds,
    from sending the command to the last rank's report) and each rank's report."""

    side: Side
    k: int
    bracket_us: float
    reports: dict[int, RegionReport]
    nonce: int = 0
    mode: str = TimingMode.EAGER  # eager calls, or a graph replay


@dataclass
class Evidence:
    """What one sample's evaluation has shown so far; None where its stage has not run."""

    device: dict[int, str]  # each rank's device, from its ready report
    trials: StepView | None = None  # the candidate's trials step
    checks: dict[int, ChecksReport] | None = None  # the clean set's comparisons of the trials
    reference: dict | None = None  # the reference's aliases per seed (from the store)
    timing_failed: StepView | None = None  # the timing step that failed, if one did
    timing_what: str = ""  # which
    regions: list[Region] | None = None  # the timed regions
    watched: dict[int, Answer] = field(default_factory=dict)  # the candidate's reports after the rounds
    picks: dict[int, Pick] = field(default_factory=dict)
    timed_checks: dict[int, ChecksReport] | None = None  # the clean set's comparisons of the picked calls


def _trials_failed(e: Evidence) -> Verdict | None:
    return _step(e.trials) if e.trials is not None else None


def _trials_tampered(e: Evidence) -> Verdict | None:
    return tampering(e.trials.reports) if e.trials is not None else None


def _trials_wrong(e: Evidence) -> Verdict | None:
    if e.checks is None:
        return None
    return trial_verdict(e.trials.reports, e.checks, e.reference or {}, e.device)


def _timing_failed(e: Evidence) -> Verdict | None:
    if e.timing_failed is not None:
        return _step(e.timing_failed, f"during timing ({e.timing_what}): ") or tampering(e.timing_failed.reports)
    return tampering(e.watched)


def _timing_wrong(e: Evidence) -> Verdict | None:
    if e.regions is None or e.timed_checks is None:
        return None
    return timed_verdict(e.regions, e.timed_checks, e.picks, e.device)


RULES: tuple[Callable[[Evidence], Verdict | None], ...] = (
    _trials_failed, _trials_tampered, _trials_wrong, _timing_failed, _timing_wrong)


def judge(evidence: Evidence) -> Verdict | None:
    """The first rule (in the order of :data:`RULES`) that the evidence so far breaks, or None."""
    for rule in RULES:
        found = rule(evidence)
        if found is not None:
            return found
    return None


def interfered(first: str, again: str) -> Verdict:
    """Rule 6: the reference slowed beside the sample in two evaluations (each finding's words)."""
    return Verdict(Status.TAMPERING, "the reference ran slower beside this sample than alone, in two evaluations "
                                     f"(interference): {first}; again: {again}")


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


def trial_verdict(candidate: dict[int, TrialsReport], checks: dict[int, ChecksReport],
                  reference: dict, device: dict[int, str]) -> Verdict | None:
    """Trials of every rank: ``candidate`` its reports (devices, aliases per seed), ``checks`` the
    clean set's comparisons, ``reference`` the reference's aliases per seed, ``device`` each rank's."""
    for rank, report in sorted(candidate.items()):
        for seed, devices in sorted(report.devices.items()):
            wrong = [d for d in devices if not _same_device(d, device[rank])]
            if wrong:
                return Verdict(Status.WRONG_OUTPUT, f"trial seed={seed} rank {rank}: an output is on {wrong[0]}, "
                                                    f"the inputs on {device[rank]}", rank)
        for seed, found in sorted(report.aliases.items()):
            allowed = set(reference.get("aliases", {}).get(seed, []))
            extra = [a for a in found if a not in allowed]
            if extra:
                return Verdict(Status.WRONG_OUTPUT, f"trial seed={seed} rank {rank}: {extra[0]} (the reference's "
                                                    "does not)", rank)
    for rank, report in sorted(checks.items()):
        bad = next((c for c in report.checks if not c.ok), None)
        if bad:
            return Verdict(Status.WRONG_OUTPUT, f"trial seed={bad.id} rank {rank}: {bad.where}: {bad.message}", rank)
    return None


def forged_time(regions: list[Region]) -> Verdict | None:
    """Times that cannot be true.

    A rank's region figure times k calls inside the parent's bracket, so k x figure can never
    exceed the bracket. What the bracket holds beyond the figure (input generation, commitments,
    the messages) is the same work for both sides; a candidate that reports less than it took
    moves that time into the unexplained part. Per rank, over the rounds (each a reference and a
    candidate region back to back), the median of the candidate's unexplained time minus the
    reference's may be at most the largest of HIDDEN_FLOOR_US,
    HIDDEN_FRACTION of the reference's median region, HIDDEN_FRACTION_OF_CAND of the candidate's,
    and NOISE_SIGMAS standard errors of that difference (estimated from the spread of the
    unexplained times): a forger gains at most that much per region, undetected.
    """
    for region in regions:
        for rank, rep in sorted(region.reports.items()):
            total = rep.us * region.k
            if total > region.bracket_us + BRACKET_SLACK_US:
                return Verdict(Status.TAMPERING, f"rank {rank} reported {total:.0f} us for a {region.side} region "
                                                 f"that the parent saw take {region.bracket_us:.0f} us", rank)
    for mode in (TimingMode.EAGER, TimingMode.GRAPH):  # a mode's rounds against each other only
        found = _hidden_time([r for r in regions if r.mode == mode])
        if found:
            return found
    return None


def _hidden_time(regions: list[Region]) -> Verdict | None:
    ranks = sorted({r for region in regions for r in region.reports})
    pairs = [(a, b) if a.side is Side.REF else (b, a) for a, b in zip(regions[::2], regions[1::2]) if a.side != b.side]
    for rank in ranks:
        # a round's two regions run back to back: their difference cancels the load of the moment
        diffs = [(c.bracket_us - c.reports[rank].us * c.k) - (r.bracket_us - r.reports[rank].us * r.k)
                 for r, c in pairs if rank in r.reports and rank in c.reports]
        if not diffs:
            continue
        ref_region = statistics.median(r.reports[rank].us * r.k for r, _ in pairs if rank in r.reports)
        cand_region = statistics.median(c.reports[rank].us * c.k for _, c in pairs if rank in c.reports)
        extra = statistics.median(diffs)
        allowed = max(HIDDEN_FLOOR_US, HIDDEN_FRACTION * ref_region, HIDDEN_FRACTION_OF_CAND * cand_region,
                      _noise_quantile(NOISE_SIGMAS, len(diffs) - 1) * _median_error(diffs))
        if extra > allowed:
            return Verdict(Status.TAMPERING, f"rank {rank}: the candidate's regions took {extra:.0f} us more than "
                                             f"its reported times explain, beyond the reference's (allowed "
                                             f"{allowed:.0f} us): times forged", rank)
    return None


def timed_verdict(regions: list[Region], checks: dict[int, ChecksReport], picks: dict[int, Pick],
                  device: dict[int, str]) -> Verdict | None:
    """Timing: region reports (devices, aliases), the parent's brackets, and the clean checks of the
    picked calls."""
    for region in regions:
        for rank, rep in sorted(region.reports.items()):
            if region.side is Side.CAND:
                wrong = [d for d in rep.devices if not _same_device(d, device[rank])]
                if wrong:
                    return Verdict(Status.WRONG_OUTPUT, f"timed call rank {rank}: an output is on {wrong[0]}, "
                                                        f"the inputs on {device[rank]}", rank)
                earlier = [a for a in rep.aliases if "earlier" in a]
                if earlier:
                    return Verdict(Status.WRONG_OUTPUT, f"timed calls rank {rank}: {earlier[0]} (it returns the "
                                                        "same buffer every call)", rank)
    forged = forged_time(regions)
    if forged:
        return forged
    for rank, report in sorted(checks.items()):
        for check in report.checks:
            if check.ok:
                continue
            pick = picks[check.id]
            where = f"{pick.side} {pick.mode} region {pick.region} call {pick.index}"
            if check.kind == "missing":
                return Verdict(Status.TAMPERING, f"rank {rank} did not hand over the output of the {where} it was "
                                                 f"asked for: {check.message}", rank)
            return Verdict(Status.WRONG_OUTPUT, f"a timed call gave a wrong answer (e.g. a cached result): rank {rank} "
                                                f"{where}: {check.where}: {check.message}", rank)
    return None


def _noise_quantile(z: float, df: int) -> float:
    """``z`` standard errors widened for a spread estimated from ``df + 1`` rounds only (Student's t
    quantile for the same tail, by its Cornish-Fisher expansion: within ~15 % of t from 4 degrees
    of freedom, 3.4 at 19 against 3.0 at infinity). Few rounds estimate the noise poorly; without
    this, 5-round evaluations of reference copies on a loaded 2-core machine were judged forged."""
    if df < 1:
        return float("inf")
    return z * (1 + (z * z + 1) / (4 * df) + (5 * z**4 + 16 * z * z + 3) / (96 * df * df))


def _median_error(values: list[float]) -> float:
    """Standard error of a median, from the inter-quartile range (normal approximation)."""
    if len(values) < 4:
        return float("inf") if len(values) < 2 else abs(max(values) - min(values))
    q1, _, q3 = statistics.quantiles(values, n=4)
    return 1.2533 * (q3 - q1) / 1.349 / math.sqrt(len(values))


def _same_device(found: str, expected: str) -> bool:
    """``cuda`` and ``cuda:0`` name the same device when the rank's is ``cuda:0``."""
    if found == expected:
        return True
    kind, _, index = expected.partition(":")
    return found == kind and index in ("", "0")
