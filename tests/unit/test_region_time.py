"""The arithmetic of a fired region's time (pkb_ray.measure.timing, pkb_ray.evaluate.rounds.settle):
fixed work subtracted, the candidate's never more than the reference's, work after the done
lines charged, and ladders whose true ratio is known read it back."""

import pytest

from pkb_ray.evaluate.rounds import settle
from pkb_ray.evaluate.verdict import Region
from pkb_ray.measure.timing import (FIXED_CAP, NET_FLOOR, deferral_allowance, deferral_charge, fixed_times, region_time,
                                    speedup)
from pkb_ray.spec.names import Side


def test_fixed_work_is_each_sides_blanks_and_the_candidate_gets_at_most_a_cap_of_the_references():
    # the median (the lower of the middle two): a late wake-up now and then moves it little
    assert fixed_times([300.0, 310.0, 3000.0, 320.0], [280.0, 290.0, 295.0, 2500.0]) == (310.0, 290.0)
    assert fixed_times([300.0, 310.0, 3000.0, 320.0], [380.0, 390.0, 395.0, 2500.0]) == (310.0, 390.0)
    # blanks slowed on purpose (a sleep in its blank step): no more than the cap is subtracted
    assert fixed_times([300.0, 310.0, 320.0, 330.0], [5000.0, 5000.0]) == (310.0, FIXED_CAP * 310.0)
    assert fixed_times([], [100.0]) == (0.0, 0.0)  # no reference blank: nothing subtracted either side
    assert fixed_times([200.0], []) == (200.0, 0.0)  # no candidate blank: nothing subtracted from it


def test_region_time_subtracts_fixed_adds_charge_and_has_a_floor():
    assert region_time(1300.0, 300.0) == 1000.0
    assert region_time(1300.0, 300.0, 50.0) == 1050.0
    assert region_time(300.0, 1000.0) == pytest.approx(NET_FLOOR * 300.0)  # never free, never negative


def test_work_after_the_done_line_beyond_the_references_spread_is_charged():
    ref_after = [300.0 + i for i in range(10)]  # 300..309: its 90th percentile is 308
    allowance = deferral_allowance(ref_after)
    assert allowance == 308.0
    assert deferral_charge(305.0, allowance) == 0.0
    assert deferral_charge(308.0 + 5000.0, allowance) == pytest.approx(5000.0)  # all of it, no margin kept
    assert deferral_allowance([]) == float("inf")  # no reference region: nothing to compare with


def _region(side, k, bracket, after=100.0, mode="eager"):
    return Region(side=side, k=k, bracket_us=bracket, reports={}, mode=mode, after_us=after)


@pytest.mark.parametrize("ratio", [1 / 8, 1 / 4, 1 / 2, 1, 2, 4])
def test_a_ladder_reads_its_true_ratio_once_fixed_work_is_settled(ratio):
    """Calls of 1000 us (reference) and 1000/ratio us (candidate), each region inside 350 us of
    fixed work: the brackets alone squeeze the ratio toward 1, the settled times read it exactly."""
    fixed, k = 350.0, 10
    ref = [_region(Side.REF, k, 1000.0 * k + fixed) for _ in range(5)]
    cand = [_region(Side.CAND, k, 1000.0 / ratio * k + fixed) for _ in range(5)]
    blanks = [_region(s, 0, fixed) for s in Side for _ in range(3)]
    squeezed = ref[0].bracket_us / cand[0].bracket_us
    settle(ref + cand, blanks)
    assert speedup(ref[0].us_per_call, cand[0].us_per_call) == pytest.approx(ratio)
    if ratio != 1:
        assert abs(squeezed - ratio) > 0.01 * ratio  # what the brackets alone would have read


def test_settle_charges_a_candidate_that_says_done_early_and_leaves_the_reference_alone():
    ref = [_region(Side.REF, 4, 4350.0, after=300.0) for _ in range(3)]
    early = [_region(Side.CAND, 4, 400.0, after=4300.0) for _ in range(3)]  # done before its calls ran
    blanks = [_region(s, 0, 350.0) for s in Side]
    settle(ref + early, blanks)
    assert all(r.charge_us == 0.0 for r in ref)
    assert early[0].us == pytest.approx(400.0 - 350.0 + 4300.0 - 300.0)
    assert speedup(ref[0].us, early[0].us) < 1.1  # it is not read 80x faster


def test_settle_takes_each_modes_blanks_for_its_own_regions():
    regions = [_region(Side.REF, 1, 1000.0, mode="eager"), _region(Side.REF, 1, 1000.0, mode="graph")]
    blanks = [_region(Side.REF, 0, 100.0, mode="eager"), _region(Side.REF, 0, 300.0, mode="graph")]
    settle(regions, blanks)
    assert [r.fixed_us for r in regions] == [100.0, 300.0]
