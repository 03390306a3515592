"""The gang pool's scheduling rules, driven event by event without Ray (pkb_ray/pipeline/scheduler.py)."""

import pytest

from pkb_ray.pipeline.scheduler import Dispatch, GangPhase, Reserve, Restart, Scheduler, SchedulingError, Start, Stop
from pkb_ray.spec.placement import Layout

W2, W4, SPREAD = Layout(1, 2), Layout(1, 4), Layout(2, 2)


def of(actions, kind):
    return [a for a in actions if isinstance(a, kind)]


def up(s: Scheduler, actions) -> list:
    """Place and start every gang the actions reserve, as the pool would; the actions that follow."""
    out = []
    for r in of(actions, Reserve):
        nodes = tuple(sorted(s.free_gpus(), key=s.free_gpus().get, reverse=True)[:r.layout.nodes])
        started = s.gang_reserved(r.gang, nodes)
        assert of(started, Start) == [Start(r.gang)]
        out += [a for a in started if not isinstance(a, Start)] + s.gang_started(r.gang)
    return out


def test_gangs_fill_a_node_and_each_takes_the_next_sample():
    s = Scheduler({"n0": 8})
    reserve = s.tasks_arrived([(f"s{i}", W2) for i in range(10)])
    assert [r.layout for r in of(reserve, Reserve)] == [W2] * 4  # 8 GPUs: four W=2 gangs
    assert s.tasks_arrived([("late", W2)]) == []  # nothing more while reservations are pending
    dispatched = of(up(s, reserve), Dispatch)
    assert sorted(d.task for d in dispatched) == ["s0", "s1", "s2", "s3"]
    assert len(s.in_phase(GangPhase.BUSY)) == 4 and s.stats["peak_gpus"] == 8
    nxt = s.result(dispatched[0].gang)
    assert nxt == [Dispatch(dispatched[0].gang, "s4")]  # the freed gang takes the next of its layout


def test_several_world_sizes_each_get_a_gang_and_the_longer_queue_the_rest():
    s = Scheduler({"n0": 8})
    reserve = of(s.tasks_arrived([(f"a{i}", W2) for i in range(6)] + [("b0", W4)]), Reserve)
    assert sorted(r.layout.world_size for r in reserve) == [2, 2, 4]


def test_a_world_size_with_nothing_left_stops_once_the_feed_ends_and_frees_its_gpus():
    s = Scheduler({"n0": 2})
    d = of(up(s, s.tasks_arrived([("a", W2)])), Dispatch)
    assert s.result(d[0].gang) == []  # queue empty, but more samples may still come
    assert s.feed_ended() == [Stop(d[0].gang)]
    assert s.finished and s.free_gpus() == {"n0": 2} and s.stats["stopped"] == 1


def test_an_idle_gang_gives_way_at_once_to_a_world_size_that_has_no_room():
    s = Scheduler({"n0": 4})
    d = of(up(s, s.tasks_arrived([("a", W2)])), Dispatch)
    assert of(s.tasks_arrived([("big", W4)]), Reserve) == []  # the W=2 gang holds 2 of the 4 GPUs
    after = s.result(d[0].gang)  # W=2 has nothing queued and W=4 is starving: stop, then plan W=4
    assert of(after, Stop) == [Stop(d[0].gang)] and [r.layout for r in of(after, Reserve)] == [W4]


def test_a_gang_that_dies_is_restarted_under_a_new_name_and_goes_on():
    s = Scheduler({"n0": 2})
    d = of(up(s, s.tasks_arrived([("a", W2), ("b", W2)])), Dispatch)
    [restart] = of(s.gang_died(d[0].gang), Restart)
    assert restart.gang == d[0].gang and restart.new_name != d[0].gang
    assert s.gangs[restart.new_name].phase == GangPhase.STARTING and s.stats["restarted"] == 1
    assert s.gang_started(restart.new_name) == [Dispatch(restart.new_name, "b")]


