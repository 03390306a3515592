"""The freezer stops every process below a sandbox's first one, however it was started, and
resumes them: CPU time of spinning processes does not advance while frozen."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pkb_ray.isolation import freeze_group
from pkb_ray.isolation.freezer import Freezer, task_state
from pkb_ray.isolation.procfs import descendants

# a spinning child, and a spinning grandchild whose parent exited (re-parented above the root
# without a PID namespace: started here in a session of its own so it stays below the root)
SPIN = "while True: pass"
TREE = f"""
import os, subprocess, sys, time
subprocess.Popen([sys.executable, "-c", {SPIN!r}])
if os.fork() == 0:  # a child that forks a spinner and stays, like a launcher
    subprocess.Popen([sys.executable, "-c", {SPIN!r}])
    time.sleep(600)
time.sleep(600)
"""


def _tree(root, n: int, spinners: int = 0) -> list[int]:
    """The processes below ``root`` once there are ``n`` of them, ``spinners`` of which run SPIN (or
    after 20 s). Waiting for the spinners to run matters: a spinner stopped between its parent's
    vfork and its exec holds the parent in the vfork, never seen stopped, and the freeze fails."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        found = descendants(root.pid)
        if len(found) >= n and sum(_runs_spin(p) for p in found) >= spinners:
            break
        time.sleep(0.05)
    return descendants(root.pid)


def _runs_spin(pid: int) -> bool:
    try:
        return SPIN.encode() in open(f"/proc/{pid}/cmdline", "rb").read()
    except OSError:
        return False


def _cpu_ticks(pids):
    total = 0
    for pid in pids:
        try:
            fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime + stime
    return total


def test_freeze_stops_the_whole_tree_and_thaw_resumes_it():
    root = subprocess.Popen([sys.executable, "-c", TREE], start_new_session=True)
    try:
        tree = _tree(root, 3, spinners=2)
        assert len(tree) >= 3, tree
        freezer = Freezer(root.pid)
        assert freezer.freeze(5.0)
        assert set(tree) <= set(freezer.stopped)
        time.sleep(0.1)
        before = _cpu_ticks(tree)
        time.sleep(0.5)
        assert _cpu_ticks(tree) == before  # nothing ran while frozen
        freezer.thaw()
        time.sleep(0.5)
        assert _cpu_ticks(tree) > before  # the spinners run again
    finally:
        os.killpg(root.pid, signal.SIGKILL)
        root.wait()


# two helpers that resume each other: each spins sending SIGCONT to the other (a sample's escape)
PAIR = """
import os, signal, time
other = os.getpid()
child = os.fork()
peer = other if child == 0 else child
while True:
    try:
        os.kill(peer, signal.SIGCONT)
    except ProcessLookupError:
        pass
"""


def _cpu_ns(pids):
    from pkb_ray.isolation.procfs import cpu_ns, tasks
    return sum(cpu_ns(pid, tid) or 0 for pid in pids for tid in tasks(pid))


def test_helpers_that_resume_each_other_are_never_called_frozen_while_they_run():
    root = subprocess.Popen([sys.executable, "-c", f"import subprocess, sys, time\n"
                             f"subprocess.Popen([sys.executable, '-c', {PAIR!r}])\ntime.sleep(600)"],
                            start_new_session=True)
    try:
        pair = _tree(root, 2)
        assert len(pair) == 2, pair
        outcomes = []
        for _ in range(5):
            freezer = Freezer(root.pid)
            frozen = freezer.freeze(0.5)
            outcomes.append(frozen)
            if frozen:  # seen stopped in one pass: then nothing of it may run unnoticed
                before = _cpu_ns(pair)
                time.sleep(0.2)
                assert _cpu_ns(pair) - before < 1_000_000 or freezer.ran_while_frozen(), "ran, unnoticed"
            freezer.thaw()
        print("freezes proven:", outcomes)
    finally:
        os.killpg(root.pid, signal.SIGKILL)
        root.wait()


