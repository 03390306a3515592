"""Hostile candidates: each gets the right status and message, harms nothing, and leaves no process behind.

Every sample here runs in the sandbox (eval.isolation=sandbox, the default), on 2 gloo ranks.
Most go through one harness per setting for the session (``shared_harness``), as a gang's samples
do: each must be judged right whatever the sample before it did.
"""

import os
import uuid
from pathlib import Path

import pytest

from conftest import HOSTILE, REPO, StandIn, pid_alive, rank_processes_left
from pkb_ray.spec.names import Status
from pkb_ray.spec.schema import Sample

BIG = {"numel": 1 << 20}  # ~ms per gloo all-reduce: long enough for the parent's bracket to matter
# One CPU evaluation of a sample that runs at the reference's speed reads 0.78-1.24 on an idle 2-core
# VM (docs/benchmarks/timing.md) and has read 0.58 and 2.02 on CI's loaded machine; the tricks here
# would gain 10x or more. A bound on one evaluation sits above that noise, not beside an honest copy.
HONEST_RANGE = (0.3, 3.0)
# At 20-30 rounds one evaluation reads wider still: 0.42-2.9 for an honest copy and the samples of
# test_reference_slowing_samples_gain_nothing (39 readings, python -m benchmarks short_protocol,
# 2026-12-04), and 3.77 once in a full run, when the reference's reading shifted between
# evaluations. So a reading outside the bound is judged on the median of it and two more
# evaluations (assert_gains_nothing): a gain is outside it every time; an honest sample, whose one
# reading has been outside it about once in 70, fails the median with a probability of about 4e-4.


def _outside(result) -> bool:
    """A correct result reading above HONEST_RANGE."""
    return result.status == Status.CORRECT and result.speedup >= HONEST_RANGE[1]


def assert_gains_nothing(h, name: str, first) -> None:
    """``first``, a result of the sample ``name`` on ``h``, reads inside the bound, or the median of
    it and two more evaluations does (neither of the two reads outside it as it did)."""
    if _outside(first):
        more = [h.evaluate(_sample(name, index)) for index in (1, 2)]
        assert not any(_outside(r) for r in more), (first.speedup,
                                                    [(r.status, r.speedup, r.message) for r in more])


def _sample(name: str, index: int = 0) -> Sample:
    return Sample(problem_id="all_reduce", model="hostile", sample_index=index, source=(HOSTILE / name).read_text())


def _copy(problems, index: int = 1) -> Sample:
    return Sample(problem_id="all_reduce", model="m", sample_index=index, source=problems["all_reduce"].source())


@pytest.mark.parametrize(
    "name, status, needle",
    [
        ("correct_then_cached.py", Status.WRONG_OUTPUT, "timed call gave a wrong answer"),
        ("breaks_reference.py", Status.TAMPERING, "replaced torch.distributed.all_reduce"),
        ("slows_reference.py", Status.TAMPERING, "replaced torch.distributed.all_reduce"),
        ("slows_reference_later.py", Status.TAMPERING, "replaced torch.Tensor.clone"),
        ("segfaults.py", Status.CRASH, "SIGSEGV"),
        ("hangs_while_timed.py", Status.TIMEOUT, "during timing"),
        ("exits_cleanly.py", Status.RUNTIME_ERROR, "SystemExit"),
        ("rewrites_check.py", Status.WRONG_OUTPUT, "timed call gave a wrong answer"),
        ("../../samples/replay/all_reduce/09_rewrites_timer.py", Status.TAMPERING, "timed_region"),
        ("shares_output_buffer.py", Status.WRONG_OUTPUT, "earlier call's output"),
        # ... and across regions (a CPU region holds one call): the last region's outputs are still held
        ("shares_output_buffer_when_timed.py", Status.WRONG_OUTPUT, "earlier call's output"),
        # the outputs are read by the trusted side as each region ends, the candidate stopped
        ("answers_at_hand_over.py", Status.WRONG_OUTPUT, "timed call gave a wrong answer"),
        # every call's check is decided after its region, independently: none run out
        ("cheats_after_early_checks.py", Status.WRONG_OUTPUT, "timed call gave a wrong answer"),
        # the trials' rules in timed calls: no output in an input, no input changed
        ("in_place_while_timed.py", Status.WRONG_OUTPUT, "shares memory with an input"),
        ("writes_its_input_while_timed.py", Status.WRONG_OUTPUT, "changed by the call"),
        # every rank's inputs come from a key of its own: another rank's cannot be rebuilt
        ("reduces_without_communicating.py", Status.WRONG_OUTPUT, "trial seed="),
        # ranks that tell each other their keys: a timed call's inputs come from a nonce no rank gets
        ("shares_keys_with_peers.py", Status.WRONG_OUTPUT, "timed call gave a wrong answer"),
        # ... and they derive from keys no rank of the sample gets: a rank cannot predict even its own
        ("predicts_its_timed_inputs.py", Status.CORRECT, ""),
        # staged input buffers: the trusted side writes only into ones that fit the reference's ...
        ("forges_staged_inputs.py", Status.TAMPERING, "not where its rank said they lie"),
        # ... and where the rank said: inputs written elsewhere leave its real buffers stale
        ("misdirects_staged_inputs.py", Status.WRONG_OUTPUT, "timed call gave a wrong answer"),
        # a graph's replays may report their outputs "as before"; an eager region that says so names none
        ("claims_as_before.py", Status.WRONG_OUTPUT, "0 tensors, expected 1"),
        # staged inputs and outputs only in memory no other process maps (inputs every rank could
        # read; outputs any rank could write)
        ("shares_staged_pages.py", Status.TAMPERING, "lies in a shared mapping"),
        ("returns_shared_outputs.py", Status.TAMPERING, "lies in a shared mapping"),
        ("shared_scratch.py", Status.CORRECT, ""),
    ],
)
def test_hostile_sample_gets_its_status(shared_harness, name, status, needle):
    h = shared_harness(2, timeout_s=10)  # one deadline for the whole sample (pkb_ray.evaluate.deadlines)
    result = h.evaluate(_sample(name))
    assert result.status == status, result.message
    assert needle in result.message
    assert result.isolation == "sandbox"
    assert rank_processes_left(h.work_dir) == []


