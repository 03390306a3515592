"""Gangs on a local Ray cluster with logical GPUs and gloo ranks: the pool, recovery, leaks.

One Ray instance for the module (6 logical GPUs), so gangs of W=2 and W=4 fit side by side.
"""

import threading
import time
from pathlib import Path

import pytest
import ray

from conftest import HOSTILE, REPO, gang_actors, rank_processes, rank_processes_left
from pkb_ray.pipeline.gang_pool import GangPool
from pkb_ray.spec.config import SweepConfig
from pkb_ray.spec.names import Status
from pkb_ray.spec.placement import Layout
from pkb_ray.spec.schema import EvalTask, Sample, Where

GPUS = 6


@pytest.fixture(scope="module")
def cluster(shared_ray):
    with shared_ray.joined():  # the session's cluster, of which the gangs may hold GPUS
        yield


def config(tmp_path: Path, world_sizes: list[int], timeout_s: float = 8.0) -> SweepConfig:
    return SweepConfig.model_validate({
        "eval": {"trials": 2, "timing_sets": 2, "warmup": 2, "rounds": 5, "timeout_s": timeout_s, "prewarm": 1},
        "hardware": {"world_sizes": world_sizes, "gpus_per_node": GPUS}, "ray": {"max_gpus": GPUS},
        "cache_dir": str(tmp_path / "cache"),
    })


def sample(path: Path, index: int, problem: str = "all_reduce") -> Sample:
    return Sample(problem_id=problem, model="test", sample_index=index, source=path.read_text())


COPY = REPO / "samples/replay/all_reduce/00_reference_copy.py"


def task(path: Path, index: int, world_size: int) -> EvalTask:
    return EvalTask(sample(path, index), Where(Layout(1, world_size)))


def test_gangs_of_two_world_sizes_work_side_by_side_and_survive_hostile_samples(cluster, tmp_path):
    tasks = [task(COPY, 0, 2), task(REPO / "samples/replay/all_reduce/05_hangs_on_rank1.py", 1, 2),
             task(HOSTILE / "segfaults.py", 2, 2), task(COPY, 3, 2), task(COPY, 10, 4), task(COPY, 11, 4)]
    pool = GangPool(config(tmp_path, [2, 4]))
    try:
        results = {(r.sample_index, r.world_size): r for _, r in pool.evaluate(tasks)}
    finally:
        pool.shutdown()
    status = {k: r.status for k, r in results.items()}
    assert status == {(0, 2): Status.CORRECT, (1, 2): Status.TIMEOUT, (2, 2): Status.CRASH, (3, 2): Status.CORRECT,
                      (10, 4): Status.CORRECT, (11, 4): Status.CORRECT}, {k: r.message[:200] for k, r in results.items()}
    assert "rank 0 killed by SIGSEGV" in results[(2, 2)].message
    # the hang and the crash cost no gang its actor (the W=2 work may also have moved to a gang
    # started on the W=4 gang's GPUs once W=4 ran dry: that is the pool rebalancing)
    assert pool.stats["restarted"] == 0
    # 6 GPUs: one W=4 gang and one W=2 gang held their GPUs at once (whether their samples also
    # overlap in time depends on how fast 2 cores start 6 rank processes, so it is not asserted)
    w2 = [r for r in results.values() if r.world_size == 2]
    w4 = [r for r in results.values() if r.world_size == 4]
    assert all(r.gang.startswith("gang-w4-") for r in w4) and all(r.gang.startswith("gang-w2-") for r in w2)
    # never more GPUs held than the cluster has; once W=4 is done, W=2 may run 3 gangs (rebalancing)
    assert pool.stats["peak_gpus"] == 6 and pool.stats["peak_gangs"] in (2, 3)
    # nothing left behind: no gang actor, no rank process (prewarmed ones included)
    assert gang_actors() == []
    assert rank_processes_left(tmp_path / "cache", clean=True) == []