def test_gangs_that_keep_failing_to_start_stop_the_run():
    s = Scheduler({"n0": 2})
    [r] = of(s.tasks_arrived([("a", W2)]), Reserve)
    s.gang_reserved(r.gang, ("n0",))
    name = r.gang
    for _ in range(2):
        name = s.gang_failed(name, "boom")[0].new_name
    with pytest.raises(SchedulingError, match="failed to start 3 times: boom"):
        s.gang_failed(name, "boom")


def test_a_layout_the_cluster_cannot_hold_is_refused_naming_the_key():
    with pytest.raises(SchedulingError, match="hardware.world_sizes"):
        Scheduler({"n0": 2}).tasks_arrived([("a", W4)])
    with pytest.raises(SchedulingError, match="hardware.spread"):
        Scheduler({"n0": 8}).tasks_arrived([("a", SPREAD)])


def test_a_spread_gang_takes_gpus_on_two_nodes():
    s = Scheduler({"n0": 2, "n1": 2})
    [r] = of(s.tasks_arrived([("a", SPREAD)]), Reserve)
    s.gang_reserved(r.gang, ("n0", "n1"))
    assert s.free_gpus() == {"n0": 0, "n1": 0}
    assert s.gang_started(r.gang) == [Dispatch(r.gang, "a")]
    assert not s.finished and s.queued() == {"2x2": 0}


def test_announced_tasks_get_their_gangs_before_they_arrive_and_count_once():
    # the run's rows are known before the stream has validated and compiled any of them
    s = Scheduler({"n0": 8})
    planned = of(s.expect({W2: 3, W4: 1}), Reserve)
    assert sorted(r.layout.world_size for r in planned) == [2, 2, 4]  # one gang per layout, then the longer queue
    assert of(up(s, planned), Dispatch) == []  # started, nothing to evaluate yet
    # the announced tasks arrive: they go to the gangs already up, no new gang is planned for them
    got = s.tasks_arrived([("a0", W2), ("a1", W2), ("b0", W4)])
    assert sorted(d.task for d in of(got, Dispatch)) == ["a0", "a1", "b0"] and of(got, Reserve) == []
    assert s.expected[W2] == 1 and s.expected[W4] == 0
    # the feed ends without the last one (settled in the stream): what never came is dropped
    s.feed_ended()
    assert not s.expected
    for d in of(got, Dispatch):
        s.result(d.gang)
    assert s.finished and s.gangs == {}


def test_announcing_a_layout_the_cluster_cannot_hold_fails_at_once():
    with pytest.raises(SchedulingError, match="hardware.world_sizes"):
        Scheduler({"n0": 2}).expect({W4: 1})


def test_max_gpus_caps_what_the_gangs_hold_at_once_on_a_larger_cluster():
    s = Scheduler({"n0": 8, "n1": 8}, max_gpus=4)
    reserve = of(s.tasks_arrived([(f"s{i}", W2) for i in range(10)]), Reserve)
    assert len(reserve) == 2 and s.held_gpus() == 4  # 16 free, but the run may hold 4
    up(s, reserve)
    assert s.stats["peak_gpus"] == 4 and of(s.tasks_arrived([("late", W2)]), Reserve) == []


def test_under_max_gpus_an_idle_gang_gives_way_to_a_layout_the_cap_leaves_no_room_for():
    s = Scheduler({"n0": 8}, max_gpus=4)
    d = of(up(s, s.tasks_arrived([("a", W2)])), Dispatch)
    assert of(s.tasks_arrived([("big", W4)]), Reserve) == []  # 6 GPUs free, but 2 + 4 > 4
    after = s.result(d[0].gang)
    assert of(after, Stop) == [Stop(d[0].gang)] and [r.layout for r in of(after, Reserve)] == [W4]


def test_a_layout_larger_than_max_gpus_fails_naming_the_key():
    s = Scheduler({"n0": 8}, max_gpus=2)
    with pytest.raises(SchedulingError, match=r"ray.max_gpus: a gang of 1x4 needs 4 GPUs; the run may hold 2"):
        s.tasks_arrived([("big", W4)])