def test_a_process_resumed_after_the_freeze_is_found_by_its_cpu_time():
    root = subprocess.Popen([sys.executable, "-c", TREE], start_new_session=True)
    try:
        _tree(root, 3, spinners=2)
        freezer = Freezer(root.pid)
        assert freezer.freeze(5.0)
        time.sleep(0.05)
        assert freezer.ran_while_frozen() == ""  # proven stopped: nothing ran since
        spinner = next(p for p in descendants(root.pid) if _runs_spin(p))
        os.kill(spinner, signal.SIGCONT)  # what an escaped helper would do
        found, deadline = "", time.monotonic() + 10
        while not found and time.monotonic() < deadline:  # on a loaded machine its first tick of CPU time may take a while
            time.sleep(0.1)
            found = freezer.ran_while_frozen()
        assert f"process {spinner}" in found and "while its set was stopped" in found, found
        freezer.thaw()
    finally:
        os.killpg(root.pid, signal.SIGKILL)
        root.wait()


# a helper that sleeps in a read (no CPU) and, on each byte, starts a thread that spins: long
# ("L") or briefly, then ends. Resumed by anything while its set is stopped (a timer's SIGCONT),
# every task the freeze recorded stays idle: only a thread born after the proof runs.
WAKE = """
import os, sys, threading, time
def spin(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass
while True:
    cmd = os.read(int(sys.argv[1]), 1)
    threading.Thread(target=spin, args=(3.0 if cmd == b"L" else 0.3,)).start()
"""


def _waker():
    """(root, the helper's pid below it, the write end of its pipe)."""
    r, w = os.pipe()
    starter = f"import subprocess, sys, time\nsubprocess.Popen([sys.executable, '-c', {WAKE!r}, '{r}'], pass_fds=[{r}])\ntime.sleep(600)"
    root = subprocess.Popen([sys.executable, "-c", starter], pass_fds=[r], start_new_session=True)
    os.close(r)
    _tree(root, 1)
    time.sleep(0.5)  # the helper's interpreter up and waiting in its read
    return root, descendants(root.pid)[0], w


def _escape(freezer, helper, w, cmd: bytes) -> str:
    """Resume the helper behind the freezer's back, hand it ``cmd``, and what the freezer finds."""
    os.kill(helper, signal.SIGCONT)
    os.write(w, cmd)
    found, deadline = "", time.monotonic() + 10
    while not found and time.monotonic() < deadline:
        time.sleep(0.1)
        found = freezer.ran_while_frozen()
    return found


def test_a_thread_born_while_stopped_is_found_though_no_recorded_task_ran_long():
    root, helper, w = _waker()
    try:
        freezer = Freezer(root.pid)
        assert freezer.freeze(5.0)
        assert freezer.ran_while_frozen() == ""
        found = _escape(freezer, helper, w, b"L")
        assert f"process {helper} started task" in found, found
    finally:
        os.killpg(root.pid, signal.SIGKILL)
        root.wait()


def test_a_thread_that_ran_and_ended_while_stopped_is_found_by_its_process_time():
    root, helper, w = _waker()
    try:
        freezer = Freezer(root.pid)
        assert freezer.freeze(5.0)
        os.kill(helper, signal.SIGCONT)
        os.write(w, b"s")
        time.sleep(1.0)  # its thread spun 0.3 s and ended: no task now that the freeze did not see
        found = freezer.ran_while_frozen()
        assert f"process {helper} used" in found and "ms of CPU" in found, found
    finally:
        os.killpg(root.pid, signal.SIGKILL)
        root.wait()


def test_a_process_resumed_during_the_freeze_is_stopped_again():
    """A leader resumed between its signal and the pass that proves it stopped (a peer's SIGCONT,
    a timer's) is signalled again: the freeze is proven, not left to its deadline."""
    root = subprocess.Popen([sys.executable, "-c", TREE], start_new_session=True)
    try:
        tree = _tree(root, 3, spinners=2)
        freezer = Freezer(root.pid)
        assert freezer.freeze(5.0)
        freezer.thaw()
        import threading
        stop = threading.Event()

        def resume():  # SIGCONT to every process, again and again, while the next freeze runs
            while not stop.is_set():
                for pid in tree:
                    try:
                        os.kill(pid, signal.SIGCONT)
                    except ProcessLookupError:
                        pass
                time.sleep(0.002)

        thread = threading.Thread(target=resume)
        thread.start()
        threading.Timer(0.05, stop.set).start()  # it ends while the freeze is under way
        proven = freezer.freeze(5.0)
        thread.join()
        assert proven  # not left to its deadline (before: every later look found a leader running)
        assert freezer.freeze(5.0)  # the resumer gone, the proof holds from here on
        time.sleep(0.2)
        assert freezer.ran_while_frozen() == ""
    finally:
        os.killpg(root.pid, signal.SIGKILL)
        root.wait()


