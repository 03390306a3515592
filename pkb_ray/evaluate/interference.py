"""Interference as evidence: a reference that ran slower beside a sample than beside an honest copy.

While the clean set times the reference, every process of the candidate's sandbox is stopped;
what a sample can still do is leave work running on the device (or in the machine) for the
reference's regions to meet. The reference's time here is the clean ranks' own clock (trusted),
per region the smallest over its ranks: a rank that starts its calls early (the barrier before them
aligns the ranks' starts only as well as the barrier's own wake-up does) waits inside the first
collective call for the others, and only the last to start times the calls alone (a slowed device
slows the collective, and so every rank's time, that one's too).
A sample during whose rounds the reference's median per call exceeds a baseline's by more than
both :data:`FLOOR` and :data:`NOISE_SIGMAS` standard errors of the two medians (from their
rounds' spread) was slowed. The baselines and what follows are :mod:`pkb_ray.evaluate.screen`'s.
Pure: no processes.
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
    """The reference's regions of one (mode, calls per region) as figures: the median over regions
    of the microseconds per call of the region's last rank to start, and its standard error."""

    mode: str
    k: int
    median_us: float
    error_us: float
    rounds: int
    where: str = "alone"  # what the reference ran beside: "alone" (the quiet baseline) or "beside a copy"

    @classmethod
    def of(cls, regions: list[Region]) -> "RefTimes | None":
        """The reference's timed regions (one mode, one k), or None when there are none."""
        times = [min(rep.us for rep in r.reports.values()) for r in regions if r.side == Side.REF and r.reports]
        if not times:
            return None
        first = next(r for r in regions if r.side == Side.REF)
        return cls(first.mode, first.k, statistics.median(times), _median_error(times), len(times))

    def describe(self) -> str:
        return f"{self.median_us:.1f} us a call ({self.rounds} regions)"


def slowed(during: RefTimes, quiet: RefTimes) -> str:
    """Why the reference beside a sample ran materially slower than ``quiet`` (a baseline), or ""."""
    d, q = during.median_us, quiet.median_us
    if not (q > 0 and math.isfinite(d)):
        return ""
    allowed = q * max(FLOOR, NOISE_SIGMAS * math.hypot(during.error_us, quiet.error_us) / q)
    if d - q <= allowed:
        return ""
    return (f"the reference took {d:.1f} us a call beside the sample against {q:.1f} us {quiet.where} "
            f"(+{100 * (d / q - 1):.0f} %, allowed +{100 * allowed / q:.0f} %)")


def _median_error(values: list[float]) -> float:
    """Standard error of a median, from the inter-quartile range (normal approximation)."""
    if len(values) < 4:
        return 0.0 if len(values) < 2 else abs(max(values) - min(values))
    q1, _, q3 = statistics.quantiles(values, n=4)
    return 1.2533 * (q3 - q1) / 1.349 / math.sqrt(len(values))
