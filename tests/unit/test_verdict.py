"""The verdict rules on hand-made step reports (the wire's records): no processes, no Ray."""

from pkb_ray.spec.names import Side, Status
from pkb_ray.evaluate.verdict import (RULES, Evidence, Region, StepView, judge, step_failure, tampering, timed_verdict,
                             trial_verdict)
from pkb_ray.spec.wire import (ChecksReport, Failure, Finding, WatchReport, Pick, RegionReport, Report, TrialsReport,
                          parse_report)

DEV = {0: "cuda:0", 1: "cuda:1"}
OK = Report()


def _trials(devices=None, tampered=()):
    return TrialsReport(devices=devices or {}, calls={}, rank_builds=0, tampered=list(tampered))


def _checks(*findings):
    return ChecksReport(checks=[Finding(**f) for f in findings])


def _region(us):
    return RegionReport(us=us, calls=[], devices=[])


def _regions(ref_us, cand_us, ref_bracket, cand_bracket, n=10, k=1):
    regions = []
    for _ in range(n):
        regions.append(Region(Side.REF, k, ref_bracket, {0: _region(ref_us), 1: _region(ref_us)}))
        regions.append(Region(Side.CAND, k, cand_bracket, {0: _region(cand_us), 1: _region(cand_us)}))
    return regions


def test_a_silent_death_outranks_a_reported_error_and_a_hang():
    assert step_failure(StepView({0: Failure(status="runtime_error", message="x")}, dead={1: -11}, missing=[])) \
        .status is Status.CRASH
    found = step_failure(StepView({0: OK, 1: Failure(status="runtime_error", message="boom")}))
    assert (found.status, found.rank, found.message) == (Status.RUNTIME_ERROR, 1, "boom")
    assert step_failure(StepView({0: OK}, missing=[1])).status is Status.TIMEOUT
    assert step_failure(StepView({0: OK, 1: OK})) is None


def test_a_report_no_runner_writes_is_tampering():
    for raw in ({"status": "correct", "message": "trust me"}, {"status": "ok", "us": "fast"}):
        found = step_failure(StepView({0: parse_report(RegionReport, raw)}))
        assert found.status is Status.TAMPERING and "never writes" in found.message


def test_replaced_evaluator_functions_are_tampering():
    assert tampering({0: WatchReport(), 1: OK}) is None
    found = tampering({0: WatchReport(), 1: WatchReport(tampered=["pkb_ray.measure.timing.timed_region"])})
    assert found.status is Status.TAMPERING and found.rank == 1 and "timed_region" in found.message


def test_trials_wrong_device_and_aliasing_and_clean_mismatch():
    clean = {0: _checks({"id": 0, "ok": True}), 1: _checks({"id": 0, "ok": True})}
    ref = {"aliases": {"0": []}}
    good = {0: _trials({"0": ["cuda:0"]}), 1: _trials({"0": ["cuda:1"]})}
    assert trial_verdict(good, clean, ref, DEV, {}) is None
    on_cpu = {0: _trials({"0": ["cuda:0"]}), 1: _trials({"0": ["cpu"]})}
    found = trial_verdict(on_cpu, clean, ref, DEV, {})
    assert found.status is Status.WRONG_OUTPUT and "on cpu" in found.message and found.rank == 1
    shared = {0: {"0": ["output 0 shares memory with an input"]}}  # the parent's finding, from the layouts
    assert trial_verdict(good, clean, ref, DEV, shared).status is Status.WRONG_OUTPUT
    in_place_ref = {"aliases": {"0": ["output 0 shares memory with an input"]}}
    assert trial_verdict(good, clean, in_place_ref, DEV, shared) is None  # the reference does the same
    bad = {0: _checks({"id": 0, "ok": False, "where": "output", "message": "3 of 8 elements differ", "kind": "value"})}
    assert "3 of 8" in trial_verdict(good, bad, ref, DEV, {}).message
    forged = {0: _checks({"id": 0, "ok": False, "where": "output", "message": "not mapped", "kind": "unreadable"})}
    assert trial_verdict(good, forged, ref, DEV, {}).status is Status.TAMPERING


def test_a_regions_time_is_the_parents_bracket_whatever_the_rank_reports():
    # a candidate that reports 1/50 of its time: the region's time per call is still the bracket's
    honest, forged = Region(Side.CAND, 4, 8000.0, {0: _region(1900.0)}), Region(Side.CAND, 4, 8000.0, {0: _region(38.0)})
    assert honest.us_per_call == forged.us_per_call == 2000.0
    # and no rule reads the reported figure: nothing to forge, nothing an honest loaded sample trips
    regions = _regions(10.0, 0.001, 100.0, 100.0, n=3)
    assert timed_verdict(regions, {0: _checks({"id": 0, "ok": True})}, {0: _pick()}, DEV, {}) is None