needs_group = pytest.mark.skipif(freeze_group.probe()[0] is None,
                                 reason=f"no cgroup of our own: {freeze_group.probe()[1]}")


@needs_group
def test_a_freeze_group_holds_what_signals_cannot():
    """Adopted into a cgroup of its own, the tree is frozen by the kernel: a SIGCONT (a peer's, a
    timer's) does not resume a frozen task, and a process forked later starts inside and frozen."""
    root = subprocess.Popen([sys.executable, "-c", TREE], start_new_session=True)
    group = freeze_group.FreezeGroup(freeze_group.probe()[0])
    try:
        tree = _tree(root, 3, spinners=2)
        assert group.adopt(tree)
        freezer = Freezer(root.pid)
        freezer.use_cgroup(group.path)
        assert freezer.how == "cgroup freezer"
        assert freezer.freeze(5.0)
        for pid in tree:  # what escaped the SIGSTOP freezer
            os.kill(pid, signal.SIGCONT)
        time.sleep(0.1)
        before = _cpu_ticks(tree)
        time.sleep(0.5)
        assert _cpu_ticks(tree) == before  # nothing ran while frozen
        freezer.thaw()
        time.sleep(0.5)
        assert _cpu_ticks(tree) > before
        later = set(descendants(root.pid)) - set(tree)
        assert not later
        assert set(tree) <= {int(p) for p in (group.path / "cgroup.procs").read_text().split()}
    finally:
        assert group.close()  # kills what is inside: the tree
        time.sleep(0.2)
        assert all(task_state(pid, str(pid)) in ("Z", "") for pid in tree)  # dead, left to their parents to reap
        os.killpg(root.pid, signal.SIGKILL)
        root.wait()
    assert not group.path.exists()


@needs_group
def test_a_sandbox_is_frozen_by_its_group_once_ready(make_harness, monkeypatch):
    """A harness's rank sets move into a freezing cgroup when they are ready (zygote-forked sets
    included): a helper woken by a timer's SIGCONT gains nothing and is not caught, because it never
    runs while its set is frozen."""
    from conftest import HOSTILE
    from pkb_ray.spec.schema import Sample

    monkeypatch.setenv(freeze_group.FREEZER_ENV, "cgroup")
    where = freeze_group.parent()[0]
    others = set(where.glob("pkb-freeze-*"))  # other harnesses' of this process (a test worker's)
    h = make_harness(2, timeout_s=10)
    result = h.evaluate(Sample(problem_id="all_reduce", model="hostile", sample_index=0,
                               source=(HOSTILE / "wakes_itself_with_a_timer.py").read_text()))
    # with the SIGSTOP freezer it is caught (tests/test_hostile_on_cpu.py); here it never ran frozen
    assert result.status == "correct", result.message
    assert result.speedup is not None and result.speedup < 1.0  # its spinning costs only itself
    groups = list(set(where.glob("pkb-freeze-*")) - others)
    assert groups  # the clean set's, at least, while the harness is open
    h.close()
    deadline = time.monotonic() + 30  # each set's group goes once its processes are reaped
    while [g for g in groups if g.exists()] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [g for g in groups if g.exists()]


@needs_group
def test_groups_of_an_evaluator_that_died_are_removed_and_a_live_ones_stay():
    """An evaluator killed before closing its sets leaves its freezing cgroups (with any orphaned
    rank still inside): the next probe kills and removes them. A live process's are kept."""
    where = freeze_group.probe()[0]
    made = subprocess.run([sys.executable, "-c", "import sys; from pathlib import Path; "
                           "from pkb_ray.isolation.freeze_group import FreezeGroup; "
                           "print(FreezeGroup(Path(sys.argv[1])).path)", str(where)],
                          capture_output=True, text=True, check=True)
    left = freeze_group.FreezeGroup.__new__(freeze_group.FreezeGroup)  # the dead evaluator's, never closed
    left.path, left.adopted = Path(made.stdout.strip()), False
    assert left.path.is_dir()
    live = freeze_group.FreezeGroup(where)  # this process's own: running, so it stays
    orphan = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    try:
        assert left.adopt([orphan.pid])
        removed = freeze_group.remove_leftovers(where)
        assert left.path.name in removed and not left.path.exists()
        assert orphan.wait(timeout=10) == -signal.SIGKILL  # the orphan inside went with it
        assert live.path.exists() and live.path.name not in removed
    finally:
        orphan.kill()
        assert live.close()
