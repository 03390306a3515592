"""The gang pool's watch on a local Ray cluster with logical GPUs and gloo ranks: a wedged gang
(its actor process SIGSTOPped mid-sample) is restarted and the sweep moves on.
"""

import contextlib
import os
import signal
import threading
import time
from pathlib import Path

import pytest
import ray

from conftest import REPO, gang_actors, pid_alive, rank_processes_left
from pkb_ray.pipeline.gang_pool import GangPool
from pkb_ray.spec.config import SweepConfig
from pkb_ray.spec.names import Status
from pkb_ray.spec.placement import Layout
from pkb_ray.spec.schema import EvalTask, Sample, Where

GPUS = 2  # one W=2 gang: the samples after the stop must go to its replacement
COPY = REPO / "samples/replay/all_reduce/00_reference_copy.py"


@pytest.fixture(scope="module")
def cluster(shared_ray):
    with shared_ray.joined():  # the session's cluster, of which the gangs may hold GPUS
        yield


def config(tmp_path: Path) -> SweepConfig:
    return SweepConfig.model_validate({
        "eval": {"trials": 2, "timing_sets": 2, "warmup": 2, "rounds": 5, "timeout_s": 20.0, "prewarm": 1},
        "hardware": {"world_sizes": [2], "gpus_per_node": GPUS}, "ray": {"max_gpus": GPUS},
        "cache_dir": str(tmp_path / "cache"),
    })


def task(index: int) -> EvalTask:
    return EvalTask(Sample(problem_id="all_reduce", model="test", sample_index=index, source=COPY.read_text()),
                    Where(Layout(1, 2)))


def stop_first_gang(pool: GangPool, work: Path, stopped: list) -> None:
    """Once a gang's first sample is on its ranks (its candidate file written), SIGSTOP the gang's
    actor process: it then answers nothing, as if stuck in a driver call."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:  # folders come and go while the walk runs (a sample's, a probe's): a vanished one is no error
            found = list(work.glob("gang-*/**/candidate.py"))
        except OSError:
            found = []
        for candidate in found:
            name = candidate.relative_to(work).parts[0]
            pid = ray.get(pool.handles[name].actor.info.remote(), timeout=30)["pid"]
            os.kill(pid, signal.SIGSTOP)
            stopped.append((name, pid))
            return
        time.sleep(0.05)


def resume(stopped: list) -> None:
    for _, pid in stopped:
        with contextlib.suppress(ProcessLookupError):  # ray.kill may have ended it already
            os.kill(pid, signal.SIGCONT)


def test_a_wedged_gang_times_out_its_sample_is_restarted_and_the_pool_moves_on(cluster, tmp_path):
    cfg = config(tmp_path)
    pool = GangPool(cfg, watch_margin_s=3.0)
    stopped: list = []
    stopper = threading.Thread(target=stop_first_gang, args=(pool, cfg.cache_path / "work", stopped), daemon=True)
    stopper.start()
    results = []
    try:
        for _, result in pool.evaluate([task(i) for i in range(3)]):
            results.append(result)
            if result.status == Status.TIMEOUT:
                resume(stopped)  # a wedge that ends late: the pool must ignore its reply
    finally:
        resume(stopped)  # whatever happened, nothing stays stopped
        pool.shutdown()
    stopper.join(timeout=5)
    assert stopped, "no sample reached its ranks"
    victim, pid = stopped[0]
    timed_out = [r for r in results if r.status == Status.TIMEOUT]
    # one result per sample: the stopped gang's late reply, if any, was dropped
    assert sorted(r.sample_index for r in results) == [0, 1, 2] and len(timed_out) == 1, \
        [(r.sample_index, r.status, r.message[:200]) for r in results]
    assert timed_out[0].gang == victim
    assert f"gang {victim} did not answer" in timed_out[0].message and "stopped answering; restarted" in \
        timed_out[0].message
    others = [r for r in results if r is not timed_out[0]]
    assert [r.status for r in others] == [Status.CORRECT] * 2 and all(r.gang != victim for r in others)
    assert pool.stats["restarted"] == 1 and pool.stats["evaluated"] == 3
    # nothing left behind: the stopped actor was killed (Ray SIGKILLs it, stopped or not), its ranks with it
    deadline = time.monotonic() + 30
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not pid_alive(pid)
    assert gang_actors() == []
    assert rank_processes_left(tmp_path / "cache", clean=True) == []