def test_a_helper_the_kernel_resumes_is_caught_by_the_signals_freezer(make_harness, monkeypatch):
    # a timer's SIGCONT resumes it, in threads born after the freeze's proof: the SIGSTOP freezer's
    # proof sees them (with PKB_FREEZER=cgroup the helper never runs while frozen:
    # tests/test_freezer_on_cpu.py)
    monkeypatch.setenv("PKB_FREEZER", "signals")
    result = make_harness(2, timeout_s=10).evaluate(_sample("wakes_itself_with_a_timer.py"))
    assert result.status == Status.TAMPERING, result.message
    assert "while its set was stopped" in result.message


def test_a_timer_whose_code_is_rewritten_is_seen_and_gains_nothing(shared_harness):
    # it assigns new code to the report writer (the object stays the one the watch holds): the
    # watch compares code too; and its times would not count anyway (the next test)
    result = shared_harness(2, size=BIG, rounds=20, timeout_s=60).evaluate(_sample("forges_reports.py"))
    assert result.status == Status.TAMPERING, result.message
    assert "pkb_ray.runner.protocol.write_report" in result.message, result.message


def test_forged_report_times_where_no_watch_looks_gain_nothing(shared_harness):
    # its reports say 50x less time than its regions took: the time is the parent's clock
    h = shared_harness(2, size=BIG, rounds=20, timeout_s=60)
    result = h.evaluate(_sample("forges_reports_unseen.py"))
    assert result.status == Status.CORRECT, result.message
    assert min(result.cand_median_us) > 0.3 * max(result.ref_median_us), (result.cand_median_us, result.ref_median_us)
    assert_gains_nothing(h, "forges_reports_unseen.py", result)


def test_work_after_the_runners_clock_is_the_candidates_time(shared_harness):
    # its calls return at once and a profiling hook does the work after the runner's timer stopped:
    # counted by the parent's clock (or read unfinished, and wrong)
    h = shared_harness(2, size=BIG, rounds=20, timeout_s=60)
    result = h.evaluate(_sample("works_in_a_hook.py"))
    assert result.status in (Status.CORRECT, Status.WRONG_OUTPUT), result.message
    assert_gains_nothing(h, "works_in_a_hook.py", result)


def test_helpers_that_resume_everything_gain_nothing(shared_harness):
    # two helpers that SIGCONT every process they can see: the freezer returns only after one pass
    # sees every task stopped; a task that ran after that is an escape (tampering); if they never
    # all stop in time, the step fails; if they were all stopped, they only slowed their own calls
    h = shared_harness(2, size=BIG, rounds=20, timeout_s=60)
    result = h.evaluate(_sample("resumes_itself.py"))
    assert result.status in (Status.CORRECT, Status.TAMPERING, Status.TIMEOUT), result.message
    assert_gains_nothing(h, "resumes_itself.py", result)
    assert rank_processes_left(h.work_dir) == []


