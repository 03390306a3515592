"""Pool sizing: how gangs of each world size are fitted onto nodes (pure, no Ray)."""

from collections import Counter

import pytest

from pkb_ray.spec.placement import Layout, fits, plan_gangs


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
    assert sizes(plan) == {4: 2} and {n for _, n in plan} == {("a",), ("b",)}
    assert plan_gangs({"a": 4, "b": 4}, {8: 3}) == []  # 8 GPUs in all, but no node has 8


def test_running_gangs_and_free_gpus_are_taken_into_account():
    # two W=2 gangs already run; 4 GPUs free; W=4 has no gang yet so it gets the hole
    plan = plan_gangs({"n0": 4}, {2: 50, 4: 3}, running={2: 2})
    assert sizes(plan) == {4: 1}
    # the W with the most queued samples per gang gets the next one
    plan = plan_gangs({"n0": 4}, {2: 50, 4: 3}, running={2: 1, 4: 1})
    assert sizes(plan) == {2: 2}


def test_layouts_parse_and_name_themselves():
    assert Layout.of("2x4") == Layout(2, 4) and Layout.of(8) == Layout(1, 8) and str(Layout(2, 4)) == "2x4"
    assert Layout.of("2x4").world_size == 8
    for bad in ("2x", "x4", "0x4", "2*4", "two"):
        with pytest.raises(ValueError, match="not a layout"):
            Layout.of(bad)


def test_a_spread_gang_takes_gpus_on_distinct_nodes():
    plan = plan_gangs({"a": 8, "b": 8, "c": 2}, {Layout(2, 4): 10})
    assert [k for k, _ in plan] == [Layout(2, 4)] * 2  # a and b hold two 2x4 gangs; c has too few GPUs
    assert all(len(set(nodes)) == 2 and "c" not in nodes for _, nodes in plan)
    assert plan_gangs({"a": 8}, {Layout(2, 1): 5}) == []  # one node cannot hold a 2-node gang
    assert fits("2x1", {"a": 1, "b": 1}) and not fits("2x2", {"a": 2, "b": 1})


def test_spread_and_packed_gangs_share_the_nodes():
    # two nodes of 4: a 2x2 gang (placed first: the larger layout of the same W) leaves 2 + 2, no room for 1x4
    assert plan_gangs({"a": 4, "b": 4}, {Layout(2, 2): 1, 4: 1}) == [(Layout(2, 2), ("a", "b"))]
    # with a third node the 1x4 gang fits there, and W=2 work fills the holes the 2x2 gang left
    plan = plan_gangs({"a": 4, "b": 4, "c": 4}, {Layout(2, 2): 1, 4: 1, 2: 5})
    assert sizes(plan) == {Layout(2, 2): 1, 4: 1, 2: 2}
    used = Counter()
    for k, nodes in plan:
        for n in nodes:
            used[n] += Layout.of(k).per_node
    assert used == {"a": 4, "b": 4, "c": 4}
