"""Interference as evidence: a reference that ran slower beside a sample than beside an honest copy.

While the clean set times the reference, every process of the candidate's sandbox is stopped;
what a sample can still do is leave work running on the device (or in the machine), or escape the
freezer, for the reference's regions to meet. The reference's time here is what its speedup uses:
each region's time by the parent's clock (the bracket from resuming the clean set to its last
done line, less the fixed work of its blanks: :func:`pkb_ray.measure.timing.region_time`), per
call. A helper that spins beside the reference slows its wake-ups as much as its calls, and the
ranks' own clocks around their calls would miss the first (issue 64: 1.2-1.6x undeserved).
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
    of their microseconds per call (the region's time, as the speedup takes it), and its standard error."""

    mode: str
    k: int
    median_us: float
    error_us: float
    rounds: int
    where: str = "alone"  # what the reference ran beside: "alone" (the quiet baseline) or "beside a copy"

    @classmethod
    def of(cls, regions: list[Region]) -> "RefTimes | None":
        """The reference's timed regions (one mode, one k), or None when there are none."""
        times = [r.us_per_call for r in regions if r.side == Side.REF]
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