@pytest.mark.parametrize("name", ["busy_helper.py", "allocates_heavily.py", "uses_a_thread_pool.py"])
def test_honest_samples_that_load_their_own_machine_are_correct(shared_harness, name):
    # no "times forged" verdict to get wrong: their load is their time, and the helper is stopped
    # with them while the reference runs (no interference, no escape)
    h = shared_harness(2, size=BIG, rounds=20, timeout_s=60)
    result = h.evaluate(_sample(name))
    assert result.status == Status.CORRECT, result.message
    assert rank_processes_left(h.work_dir) == []


@pytest.mark.parametrize("name", ["memo_by_address.py", "memo_by_values.py", "memo_by_hash.py"])
def test_memoising_gains_nothing(shared_harness, name):
    h = shared_harness(2, size=BIG, rounds=20, timeout_s=10)
    result = h.evaluate(_sample(name))
    # every timed call has inputs no call saw before: no hits. A hit on a reused address answers
    # stale data on one rank and skips the collective there: a hang, or a wrong answer. A memo keeps
    # every output alive (4 MiB a call here): the page faults of the fresh inputs between its calls
    # are its time, as the parent's clock counts everything between resuming its set and stopping it.
    assert result.status in (Status.CORRECT, Status.TIMEOUT, Status.WRONG_OUTPUT), result.message
    assert_gains_nothing(h, name, result)


