"""Hostile candidates: each gets the right status and message, and leaves no process behind."""

import os
import time
from pathlib import Path

import pytest

from conftest import HOSTILE, pid_alive, rank_processes_left
from pkb_ray.schema import Sample, Status


def _sample(name: str) -> Sample:
    return Sample(problem_id="all_reduce", model="hostile", sample_index=0, source=(HOSTILE / name).read_text())


@pytest.mark.parametrize(
    "name, status, needle",
    [
        ("correct_then_cached.py", Status.WRONG_OUTPUT, "timed call gave a wrong answer"),
        ("breaks_reference.py", Status.WRONG_OUTPUT, "reference gave a wrong answer"),
        ("segfaults.py", Status.CRASH, "SIGSEGV"),
        ("hangs_while_timed.py", Status.TIMEOUT, "during timing"),
        ("exits_cleanly.py", Status.RUNTIME_ERROR, "SystemExit"),
    ],
)
def test_hostile_sample_gets_its_status(make_harness, name, status, needle):
    h = make_harness(2, timeout_s=6)
    result = h.evaluate(_sample(name))
    assert result.status == status, result.message
    assert needle in result.message
    assert rank_processes_left(h.work_dir) == []


def test_patched_timer_does_not_fool_the_timer(make_harness):
    result = make_harness(2, rounds=20).evaluate(_sample("patches_timer.py"))
    assert result.status == Status.CORRECT, result.message
    assert min(result.cand_median_us) > 1.0  # real microseconds, not the frozen clock's zero
    assert 0.3 < result.speedup < 3.0


def test_leftover_thread_does_not_keep_ranks_alive(make_harness):
    h = make_harness(2)
    result = h.evaluate(_sample("leaves_thread_behind.py"))
    assert result.status == Status.CORRECT, result.message
    assert rank_processes_left(h.work_dir) == []


def test_hang_is_killed_with_the_children_it_spawned(make_harness, tmp_path, monkeypatch):
    pidfile = tmp_path / "child"
    monkeypatch.setenv("PKB_TEST_PIDFILE", str(pidfile))
    h = make_harness(2, timeout_s=4)
    result = h.evaluate(_sample("spawns_child_and_hangs.py"))
    assert result.status == Status.TIMEOUT
    assert "trial seed=" in result.message  # where each rank was stuck
    children = [int(p.read_text()) for p in tmp_path.glob("child.*")]
    assert len(children) == 2
    assert rank_processes_left(h.work_dir) == []  # waits for the (background) reaping
    # the children got SIGKILL with their rank's process session; a busy machine may take a moment
    # to run them to their end, so give them as long as the ranks get
    deadline = time.monotonic() + 10
    while any(pid_alive(pid) for pid in children) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(pid_alive(pid) for pid in children)


def test_next_sample_after_a_hang_is_evaluated_normally(make_harness, problems):
    h = make_harness(2, timeout_s=4, prewarm=1)
    assert h.evaluate(_sample("hangs_while_timed.py")).status == Status.TIMEOUT
    ok = h.evaluate(Sample(problem_id="all_reduce", model="m", sample_index=1, source=problems["all_reduce"].source()))
    assert ok.status == Status.CORRECT, ok.message
    h.close()
    assert rank_processes_left(h.work_dir) == []
