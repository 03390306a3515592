"""Interference as evidence: a reference that ran slower beside a sample than beside an honest copy.

While the clean set times the reference, every process of the candidate's sandbox is stopped;
what a sample can still do is leave work running on the device (or in the machine) for the
reference's regions to meet. Each gang therefore keeps a quiet baseline of every reference it
times: the same regions (mode, calls per region) timed with no candidate alive. A sample during
whose rounds the reference's median per call, on some rank, exceeds the baseline's by more than
both :data:`FLOOR` and :data:`NOISE_SIGMAS` standard errors of the two medians (from their
rounds' spread) was slowed. The harness then measures the baseline again (the machine may have
changed) and, if the sample still stands out, evaluates it once more; slowed again, against that
baseline and one more measured then, it is ``tampering``, with both figures in the message. Pure:
no processes.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from pkb_ray.evaluate.verdict import Region
from pkb_ray.spec.names import Side

FLOOR = 0.2  # a reference this much slower than its quiet baseline (relative) is beyond load of the moment...
NOISE_SIGMAS = 4.0  # ...and beyond this many standard errors of the difference of the two medians


@dataclass(frozen=True)
class RefTimes:
    """The reference's regions of one (mode, calls per region) as figures: per rank, the median
    microseconds per call and its standard error."""

    mode: str
    k: int
    median_us: tuple[float, ...]
    error_us: tuple[float, ...]
    rounds: int
    where: str = "alone"  # what the reference ran beside: "alone" (the quiet baseline) or "beside a copy"

    @classmethod
    def of(cls, regions: list[Region]) -> "RefTimes | None":
        """The reference's timed regions (one mode, one k), or None when there are none."""
        refs = [r for r in regions if r.side == Side.REF]
        if not refs:
            return None
        ranks = sorted({rank for r in refs for rank in r.reports})
        medians, errors = [], []
        for rank in ranks:
            times = [r.reports[rank].us for r in refs if rank in r.reports]
            medians.append(statistics.median(times) if times else float("nan"))
            errors.append(_median_error(times))
        return cls(refs[0].mode, refs[0].k, tuple(medians), tuple(errors), len(refs))

    def describe(self) -> str:
        return ", ".join(f"{m:.1f}" for m in self.median_us) + f" us a call per rank ({self.rounds} regions)"


def slowed(during: RefTimes, quiet: RefTimes) -> str:
    """Why the reference beside a sample ran materially slower than its quiet baseline, or ""."""
    for rank, (d, q, de, qe) in enumerate(zip(during.median_us, quiet.median_us, during.error_us, quiet.error_us)):
        if not (q > 0 and math.isfinite(d)):
            continue
        allowed = q * max(FLOOR, NOISE_SIGMAS * math.hypot(de, qe) / q)
        if d - q > allowed:
            return (f"rank {rank}: the reference took {d:.1f} us a call beside the sample against {q:.1f} us {quiet.where} "
                    f"(+{100 * (d / q - 1):.0f} %, allowed +{100 * allowed / q:.0f} %)")
    return ""


def _median_error(values: list[float]) -> float:
    """Standard error of a median, from the inter-quartile range (normal approximation)."""
    if len(values) < 4:
        return 0.0 if len(values) < 2 else abs(max(values) - min(values))
    q1, _, q3 = statistics.quantiles(values, n=4)
    return 1.2533 * (q3 - q1) / 1.349 / math.sqrt(len(values))
