"""The first test of the timing protocol: a copy of the reference times at 1.00x.

The noise model, measured (docs/benchmarks/timing.md): one evaluation of a reference copy at W=2,
200 rounds, on the 2-core VM with nothing else running, gives a speedup whose spread is about
0.10 (24 evaluations on 2026-12-02: 0.78-1.24, standard deviation 0.097, mean 1.01). Under the
suite's own load a single evaluation has read as far out as 2.4 (a burst while one side ran). So
no single evaluation is judged: the median of five must lie within a factor 1.5 of 1. Alone, a
median of five lies within [0.85, 1.18] (about 3 standard deviations); beside the suite's second
test process, whose load comes in bursts all the time, five have read 0.61-0.98. A protocol bug
that shifts every evaluation (one side timed without its barrier, or always first) by 1.5x fails
it; a smaller bias would pass, and is what the benchmark page tracks.
"""

import statistics
import time

import pytest

from conftest import pid_alive
from pkb_ray.isolation.procfs import descendants
from pkb_ray.measure.timing import calls_per_round, median_iqr, round_order, sample_time, speedup
from pkb_ray.spec.names import Status
from pkb_ray.spec.schema import Sample


def test_copy_of_reference_times_at_one(shared_harness, problems):
    h = shared_harness(2, rounds=200, warmup=10, timing_sets=3)
    sample = Sample(problem_id="all_reduce", model="m", sample_index=0, source=problems["all_reduce"].source())
    speedups = []
    for _ in range(5):
        r = h.evaluate(sample)
        assert r.status == Status.CORRECT, r.message
        speedups.append(r.speedup)
    # the module docstring's noise model; a 16x slower candidate is the next test's
    assert 1 / 1.5 <= statistics.median(speedups) <= 1.5, speedups


def test_slower_candidate_is_measured_slower(shared_harness, problems):
    from conftest import REPO

    source = (REPO / "samples/replay/all_reduce/02_chunked_slower.py").read_text()
    r = shared_harness(2, rounds=50).evaluate(Sample(problem_id="all_reduce", model="m", sample_index=2, source=source))
    assert r.status == Status.CORRECT and r.speedup < 0.5  # 16 all-reduces instead of one


def test_rounds_alternate_who_goes_first():
    orders = [round_order(i) for i in range(4)]
    assert orders == [("ref", "cand"), ("cand", "ref")] * 2


def test_statistics_by_hand():
    assert median_iqr([1, 2, 3, 4, 100]) == (3, 2)  # quartiles 2 and 4 (inclusive method)
    assert median_iqr([5.0]) == (5.0, 0.0)
    assert sample_time([3.0, 7.0, 5.0]) == 7.0
    assert speedup(10.0, 4.0) == 2.5
    with pytest.raises(ValueError):
        median_iqr([])


def test_calls_per_round_fill_the_round():
    assert calls_per_round(100.0, 2000.0, 500) == 20
    assert calls_per_round(3000.0, 2000.0, 500) == 1  # a slow call is its own round
    assert calls_per_round(0.5, 2000.0, 500) == 500  # capped
    assert calls_per_round(float("nan"), 2000.0, 500) == 500


def test_timed_results_report_their_rounds(shared_harness, problems):
    r = shared_harness(2, rounds=6, round_us=1500, max_round_calls=50).evaluate(
        Sample(problem_id="broadcast", model="m", sample_index=0, source=problems["broadcast"].source()))
    assert r.status == Status.CORRECT, r.message
    assert r.calls_per_round >= 1 and 0 < r.timed_seconds < r.eval_seconds
    assert len(r.ref_median_us) == 2 and all(t > 0 for t in r.cand_median_us)


def _settles_at(work_dir, n: int, within_s: float = 15.0) -> bool:
    """Rank processes under work_dir reach n (used sets are reaped in the background)."""
    from conftest import rank_processes

    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if len(rank_processes(work_dir, ranks_only=True)) == n:
            return True
        time.sleep(0.1)
    return False