def test_a_killed_gang_gives_its_sample_a_crash_and_is_restarted(cluster, tmp_path):
    # 6 GPUs and W=4: exactly one gang, so the samples after the kill must go to its replacement
    tasks = [task(HOSTILE / "signals_then_hangs.py", 0, 4), task(COPY, 1, 4), task(COPY, 2, 4)]
    cfg = config(tmp_path, [4], timeout_s=60.0)
    killed = []

    def kill_when_hanging():
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not killed:
            for marker in (cfg.cache_path / "work").glob("gang-*/sample-*/hanging"):
                name = marker.parent.parent.name
                killed.append((name, rank_processes(marker.parent, ranks_only=True)))
                ray.kill(ray.get_actor(name))
                return
            time.sleep(0.1)

    killer = threading.Thread(target=kill_when_hanging, daemon=True)
    killer.start()
    pool = GangPool(cfg)
    try:
        results = {r.sample_index: r for _, r in pool.evaluate(tasks)}
    finally:
        pool.shutdown()
    killer.join(timeout=5)
    assert killed, "the hanging sample never started"
    victim, victim_ranks = killed[0]
    assert len(victim_ranks) == 4
    assert results[0].status == Status.CRASH and "died" in results[0].message and results[0].gang == victim
    assert [results[i].status for i in (1, 2)] == [Status.CORRECT, Status.CORRECT]
    assert results[1].gang != victim and pool.stats["restarted"] == 1
    assert rank_processes_left(tmp_path / "cache", clean=True) == []  # the victim's ranks died with it (PR_SET_PDEATHSIG)
    assert gang_actors() == []


def test_rank_environment_fails_fast_and_can_force_multicast_off(monkeypatch):
    from pkb_ray.isolation.ranks import MULTICAST_OFF, child_env

    monkeypatch.delenv("NCCL_NVLS_ENABLE", raising=False)
    env = child_env(collective_timeout_s=45)
    assert env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1" and env["TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC"] == "45"
    assert "NCCL_NVLS_ENABLE" not in env  # left to the environment...
    assert all(child_env(multicast=False)[k] == v for k, v in MULTICAST_OFF.items())  # ...or forced off
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "0")
    assert child_env(multicast=True)["NCCL_NVLS_ENABLE"] == "0"  # never switched on by us


def test_pipeline_evaluates_identical_sources_once_and_resumes_without_repeating(cluster, tmp_path, problems):
    from pkb_ray.pipeline.wiring import run_pipeline
    from pkb_ray.results.parquet import read_results

    copy = COPY.read_text()
    rows = [{"problem_id": "all_reduce", "model": "a", "sample_index": 0, "source": copy},
            {"problem_id": "all_reduce", "model": "b", "sample_index": 7, "source": copy},  # same source
            {"problem_id": "all_reduce", "model": "a", "sample_index": 1, "source": "def solution(x):\n  return x\n"}]
    cfg = config(tmp_path, [2])
    first = run_pipeline(rows, cfg, problems, tmp_path / "results")
    by_model = {(r.model, r.sample_index): r for r in first}
    assert len(first) == 3 and {r.status for r in first} == {Status.CORRECT, Status.WRONG_OUTPUT}
    a, b = by_model[("a", 0)], by_model[("b", 7)]
    copied = [r for r in (a, b) if r.duplicate_of]
    assert len(copied) == 1 and copied[0].duplicate_of == ({a.sample_key, b.sample_key} - {copied[0].sample_key}).pop()
    assert a.speedup == b.speedup and a.sample_key != b.sample_key  # one evaluation, two identities
    # the same sweep again: everything already has a final result, nothing is evaluated or written
    again = run_pipeline(rows, cfg, problems, tmp_path / "results")
    assert again == [] and len(read_results(tmp_path / "results")) == 3
    # the run's numbers reached Ray's metrics endpoint (what the dashboard reads)
    assert 'status="correct"' in scrape("ray_pkb_results") and scrape("ray_pkb_gang_busy_fraction")


