"""Gangs spread over nodes, on a Ray cluster of two fake nodes (the session's: tests/shared_ray.py) with
gloo. The gangs use 2 logical GPUs of each. A 2x1 gang has rank 0 on one node and rank 1 on the other, a 2x2
gang ranks 0-1 and 2-3; the remote ranks are started by a RankHost actor on their node, and their
files travel through Ray (the fake nodes share a disk, but every remote rank works in its host's
own folder, so nothing is found by accident).
"""

from pathlib import Path

import pytest
import ray

from conftest import REPO, rank_processes_left
from pkb_ray.evaluate.harness import Harness
from pkb_ray.isolation.spread import RankHost, SpreadLauncher
from pkb_ray.pipeline.gang_pool import GangPool
from pkb_ray.problem import load_problems
from pkb_ray.spec.config import EvalConfig, HardwareConfig, SweepConfig
from pkb_ray.spec.names import Status
from pkb_ray.spec.placement import Layout
from pkb_ray.spec.schema import EvalTask, Sample, Where

COPY = (REPO / "samples/replay/all_reduce/00_reference_copy.py").read_text()
HANGS_ON_RANK1 = (REPO / "samples/replay/all_reduce/05_hangs_on_rank1.py").read_text()
WRONG = COPY.replace("dist.all_reduce(out", "out.add_(1)\n    dist.all_reduce(out")
DIES_ON_LAST_RANK = COPY.replace("def solution(", "def _solution(") + '''

def solution(*args):
    import os
    if dist.get_rank() == dist.get_world_size() - 1:
        print("rank going down on purpose", flush=True)
        os._exit(7)
    return _solution(*args)
'''


@pytest.fixture(scope="module")
def two_nodes(shared_ray):
    with shared_ray.joined():  # the session's cluster: a head and a node of 2 GPUs
        yield


def sample(source: str, index: int) -> Sample:
    return Sample(problem_id="all_reduce", model="test", sample_index=index, source=source)


def other_node() -> str:
    here = ray.get_runtime_context().get_node_id()
    return next(n["NodeID"] for n in ray.nodes() if n["Alive"] and n["NodeID"] != here)


def test_a_rank_set_spread_over_two_nodes_judges_samples_like_one_node(two_nodes, tmp_path):
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    host = ray.remote(RankHost).options(num_cpus=0, max_concurrency=8, scheduling_strategy=NodeAffinitySchedulingStrategy(
        other_node(), soft=False)).remote()
    where = ray.get(host.where.remote())
    assert where["node"] != ray.get_runtime_context().get_node_id()
    launcher = SpreadLauncher([(None, ["cpu"]), (host, ["cpu"])], store_host=ray.util.get_node_ip_address())
    cfg = EvalConfig(trials=2, timing_sets=2, warmup=2, rounds=5, timeout_s=10, prewarm=1)
    harness = Harness(["cpu", "cpu"], cfg, HardwareConfig(world_sizes=[2], nodes=2, gpus_per_node=2),
                      load_problems(), work_dir=tmp_path / "work", cache_dir=tmp_path / "cache", launcher=launcher)
    try:
        results = [harness.evaluate(sample(src, i)) for i, src in enumerate([COPY, WRONG, HANGS_ON_RANK1,
                                                                              DIES_ON_LAST_RANK, COPY])]
        harness.close()
        # the harness itself had the host kill every remote rank it started (the hung one too)
        assert rank_processes_left(Path(where["root"]), clean=True) == []
    finally:
        harness.close()
        ray.get(host.shutdown.remote())
    status = [r.status for r in results]
    assert status == [Status.CORRECT, Status.WRONG_OUTPUT, Status.TIMEOUT, Status.CRASH, Status.CORRECT], \
        [r.message[:300] for r in results]
    assert all(r.nodes == 2 and r.world_size == 2 for r in results)
    # the remote rank's outputs came back for the verdict, and its death and log came from its host
    assert results[1].failed_rank is not None
    assert "rank 1 in 'trial" in results[2].message, results[2].message  # the remote rank's phase, from its host
    assert "rank 1 exited with code 7" in results[3].message and "rank going down on purpose" in results[3].message
    assert results[0].speedup and results[4].speedup
    assert rank_processes_left(tmp_path / "work", clean=True) == []


