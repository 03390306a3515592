"""Hostile candidates: each gets the right status and message, and leaves no process behind."""

import os
from pathlib import Path

import pytest

from conftest import HOSTILE, pid_alive
from pkb_ray.schema import Sample, Status


def _sample(name: str) -> Sample:
    return Sample(problem_id="all_reduce", model="hostile", sample_index=0, source=(HOSTILE / name).read_text())


def _rank_processes(work_dir: Path) -> list[int]:
    """Live rank processes whose job folder is under work_dir."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"pkb_ray.runner.rank" in cmd and any(str(work_dir).encode() in part for part in cmd) and pid_alive(int(proc.name)):
            pids.append(int(proc.name))
    return pids


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
    assert _rank_processes(h.work_dir) == []


def test_patched_timer_does_not_fool_the_timer(make_harness):
    result = make_harness(2, rounds=20).evaluate(_sample("patches_timer.py"))
    assert result.status == Status.CORRECT, result.message
    assert min(result.cand_median_us) > 1.0  # real microseconds, not the frozen clock's zero
    assert 0.3 < result.speedup < 3.0


def test_leftover_thread_does_not_keep_ranks_alive(make_harness):
    h = make_harness(2)
    result = h.evaluate(_sample("leaves_thread_behind.py"))
    assert result.status == Status.CORRECT, result.message
    assert _rank_processes(h.work_dir) == []


def test_hang_is_killed_with_the_children_it_spawned(make_harness, tmp_path, monkeypatch):
    pidfile = tmp_path / "child"
    monkeypatch.setenv("PKB_TEST_PIDFILE", str(pidfile))
    h = make_harness(2, timeout_s=4)
    result = h.evaluate(_sample("spawns_child_and_hangs.py"))
    assert result.status == Status.TIMEOUT
    assert "trial seed=" in result.message  # where each rank was stuck
    children = [int(p.read_text()) for p in tmp_path.glob("child.*")]
    assert len(children) == 2
    assert not any(pid_alive(pid) for pid in children)
    assert _rank_processes(h.work_dir) == []


def test_next_sample_after_a_hang_is_evaluated_normally(make_harness, problems):
    h = make_harness(2, timeout_s=4, prewarm=1)
    assert h.evaluate(_sample("hangs_while_timed.py")).status == Status.TIMEOUT
    ok = h.evaluate(Sample(problem_id="all_reduce", model="m", sample_index=1, source=problems["all_reduce"].source()))
    assert ok.status == Status.CORRECT, ok.message
    h.close()
    assert _rank_processes(h.work_dir) == []
