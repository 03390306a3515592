"""Rule 6's evidence (:mod:`pkb_ray.evaluate.verdict`): whether the reference ran slower beside a
correct sample than it does without one, gathered after the sample's set is gone.

The quiet baseline (the reference's regions back to back, no candidate alive; kept per reference,
mode and calls per region) is only a screen: the candidate's calls, the checks and the fills between
the reference's regions leave the machine otherwise than back to back (on the CPU VM at 4 MiB,
honest copies read +20-52 % against it, docs/benchmarks/trust.md). A sample it flags is compared
with the reference beside an honest copy of itself, timed through the same rounds. Slowed against
that too, the sample is evaluated once more and judged against a second copy; the two findings go in
the evidence, and the verdict's table decides.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

from pkb_ray.evaluate.attempt import Attempt, Subject
from pkb_ray.evaluate.interference import RefTimes, slowed
from pkb_ray.evaluate.verdict import judge
from pkb_ray.spec.names import Status
from pkb_ray.spec.wire import Case


class InterferenceScreen:
    """``attempt(subject)``: an evaluation of an honest copy; ``quiet(case, mode, k)``: the
    reference's regions timed by the clean set with no candidate alive."""

    def __init__(self, attempt: Callable[[Subject], Attempt], quiet: Callable[[Case, str, int], RefTimes]):
        self._attempt = attempt
        self._measure_quiet = quiet
        self._quiet: dict[tuple, RefTimes] = {}  # (problem, dtype, size, mode, k) -> the reference alone

    def judge(self, subject: Subject, first: Attempt, again: Callable[[], Attempt]) -> Attempt:
        """``first``, or where the reference slowed beside it, the sample's second attempt (``again()``)
        judged with both findings."""
        found = self._slowed(subject, first)
        if not found:
            return first
        second = again()
        again = self._slowed(subject, second)
        if again and second.evidence is not None:
            second.evidence.interference = [found, again]
            second.verdict = judge(second.evidence) or second.verdict
        return second

    def _slowed(self, subject: Subject, attempt: Attempt) -> str:
        """Why the reference ran slower in ``attempt``'s rounds than alone and than beside an honest
        copy, or ""."""
        return self._against(subject, attempt, self._alone) and self._against(subject, attempt, self._beside_copy)

    def _against(self, subject: Subject, attempt: Attempt, baseline: Callable[[Subject, str, int], RefTimes]) -> str:
        timing = attempt.timing
        if timing is None or attempt.verdict.status is not Status.CORRECT:
            return ""
        for mode in timing.modes:
            during = RefTimes.of(timing.of(mode))
            if during is None:
                continue
            found = slowed(during, baseline(subject, mode, during.k))
            if found:
                return f"{mode}: {found}"
        return ""

    def _alone(self, subject: Subject, mode: str, k: int) -> RefTimes:
        slot = (*subject.key, mode, k)
        if slot not in self._quiet:
            self._quiet[slot] = self._measure_quiet(subject.case, mode, k)
        return self._quiet[slot]

    def _beside_copy(self, subject: Subject, mode: str, k: int) -> RefTimes:
        """The reference's regions of ``mode`` beside an honest copy of the sample, through the same
        rounds; the quiet baseline measured again where that copy was not correct or had no such
        regions (or the problem has no source to copy)."""
        copy = subject.honest_copy()
        attempt = self._attempt(copy) if copy is not None else None
        timing = attempt.timing if attempt is not None else None
        found = RefTimes.of(timing.of(mode)) if timing is not None else None
        if found is None or attempt.verdict.status is not Status.CORRECT:
            return self._measure_quiet(subject.case, mode, k)
        return replace(found, where="beside an honest copy")