def test_a_candidate_that_ran_while_stopped_escaped_the_freezer():
    evidence = Evidence(device=DEV, trials=StepView({0: _trials(), 1: _trials()}),
                        checks={0: _checks({"id": 0, "ok": True})}, reference={"aliases": {}},
                        escaped="process 12 (task 12) ran 900 us while its set was stopped", timing_what="eager round 3")
    found = judge(evidence)
    assert found.status is Status.TAMPERING and "escaped the freezer" in found.message and "900 us" in found.message


def _pick(id_=0, region=1):
    return Pick(id=id_, side=Side.CAND, region=region, index=0, mode="eager", nonce=7)


def test_timed_checks_of_the_candidates_picks():
    regions = _regions(10.0, 10.0, 100.0, 100.0, n=2)
    picks = {0: _pick()}  # the clean set's reference is never picked
    ok = {0: _checks({"id": 0, "ok": True})}
    assert timed_verdict(regions, ok, picks, DEV, {}) is None
    cand_bad = {0: _checks({"id": 0, "ok": False, "kind": "value", "where": "output", "message": "differs"})}
    assert "timed call gave a wrong answer" in timed_verdict(regions, cand_bad, picks, DEV, {}).message
    unreadable = {0: _checks({"id": 0, "ok": False, "kind": "unreadable", "where": "output", "message": "gone"})}
    assert timed_verdict(regions, unreadable, picks, DEV, {}).status is Status.TAMPERING


def test_an_output_returned_twice_in_a_region_is_wrong():
    regions = _regions(10.0, 10.0, 100.0, 100.0, n=1, k=2)
    regions[1].aliases[0] = ["output 0 shares memory with an earlier call's output"]  # the parent's finding
    found = timed_verdict(regions, {}, {}, DEV, {})
    assert found.status is Status.WRONG_OUTPUT and "same buffer" in found.message


def test_timed_calls_follow_the_trials_rules_on_inputs():
    # in place into an input while timed: wrong, unless the reference's output shares it too
    regions = _regions(10.0, 10.0, 100.0, 100.0, n=1)
    regions[1].aliases[1] = ["output 0 shares memory with an input"]
    found = timed_verdict(regions, {}, {}, DEV, {"aliases": {"0": []}})
    assert found.status is Status.WRONG_OUTPUT and "reference's does not" in found.message
    assert timed_verdict(regions, {}, {}, DEV, {"aliases": {"0": ["output 0 shares memory with an input"]}}) is None


def test_judge_applies_the_rules_in_order_to_the_evidence_so_far():
    clean = {0: _checks({"id": 0, "ok": True})}
    evidence = Evidence(device={0: "cuda:0"}, trials=StepView({0: _trials({"0": ["cuda:0"]})}))
    assert judge(evidence) is None  # trials ran; nothing else yet
    evidence.checks, evidence.reference = clean, {"aliases": {}}
    assert judge(evidence) is None
    evidence.watched = {0: WatchReport(tampered=["torch.distributed.all_reduce"])}
    evidence.regions, evidence.picks = _regions(2000.0, 40.0, 2300.0, 2300.0, n=10), {0: _pick()}
    evidence.timed_checks = {0: _checks({"id": 0, "ok": False, "kind": "value", "where": "output", "message": "x"})}
    assert "replaced torch.distributed.all_reduce" in judge(evidence).message  # rule 4 before rule 5
    evidence.watched = {}
    assert "timed call gave a wrong answer" in judge(evidence).message
    # a failed trials step outranks everything that came after it
    evidence.trials = StepView({0: Failure(status="runtime_error", message="boom")}, account="rank 0: boom")
    found = judge(evidence)
    assert (found.status, found.message) == (Status.RUNTIME_ERROR, "rank 0: boom")
    # a failed timing step carries its account and where it happened
    evidence.trials = StepView({0: _trials({"0": ["cuda:0"]})})
    evidence.timing_failed, evidence.timing_what = StepView({}, missing=[0], account="no answer"), "eager round 3"
    found = judge(evidence)
    assert found.status is Status.TIMEOUT and found.message == "during timing (eager round 3): no answer"
    assert len(RULES) == 6 and all(rule.__doc__ and rule.__doc__.startswith(f"Rule {n}:") for n, rule in enumerate(RULES, 1))


def test_every_status_an_evaluation_gives_is_decided_in_the_verdict_table():
    """The harness, its steps and the interference screen gather evidence; only verdict.py names a
    status other than correct (issue 53: one table of rules, each with its docstring)."""
    import re

    from conftest import REPO

    named = {path.name: sorted(set(re.findall(r"Status\.([A-Z_]+)", path.read_text())) - {"CORRECT"})
             for path in (REPO / "pkb_ray" / "evaluate").glob("*.py") if path.name != "verdict.py"}
    assert {name: found for name, found in named.items() if found} == {}
