"""Pool sizing: how gangs of each world size are fitted onto nodes (pure, no Ray)."""

from collections import Counter

from pkb_ray.placement import plan_gangs


def sizes(plan):
    return Counter(w for w, _ in plan)


def test_an_eight_gpu_node_holds_four_w2_two_w4_or_one_w8():
    node = {"n0": 8}
    assert sizes(plan_gangs(node, {2: 100})) == {2: 4}
    assert sizes(plan_gangs(node, {4: 100})) == {4: 2}
    assert sizes(plan_gangs(node, {8: 100})) == {8: 1}


def test_several_world_sizes_share_a_node_and_each_gets_one():
    plan = plan_gangs({"n0": 8}, {2: 100, 4: 100})
    assert sizes(plan) == {4: 1, 2: 2}
    assert sum(w for w, _ in plan) == 8


def test_no_more_gangs_than_queued_samples():
    assert sizes(plan_gangs({"n0": 8}, {2: 1})) == {2: 1}
    assert plan_gangs({"n0": 8}, {2: 0}) == []


def test_gangs_never_span_nodes():
    plan = plan_gangs({"a": 6, "b": 6}, {4: 10})
    assert sizes(plan) == {4: 2} and {n for _, n in plan} == {"a", "b"}
    assert plan_gangs({"a": 4, "b": 4}, {8: 3}) == []  # 8 GPUs in all, but no node has 8


def test_running_gangs_and_free_gpus_are_taken_into_account():
    # two W=2 gangs already run; 4 GPUs free; W=4 has no gang yet so it gets the hole
    plan = plan_gangs({"n0": 4}, {2: 50, 4: 3}, running={2: 2})
    assert sizes(plan) == {4: 1}
    # the W with the most queued samples per gang gets the next one
    plan = plan_gangs({"n0": 4}, {2: 50, 4: 3}, running={2: 1, 4: 1})
    assert sizes(plan) == {2: 2}