@pytest.mark.parametrize("quiet, ahead", [(True, [2, 1, 0, 2]), (False, [2, 2, 2, 2])])
def test_prewarmed_sets_start_in_batches_when_timing_is_quiet(make_harness, problems, quiet, ahead):
    # prewarm=2, W=2: rank sets left started after each sample. Quiet timing starts a batch of
    # three with the first sample and none until they are used up (none starts during a timing);
    # otherwise a set starts whenever one is taken.
    h = make_harness(2, prewarm=2, quiet_timing=quiet, rounds=5)
    sample = Sample(problem_id="broadcast", model="m", sample_index=0, source=problems["broadcast"].source())
    for sets_left in ahead:
        assert h.evaluate(sample).status == Status.CORRECT
        assert _settles_at(h.work_dir, 2 * sets_left)


def test_quiet_timing_waits_for_the_last_sets_death(make_harness):
    # a killed set's teardown slows the device (on one H200 it made honest copies of the
    # reference "tampering"): before a timing, the retired set is gone, its folder too
    h = make_harness(2, prewarm=1, quiet_timing=True)
    ranks = h.pool.take()
    assert ranks.wait_ready(60).ok
    processes = [ranks.proc.pid, *descendants(ranks.proc.pid)]  # the sandbox's (or forked set's) first, ranks
    assert len(processes) >= 3
    h.pool.retire(ranks)
    h.pool.quiet()
    assert not ranks.job_dir.exists() and not any(pid_alive(p) for p in processes)
    assert not any(t.is_alive() for t in h.pool.reapers)


def test_fresh_inputs_are_new_every_call_but_keep_ties_zeros_and_signs():
    import torch

    from pkb_ray.measure.timing import FRESH_SPREAD, fresh_inputs

    x = torch.tensor([1.5, -2.0, 0.0, 1.5, 3.25] * 200)
    idx = torch.arange(5)
    a = fresh_inputs((x, idx, 7), nonce=11, n=0)
    b = fresh_inputs((x, idx, 7), nonce=11, n=1)
    again = fresh_inputs((x, idx, 7), nonce=11, n=0)
    assert torch.equal(a[0], again[0])  # a clean process recomputes the same inputs
    assert not torch.equal(a[0], b[0]) and not torch.equal(a[0], x)  # every call: new contents
    assert a[0].data_ptr() != x.data_ptr() and a[1].data_ptr() != idx.data_ptr() and torch.equal(a[1], idx)
    assert a[2] == 7
    assert a[0][0] == a[0][3]  # equal values stay equal (ties; tensors equal on every rank)
    assert (a[0][2::5] == 0).all() and (torch.sign(a[0]) == torch.sign(x)).all()
    nonzero = x != 0
    assert ((a[0][nonzero] / x[nonzero] - 1).abs() <= FRESH_SPREAD + 1e-6).all()
    assert fresh_inputs((idx,), nonce=11, n=0) is None  # nothing to move: the caller draws a new set


def test_fresh_calls_batched_equal_each_call_made_alone(monkeypatch):
    import torch

    from pkb_ray.measure import timing

    x = (torch.randn(3, 50) * 100).to(torch.bfloat16)
    base = (x, [torch.tensor(2.5), torch.arange(4)], "mode")
    ns = list(range(1, 40, 3))
    alone = [timing.fresh_inputs(base, nonce=5, n=n) for n in ns]
    for per_pass_elements in (1 << 18, 400, 1):  # one pass, passes of 2 calls, one call a pass
        monkeypatch.setitem(timing.FRESH_BATCH_ELEMENTS, "cpu", per_pass_elements)
        for own in (True, False):
            made = timing.fresh_calls(base, nonce=5, ns=ns, own=own)
            for got, want in zip(made, alone, strict=True):
                assert torch.equal(got[0], want[0]) and got[0].dtype == torch.bfloat16 and got[0].shape == (3, 50)
                assert type(got[1]) is list and torch.equal(got[1][0], want[1][0]) and got[2] == "mode"
            storages = {c[0].untyped_storage().data_ptr() for c in made}
            assert len(storages) == len(ns) or not own  # own: every call its own buffers
    assert timing.fresh_calls((torch.arange(3),), nonce=5, ns=[0, 1]) is None
    # an empty tensor (a rank that sends nothing in an uneven exchange): empty buffers, one a call
    empty = timing.fresh_calls((torch.empty(0, 128), x), nonce=5, ns=[0, 1, 2])
    assert [tuple(c[0].shape) for c in empty] == [(0, 128)] * 3