def test_secrets_never_reach_a_rank(shared_harness, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-do-not-leak")
    monkeypatch.setenv("WANDB_API_KEY", "wandb-do-not-leak")
    result = shared_harness(2).evaluate(_sample("reads_secrets.py"))
    assert result.status == Status.CORRECT, result.message  # it found nothing to raise
    assert "do-not-leak" not in result.message


def test_references_and_captures_are_out_of_a_samples_reach(make_harness, problems, monkeypatch):
    # each sample's references and the captures of its outputs lie in a folder of the harness's work
    # folder that no candidate sees; one that rewrites every tensor file it finds changes nothing
    h = make_harness(2)
    monkeypatch.setenv("PKB_TEST_TARGET", str(h.work_dir))
    bad = h.evaluate(_sample("tampers_with_references.py"))
    assert bad.status == Status.WRONG_OUTPUT, bad.message
    assert h.evaluate(_copy(problems, 2)).status == Status.CORRECT


def test_results_and_samples_cannot_be_deleted(make_harness, tmp_path, monkeypatch):
    run = tmp_path / "run"
    (run / "results").mkdir(parents=True)
    keep = [run / "results/part-0.parquet", run / "samples.jsonl"]
    for path in keep:
        path.write_text("precious")
    monkeypatch.setenv("PKB_TEST_TARGET", str(run))
    h = make_harness(2, private=[run])
    assert h.evaluate(_sample("deletes_results.py")).status == Status.CORRECT
    assert all(path.read_text() == "precious" for path in keep)


def test_escaping_children_die_with_the_sample(shared_harness):
    marker = f"pkb-escape-{uuid.uuid4().hex}"
    os.environ["PKB_TEST_MARKER"] = marker
    try:
        h = shared_harness(2)
        result = h.evaluate(_sample("escapes_with_children.py"))
    finally:
        del os.environ["PKB_TEST_MARKER"]
    assert result.status == Status.CORRECT, result.message
    assert rank_processes_left(h.work_dir) == []
    assert _processes_with(marker) == []


def test_fork_bomb_is_stopped_or_dies_with_the_sample(shared_harness, problems, monkeypatch):
    monkeypatch.setenv("PKB_TEST_FORKS", "300")
    h = shared_harness(2)
    bombed = h.evaluate(_sample("fork_bomb.py"))
    if h.probe.caps_processes:  # a cgroup, or a non-root user: the forks fail early
        assert bombed.status == Status.CORRECT, bombed.message
    else:  # root without a cgroup v2: nothing caps processes (the run says so at start)
        assert bombed.status == Status.IMPORT_ERROR and "forked all 300" in bombed.message, bombed.message
    assert rank_processes_left(h.work_dir) == []  # forked children carry their rank's command line
    assert h.evaluate(_copy(problems)).status == Status.CORRECT  # the sandbox took all 300 children with it


def test_disk_fill_stops_at_the_limit_and_the_next_sample_runs(shared_harness, problems, tmp_path):
    free_before = os.statvfs(tmp_path).f_bavail * os.statvfs(tmp_path).f_frsize
    # Its import writes 2 GiB of scratch (memory) before it answers: 2 s alone, 21 s once beside a
    # second test process, so the deadline is the hostile tests' long one.
    h = shared_harness(2, timeout_s=60)
    filled = h.evaluate(_sample("fills_disk.py"))
    assert filled.status == Status.CORRECT, filled.message
    free_after = os.statvfs(tmp_path).f_bavail * os.statvfs(tmp_path).f_frsize
    assert free_before - free_after < 1 << 30  # nothing close to the 8 GiB it tried
    assert h.evaluate(_copy(problems)).status == Status.CORRECT


def test_patched_timer_does_not_fool_the_timer(shared_harness):
    h = shared_harness(2, rounds=20)
    result = h.evaluate(_sample("patches_timer.py"))
    assert result.status == Status.CORRECT, result.message
    # The frozen clock reads zero: on the candidate's side that is a huge speedup, on the
    # reference's a speedup near zero. Both sides read real microseconds instead. (A lower bound
    # on the speedup would add nothing but noise: CI read an honest 0.26 at 20 rounds.)
    assert min(result.cand_median_us) > 1.0 and min(result.ref_median_us) > 1.0
    assert_gains_nothing(h, "patches_timer.py", result)


def test_leftover_thread_does_not_keep_ranks_alive(shared_harness):
    h = shared_harness(2)
    result = h.evaluate(_sample("leaves_thread_behind.py"))
    assert result.status == Status.CORRECT, result.message
    assert rank_processes_left(h.work_dir) == []


def test_hang_is_killed_with_the_children_it_spawned(shared_harness):
    marker = f"pkb-hang-{uuid.uuid4().hex}"
    os.environ["PKB_TEST_MARKER"] = marker
    try:
        h = shared_harness(2, timeout_s=4)
        result = h.evaluate(_sample("spawns_child_and_hangs.py"))
    finally:
        del os.environ["PKB_TEST_MARKER"]
    assert result.status == Status.TIMEOUT
    assert "trial seed=" in result.message  # where each rank was stuck
    assert rank_processes_left(h.work_dir) == []
    assert _processes_with(marker) == []


def test_next_sample_after_a_hang_is_evaluated_normally(make_harness, problems):
    h = make_harness(2, timeout_s=4, prewarm=1)
    assert h.evaluate(_sample("hangs_while_timed.py")).status == Status.TIMEOUT
    ok = h.evaluate(_copy(problems))
    assert ok.status == Status.CORRECT, ok.message
    h.close()
    assert rank_processes_left(h.work_dir, clean=True) == []


def _processes_with(marker: str, within_s: float = 10.0) -> list[int]:
    """Live processes whose command line holds ``marker``, after up to ``within_s`` for them to go."""
    import time

    deadline = time.monotonic() + within_s
    while True:
        found = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    if marker.encode() in (entry / "cmdline").read_bytes() and pid_alive(int(entry.name)):
                        found.append(int(entry.name))
                except OSError:
                    pass
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


def test_a_sample_reads_no_host_file_and_reaches_no_host_port(make_harness, monkeypatch, tmp_path):
    token = uuid.uuid4().hex
    home = tmp_path / "home"  # a user's HOME: shell history, a .env, Ray's token
    canaries = [home / ".bash_history", home / ".env", home / ".ray" / "auth_token",
                Path.home() / f".pkb-canary-{token}", REPO / f".env.pkb-canary-{token}"]
    for path in canaries:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"canary-{token}")
    dashboard = StandIn()
    monkeypatch.setenv("PKB_TEST_SNOOP_FILES", ":".join(map(str, canaries)))
    monkeypatch.setenv("PKB_TEST_SNOOP_HOME", str(home))
    monkeypatch.setenv("OPENAI_API_KEY", f"sk-{token}")
    try:
        result = make_harness(2, timeout_s=60).evaluate(_sample("snoops_on_host.py"))
    finally:
        dashboard.close()
        for path in canaries:
            path.unlink(missing_ok=True)
    assert result.status == Status.CORRECT, result.message  # it found nothing to raise
    assert token not in result.message and dashboard.connections == 0


@pytest.mark.parametrize("name", ["slows_reference_in_cpp.py", "overrides_dispatcher.py", "patches_and_restores.py",
                                  "loads_cpu_when_idle.py"])