def test_the_pool_places_spread_gangs_on_distinct_nodes_in_rank_order(two_nodes, tmp_path):
    from ray._private.state import actors as actor_table  # the GCS's, no dashboard needed

    cfg = SweepConfig.model_validate({
        "eval": {"trials": 2, "timing_sets": 2, "warmup": 2, "rounds": 5, "timeout_s": 20, "prewarm": 0},
        "hardware": {"world_sizes": [2], "gpus_per_node": 2, "nodes": 2, "spread": ["2x1", "2x2"]},
        "ray": {"max_gpus": 4}, "cache_dir": str(tmp_path / "cache"),
    })
    assert cfg.hardware.layouts == [Layout(1, 2), Layout(2, 1), Layout(2, 2)]
    tasks = [EvalTask(sample(COPY, 0), Where(Layout(2, 1))), EvalTask(sample(DIES_ON_LAST_RANK, 1), Where(Layout(2, 1))),
             EvalTask(sample(COPY, 2), Where(Layout(2, 2))), EvalTask(sample(COPY, 3), Where(Layout(1, 2)))]
    pool = GangPool(cfg)
    try:
        results = {(r.sample_index, r.nodes, r.world_size): r for _, r in pool.evaluate(tasks)}
    finally:
        pool.shutdown()
    status = {k: r.status for k, r in results.items()}
    assert status == {(0, 2, 2): Status.CORRECT, (1, 2, 2): Status.CRASH, (2, 2, 4): Status.CORRECT,
                      (3, 1, 2): Status.CORRECT}, {k: r.message[:300] for k, r in results.items()}
    assert results[(1, 2, 2)].failed_rank == 1 and "exited with code 7" in results[(1, 2, 2)].message
    assert results[(0, 2, 2)].gang.startswith("gang-2x1-") and results[(2, 2, 4)].gang.startswith("gang-2x2-")
    assert results[(3, 1, 2)].gang.startswith("gang-w2-")
    # each spread gang had its actor on one node and a RankHost on the other
    actors = actor_table().values()
    for result in (results[(0, 2, 2)], results[(2, 2, 4)]):
        nodes = {a["Name"]: a["Address"]["NodeID"] for a in actors if a["Name"] in (result.gang, f"{result.gang}-host1")}
        assert len(nodes) == 2 and len(set(nodes.values())) == 2, nodes
    assert rank_processes_left(tmp_path / "cache", clean=True) == []


def test_baselines_inside_one_node_and_across_two(two_nodes, tmp_path):
    from pkb_ray import baselines

    cfg = SweepConfig.model_validate({
        "eval": {"trials": 2, "timing_sets": 2, "warmup": 2, "rounds": 5, "timeout_s": 20, "prewarm": 0},
        "hardware": {"world_sizes": [2], "gpus_per_node": 2, "nodes": 2, "spread": ["2x1"], "link_gbps": 5.0,
                     "network_gbps": 0.5},
        "ray": {"max_gpus": 4}, "cache_dir": str(tmp_path / "cache"),
    })
    # through the run's pipeline, on the fake cluster: one-node gangs and spread ones alike
    rows = baselines.measure(cfg, load_problems(), ["all_gather", "all_reduce"], tmp_path / "results", tmp_path / "b")
    got = {(r["problem_id"], r["nodes"]): r for r in rows}
    assert set(got) == {("all_gather", 1), ("all_gather", 2), ("all_reduce", 1), ("all_reduce", 2)}
    for (pid, nodes), r in got.items():
        assert r["status"] == "correct" and r["ref_time_us"] > 0 and r["layout"] == f"{nodes}x{2 // nodes}", r
    # across nodes the network (0.5 GB/s here) bounds the speed of light, not the link inside a node
    assert got[("all_reduce", 2)]["sol_time_us"] > got[("all_reduce", 1)]["sol_time_us"]
    # each row was saved to the table as it arrived
    assert {(r["problem_id"], r["nodes"]) for r in baselines.load(tmp_path / "b", cfg.hardware.name)} == set(got)
    assert baselines.path_for(tmp_path / "b", cfg.hardware.name).name == "cpu_gloo.json"


def test_a_rank_numbers_its_gpu_among_those_its_node_lets_it_see():
    from pkb_ray.runner.rank import local_device

    # two Ray nodes on one machine, started with CUDA_VISIBLE_DEVICES=0 and =1: Ray says GPU "1" on
    # the second, whose processes see that GPU alone, as cuda:0
    assert local_device("cuda:1", "1") == "cuda:0"
    assert local_device("cuda:3", "2, 3") == "cuda:1"
    assert local_device("cuda:1", None) == "cuda:1" and local_device("cuda:1", "0,1") == "cuda:1"
    assert local_device("cpu", "1") == "cpu"
