"""The interference rule's arithmetic: the reference's regions as the median of their times (what
the speedup uses: the parent's bracket less the fixed work) with its error, and "slowed" only
beyond both the floor and the noise, naming what it was compared with."""

import random
from dataclasses import replace

from pkb_ray.evaluate.interference import FLOOR, RefTimes, slowed
from pkb_ray.evaluate.verdict import Evidence, Region, judge
from pkb_ray.spec.names import Side
from pkb_ray.spec.wire import RegionReport


def _regions(us_a_call: list[float], side: Side = Side.REF) -> list[Region]:
    return [Region(side=side, k=10, bracket_us=10 * us, reports={0: RegionReport(us=us, calls=[], devices=["cpu"])})
            for us in us_a_call]


def _noisy(centre: float, n: int = 40, spread: float = 0.03, seed: int = 0) -> list[float]:
    rng = random.Random(seed)
    return [centre * (1 + rng.uniform(-spread, spread)) for _ in range(n)]


def test_ref_times_are_the_reference_regions_medians_only():
    times = RefTimes.of(_regions([100.0, 110.0, 120.0]) + _regions([999.0], Side.CAND))
    assert times.median_us == 110.0 and times.rounds == 3 and times.k == 10 and times.where == "alone"
    assert RefTimes.of(_regions([5.0], Side.CAND)) is None


def test_slowed_beyond_the_floor_names_the_baseline_and_not_within_it():
    quiet = RefTimes.of(_regions(_noisy(100.0)))
    assert slowed(RefTimes.of(_regions(_noisy(100.0 * (1 + FLOOR / 2), seed=1))), quiet) == ""
    found = slowed(RefTimes.of(_regions(_noisy(160.0, seed=2))), quiet)
    assert found.startswith("the reference took") and "us alone (+" in found, found
    beside_copy = replace(quiet, where="beside an honest copy")
    assert "us beside an honest copy (+" in slowed(RefTimes.of(_regions(_noisy(160.0, seed=2))), beside_copy)


def test_a_region_counts_what_the_speedup_uses_not_the_ranks_clocks():
    """A helper spinning beside the reference slows its wake-ups (the bracket) while the ranks'
    own clocks around their calls barely move: the screen reads the bracket less the fixed work."""
    regions = [Region(side=Side.REF, k=1, bracket_us=bracket, fixed_us=50.0,
                      reports={0: RegionReport(us=100.0, calls=[], devices=["cpu"])})
               for bracket in (200.0, 210.0, 190.0)]
    assert RefTimes.of(regions).median_us == 150.0


def test_a_noisy_baseline_widens_what_is_allowed():
    """+60 % is beyond the floor, but not beyond 4 standard errors of two medians this spread."""
    wild = RefTimes.of(_regions(_noisy(100.0, n=6, spread=0.9, seed=3)))
    assert slowed(RefTimes.of(_regions(_noisy(160.0, n=6, spread=0.9, seed=4))), wild) == ""


def test_the_verdict_says_what_the_reference_was_compared_with():
    """Rule 6 of the verdict table: two evaluations' findings make tampering, one does not."""
    assert judge(Evidence(device={0: "cpu"}, interference=["eager: rank 0: slower"])) is None
    verdict = judge(Evidence(device={0: "cpu"}, interference=["eager: rank 0: slower", "eager: rank 0: slower again"]))
    assert verdict.status.value == "tampering"
    assert "beside an honest copy of itself, in two evaluations" in verdict.message
    assert "slower; again: eager: rank 0: slower again" in verdict.message