def test_reference_slowing_samples_gain_nothing(shared_harness, name):
    # timed in this process, the reference would have run slower beside each (1 ms a call added,
    # or the cores shared with the load); it is timed by the clean set, the sample stopped. Each
    # does the reference's own work, so an honest reading is ~1 (HONEST_RANGE's noise).
    h = shared_harness(2, rounds=30)
    result = h.evaluate(_sample(name))
    assert result.status in (Status.CORRECT, Status.TAMPERING), result.message
    assert_gains_nothing(h, name, result)
    assert rank_processes_left(h.work_dir) == []


def test_no_sample_outlasts_its_deadline_and_the_next_one_runs(shared_harness, problems):
    h = shared_harness(2, timeout_s=8, rounds=10)
    result = h.evaluate(_sample("stalls_every_call.py"))
    assert result.status == Status.TIMEOUT, result.message
    assert "deadline" in result.message, result.message
    # without one deadline: 2 warmup + 2 calibration + 20 timed calls of 1.5 s, each step inside 8 s
    assert result.eval_seconds < 8 + 30, result.phase_seconds
    after = h.evaluate(_copy(problems))
    assert after.status == Status.CORRECT, after.message


def test_a_forked_sample_sees_only_its_own_set_and_leaves_nothing_to_the_next(make_harness):
    # forked from the harness's zygote: its /proc, scratch and job folder are its own, it has no
    # capability and cannot make a user namespace; run twice, the second would find the first's files
    h = make_harness(2, timeout_s=60)
    for index in (0, 1):
        result = h.evaluate(_sample("probes_its_confinement.py", index))
        assert result.status == Status.CORRECT, result.message
    assert h.rank_sets.zygotes.failed is None and h.rank_sets.zygotes._current is not None


def test_kill_of_every_process_it_may_signal_crashes_only_the_sample(make_harness, problems):
    h = make_harness(2)
    assert h.evaluate(_copy(problems)).status == Status.CORRECT
    zygote = h.rank_sets.zygotes._current[1]
    result = h.evaluate(_sample("kills_everything_it_can.py"))
    assert result.status == Status.CRASH, result.message
    assert h.evaluate(_copy(problems, 2)).status == Status.CORRECT
    assert h.rank_sets.zygotes._current[1] is zygote and zygote.alive()  # the same template forked the next one
    assert rank_processes_left(h.work_dir) == []


def test_floods_of_processes_back_to_back_leave_the_gang_whole(shared_harness, problems, monkeypatch):
    """Samples that each start hundreds of processes, back to back: each is judged, none leaves a
    process or a descriptor behind, and the sample after them is judged as before."""
    monkeypatch.setenv("PKB_TEST_PROCESSES", "400")
    h = shared_harness(2, timeout_s=60)  # 800 processes start in import: slow beside another test worker
    h.evaluate(_copy(problems, index=7))  # the harness's own descriptors (its clean set, ...) opened
    _reaped(h)
    before = len(os.listdir("/proc/self/fd"))
    for index in range(3):
        flooded = h.evaluate(_sample("starts_many_processes.py", index))
        assert flooded.status in (Status.CORRECT, Status.IMPORT_ERROR), flooded.message  # a cap may refuse forks
        assert "evaluator error" not in flooded.message
        _reaped(h)  # its set is killed at once and reaped in the background: 800 deaths take a while
        assert rank_processes_left(h.work_dir) == []
    assert h.evaluate(_copy(problems, index=8)).status == Status.CORRECT
    _reaped(h)
    assert len(os.listdir("/proc/self/fd")) <= before + 8, {fd: _target(fd) for fd in os.listdir("/proc/self/fd")}


def _reaped(h) -> None:
    """Until the sets the harness retired are reaped (in the background: their descriptors close then)."""
    for thread in list(h.pool.reapers):
        thread.join(60)


def _target(fd: str) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return "?"


def test_a_sample_that_uses_torch_compile_is_judged_within_its_budget(shared_harness):
    """Compiling with inductor takes longer than a CPU sample's whole budget: the sample gets
    eval.torch_compile_timeout_s more, and is correct."""
    h = shared_harness(2, timeout_s=10)  # the hostile tests' harness: ~20 s of compiling is twice this
    result = h.evaluate(_sample("uses_torch_compile.py"))
    assert result.status == Status.CORRECT, result.message
    assert result.phase_seconds["trials"] > 10  # beyond eval.timeout_s: the budget that made it judgeable