def _named_actors_during(rows: list[dict], cfg, problems, results: Path) -> tuple[list, set]:
    """``run_pipeline``'s results, and every named actor seen while it ran. The rows settle in the
    stream, but their results may reach the driver only after the actors have stopped: the names
    are read while the stream runs, not in on_result."""
    from pkb_ray.pipeline.wiring import run_pipeline

    alive, done = set(), threading.Event()

    def watch():
        while not done.is_set():
            alive.update(ray.util.list_named_actors())
            time.sleep(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        return run_pipeline(rows, cfg, problems, results), alive
    finally:
        done.set()
        watcher.join()


def test_compile_actors_start_for_a_build_only_and_are_named_for_the_dashboard(cluster, tmp_path, problems):
    """Rows with nothing to build start no compile actor (each imports torch and the problems); a
    CUDA source starts one, named compile-0 as the gangs are named."""
    invalid = [{"problem_id": "no_such_problem", "model": "a", "sample_index": i, "source": "x = 1\n"}
               for i in range(3)]
    results, alive = _named_actors_during(invalid, config(tmp_path, [2]), problems, tmp_path / "results")
    assert [r.status for r in results] == [Status.INVALID_SAMPLE] * 3
    assert not any(name.startswith("compile-") for name in alive), alive
    broken = (REPO / "samples/replay/all_reduce/08_cuda_nvcc_error.py").read_text()
    rows = [{"problem_id": "all_reduce", "model": "a", "sample_index": 9, "backend": "cuda", "source": broken}]
    settings = config(tmp_path, [2]).model_dump(mode="json")
    settings["hardware"]["arch"] = "sm_90a"
    cfg = SweepConfig.model_validate(settings)
    results, alive = _named_actors_during(rows, cfg, problems, tmp_path / "results2")
    assert [r.status for r in results] == [Status.COMPILE_ERROR], [r.message for r in results]
    assert "compile-0" in alive, alive


def scrape(metric: str, within_s: float = 30.0) -> str:
    """Lines of ``metric`` on the nodes' Prometheus endpoints, once Ray has exported them."""
    import urllib.request

    ports = [n["MetricsExportPort"] for n in ray.nodes() if n["Alive"]]
    deadline = time.monotonic() + within_s
    while True:
        body = "\n".join(urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
                         for port in ports)
        lines = "\n".join(line for line in body.splitlines() if line.startswith(metric))
        if lines or time.monotonic() > deadline:
            return lines
        time.sleep(1)


def test_a_gang_whose_evaluator_fails_gets_a_new_harness_and_evaluates_the_sample_again(cluster, tmp_path):
    """The gang's clean set killed behind its back (an evaluator fault, not the sample's): the next
    sample's first attempt fails in the harness, the gang replaces it and evaluates the sample
    again, and nothing of the old harness stays."""
    import os
    import signal

    from pkb_ray.pipeline.gang import Gang

    gang = Gang(config(tmp_path, [2]).model_dump(mode="json"), "gang-retry", ["0", "1"])
    where = Where(Layout(1, 2))
    try:
        assert gang.evaluate(sample(COPY, 0), where).status == Status.CORRECT
        work = gang.harness.work_dir
        clean = sorted(set(rank_processes(work, clean=True)) - set(rank_processes(work)))
        assert clean
        for pid in clean:
            os.kill(pid, signal.SIGKILL)
        result = gang.evaluate(sample(COPY, 1), where)
        assert result.status == Status.CORRECT, result.message
        assert gang.replaced == 1
        assert all(not Path(f"/proc/{pid}").exists() or b"Z" in Path(f"/proc/{pid}/stat").read_bytes().split(b")")[-1][:3]
                   for pid in clean)
        assert gang.evaluate(sample(COPY, 2), where).status == Status.CORRECT
        assert gang.replaced == 1  # no leak seen after a healthy sample
    finally:
        gang.shutdown()
    assert rank_processes_left(tmp_path / "cache", clean=True) == []


def test_a_gang_that_holds_more_descriptors_than_when_new_replaces_its_harness(cluster, tmp_path):
    """Descriptors counted after each sample: hundreds more than the new harness held (here opened
    by the test in the gang's process) replace the harness once; the sample's result stands."""
    import os

    from pkb_ray.pipeline.gang import LEAK_SLACK_FDS, Gang

    gang = Gang(config(tmp_path, [2]).model_dump(mode="json"), "gang-leak", ["0", "1"])
    where = Where(Layout(1, 2))
    held = []
    try:
        assert gang.evaluate(sample(COPY, 0), where).status == Status.CORRECT and gang.replaced == 0
        held = [os.open(os.devnull, os.O_RDONLY) for _ in range(LEAK_SLACK_FDS + 50)]
        assert gang.evaluate(sample(COPY, 1), where).status == Status.CORRECT
        assert gang.replaced == 1
        assert gang.evaluate(sample(COPY, 2), where).status == Status.CORRECT
        assert gang.replaced == 1  # measured again once replaced: what it cannot free is not counted twice
    finally:
        for fd in held:
            os.close(fd)
        gang.shutdown()
