"""The keys a sample's inputs derive from (pkb_ray.measure.keys): which rank gets which."""

from pkb_ray.measure.keys import SHARED, TIMED, InputKeys, derived, for_rank


def test_a_candidates_command_carries_no_timed_calls_key():
    keys = InputKeys.draw([0, 1, 2])
    wire = keys.as_wire()
    assert set(wire) == {SHARED, "0", "1", "2"}
    assert not any(k.startswith(TIMED) for k in wire)
    assert for_rank(wire, 1) == {SHARED: keys.shared, "1": keys.ranks[1]}


def test_a_clean_rank_gets_its_own_timed_key_and_no_other_ranks():
    keys = InputKeys.draw([0, 1, 2])
    mine = for_rank(keys.for_clean(), 2)
    assert mine == {SHARED: keys.shared, "2": keys.ranks[2], f"{TIMED}{SHARED}": keys.timed_shared,
                    f"{TIMED}2": keys.timed[2]}
    assert keys.timed[2] != keys.ranks[2] and keys.timed_shared != keys.shared


def test_draws_differ_and_labels_under_a_key_are_unpredictable_without_it():
    a, b = InputKeys.draw([0, 1]), InputKeys.draw([0, 1])
    assert a.ranks != b.ranks and a.timed != b.timed
    assert derived(a.ranks[0], 7) != derived(b.ranks[0], 7)
    assert derived(a.ranks[0], 7) == derived(a.ranks[0], 7)  # the clean rank rebuilds what the rank made
