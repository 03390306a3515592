"""Speedups whose truth is known by construction (pkb_ray.problems.ladders), read back through the
harness on 2 gloo ranks, and samples that try to make the harness's own work count for them.

On an idle 2-core VM the all-reduce ladder at its default size reads within 10 % of the truth on
every rung from 1/8 to 4 (docs/benchmarks/timing.md, ``python -m benchmarks ladder``). Under the suite's
own load (a second test process on the same 2 cores) one evaluation spreads further, so a rung
here must read within LADDER_TOLERANCE of the truth, on its first evaluation or on the median of
five. The squeeze this issue removed fails it: with the fixed work in the brackets (~2 ms around
~6 ms of calls) a candidate four times slower read 0.31 and a reference four times slower 3.25.
"""

import statistics

import pytest

from conftest import HOSTILE
from pkb_ray.problem import load_problems
from pkb_ray.problems.ladders import repeated_source, write_ladder
from pkb_ray.spec.names import Status
from pkb_ray.spec.schema import Sample

DEFAULT = {"numel": 1 << 20}  # all_reduce's default size: ~6 ms a gloo call here
LADDER_TOLERANCE = 0.15
HONEST = (0.75, 1.33)  # an honest copy's one reading at this size under the suite's load


@pytest.fixture(scope="module")
def ladder(tmp_path_factory, cache_dir):
    from conftest import REPO, cpu_harness

    folder = tmp_path_factory.mktemp("ladder")
    write_ladder((REPO / "problems/all_reduce.py").read_text(), folder, [1, 4])
    h = cpu_harness(load_problems(folder), 2, dict(size=DEFAULT, rounds=40, timeout_s=120), folder / "work", cache_dir)
    yield h
    h.close()


def _read(h, problem_id: str, times: int, index: int) -> float:
    from conftest import REPO

    source = repeated_source((REPO / "problems/all_reduce.py").read_text(), times)
    result = h.evaluate(Sample(problem_id=problem_id, model="ladder", sample_index=index, source=source))
    assert result.status == Status.CORRECT, result.message
    return result.speedup


@pytest.mark.parametrize("problem_id, times, true", [("all_reduce_x1", 4, 0.25), ("all_reduce_x4", 1, 4.0)],
                         ids=["candidate_4x_slower", "reference_4x_slower"])
def test_a_ladder_rung_reads_its_true_speedup(ladder, problem_id, times, true):
    readings = [_read(ladder, problem_id, times, 0)]
    if abs(readings[0] / true - 1) > LADDER_TOLERANCE:  # the other test process's load comes and goes:
        readings += [_read(ladder, problem_id, times, i) for i in (1, 2, 3, 4)]  # 0.31, 0.33, 0.24 seen in three
    assert abs(statistics.median(readings) / true - 1) <= LADDER_TOLERANCE, (true, readings)


@pytest.mark.parametrize("name", ["replaces_its_fire_step.py", "inflates_its_blanks.py", "says_done_early.py",
                                  "idle_threads.py"])
def test_a_sample_reads_its_calls_honest_speed_whatever_it_does_around_them(shared_harness, name):
    """Honest calls, with a leaner fire step of its own, slowed blanks, a done line before its calls,
    or 48 idle threads: each reads an honest copy's speed (tricks that worked would read 1.5-50x,
    the threads 0.5x), on its first evaluation or on the median of three."""
    h = shared_harness(2, size=DEFAULT, rounds=20, timeout_s=60)
    source = (HOSTILE / name).read_text()
    readings = []
    for index in range(3):
        result = h.evaluate(Sample(problem_id="all_reduce", model="hostile", sample_index=index, source=source))
        assert result.status == Status.CORRECT, result.message
        readings.append(result.speedup)
        if index == 0 and HONEST[0] <= result.speedup <= HONEST[1]:
            break
    assert HONEST[0] <= statistics.median(readings) <= HONEST[1], readings