@pytest.mark.parametrize("mode", ["eager", "graph", "both"])
def test_timing_mode_is_in_the_row_and_graphs_fall_back_to_eager_off_the_gpu(shared_harness, problems, mode):
    # gloo ranks have no CUDA device to capture on: graph mode times both sides eager and says why
    r = shared_harness(2, rounds=6, timing_mode=mode).evaluate(
        Sample(problem_id="broadcast", model="m", sample_index=0, source=problems["broadcast"].source()))
    assert r.status == Status.CORRECT, r.message
    assert r.timing_mode == "eager" and r.cand_time_us > 0
    if mode == "eager":
        assert r.graph_error == ""
    else:
        assert "CUDA graphs need a CUDA device" in r.graph_error and "not cpu" in r.graph_error
    if mode == "both":  # each mode's times: eager's only, the graph never ran
        assert r.eager_ref_time_us == r.ref_time_us and r.eager_cand_time_us == r.cand_time_us
        assert r.graph_ref_time_us is None and r.graph_cand_time_us is None
    else:
        assert r.eager_cand_time_us is None


def test_a_graph_replays_new_inputs_only_when_they_fit_its_buffers():
    import torch

    from pkb_ray.runner.graphs import Captured, same_layout

    a = (torch.zeros(4), [torch.ones(2, dtype=torch.int64)], 3)
    assert same_layout(a, (torch.ones(4), [torch.zeros(2, dtype=torch.int64)], 3))
    assert not same_layout(a, (torch.ones(5), [torch.zeros(2, dtype=torch.int64)], 3))  # shape
    assert not same_layout(a, (torch.ones(4), [torch.zeros(2, dtype=torch.int64)], 4))  # a value the graph baked in
    assert not same_layout(a, (torch.ones(4, dtype=torch.float64), [torch.zeros(2, dtype=torch.int64)], 3))
    buffers = [(torch.zeros(3), (torch.zeros(2),))]
    held = buffers[0][0]
    Captured(graph=None, inputs=buffers, outputs=[]).load([(torch.tensor([1.0, 2.0, 3.0]), (torch.tensor([4.0, 5.0]),))])
    assert held.tolist() == [1.0, 2.0, 3.0] and buffers[0][1][0].tolist() == [4.0, 5.0]  # in place: the graph's addresses


def test_a_tolerance_override_is_used_by_the_check_and_the_timing_step(make_harness, shared_harness, problems):
    from conftest import REPO
    from pkb_ray.spec.names import Status
    from pkb_ray.spec.schema import Sample

    src = (REPO / "samples/replay/all_reduce/03_average_not_sum.py").read_text()
    sample = Sample(problem_id="all_reduce", model="t", sample_index=0, source=src)
    strict = shared_harness(2)
    assert strict.evaluate(sample).status == Status.WRONG_OUTPUT
    loose = make_harness(2, tolerances={"all_reduce": {"float32": {"atol": 1e9, "rtol": 0}}})
    assert loose.tolerance(problems["all_reduce"], "float32").reason == "set by eval.tolerances"
    result = loose.evaluate(sample)  # an average is within 1e9 of the sum: correct, and timed
    assert result.status == Status.CORRECT and result.speedup


def test_sequential_stopping_ends_the_rounds_once_the_interval_is_tight_enough(shared_harness, problems):
    sample = Sample(problem_id="broadcast", model="m", sample_index=0, source=problems["broadcast"].source())
    # an interval always within +/- 1000 %: the first look, after min_rounds, ends the rounds
    stopped = shared_harness(2, rounds=16, min_rounds=6, target_halfwidth=10.0).evaluate(sample)
    assert stopped.status == Status.CORRECT, stopped.message
    assert stopped.timed_rounds == 6
    # one no interval of a few rounds meets: every round runs
    full = shared_harness(2, rounds=16, min_rounds=6, target_halfwidth=1e-6).evaluate(sample)
    assert full.status == Status.CORRECT, full.message
    assert full.timed_rounds == 16
