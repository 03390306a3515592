"""The typed wire: commands that round-trip through the rank's decoder, and reports that either
parse as their step's record or become an ``unreadable_report`` (tampering, in one place)."""

import dataclasses
import json

import pytest

from pkb_ray.evaluate.verdict import StepView, step_failure
from pkb_ray.spec.names import Side, Status
from pkb_ray.spec.wire import (Case, CheckTimed, Exit, Failure, Pick, Watch, RegionReport, Report, TimeRegion, Tol,
                          TrialsReport, decode_command, encode_command, parse_report)

CASE = Case(problem_path="/p/all_reduce.py", dtype="float32", size={"n": 4096})


def test_commands_round_trip_and_are_frozen():
    cmds = [TimeRegion(case=CASE, side=Side.CAND, k=8, nonce=2**55, what="eager round 0", base_seeds=[1, 2],
                       hold=True, graph=False, tag="region.4.abcdef"),
            Watch(case=CASE),
            CheckTimed(case=CASE, picks=[Pick(id=0, side=Side.CAND, region=2, index=3, mode="graph", nonce=9)],
                       base_seeds=[5], actual_dir="/j/kept", tolerance=Tol(atol=1e-5, rtol=1e-3)),
            Exit()]
    for cmd in cmds:
        back = decode_command(encode_command(cmd))
        assert type(back) is type(cmd) and back == cmd
    assert decode_command(encode_command(cmds[0])).side is Side.CAND
    assert cmds[1].files == [] and cmds[2].files == [0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        cmds[0].k = 9  # frozen
    with pytest.raises(ValueError, match="no step"):  # a step no rank runs
        decode_command(json.dumps({"step": "format_disk"}))
    with pytest.raises(ValueError, match="no field"):
        decode_command(json.dumps({"step": "exit", "shell": "rm -rf /"}))


def test_a_report_parses_as_its_steps_record_or_as_a_failure():
    good = {"status": "ok", "us": 12.5, "calls": [[[[140000, 16, 0]], [[150000, 16, 0]]]], "devices": ["cpu"]}
    assert parse_report(RegionReport, good) == RegionReport(**good)
    failed = parse_report(RegionReport, {"status": "runtime_error", "message": "Traceback ..."})
    assert isinstance(failed, Failure) and failed.status == "runtime_error"
    assert parse_report(Report, {"status": "ok"}) == Report()


@pytest.mark.parametrize("raw", [
    {"status": "ok", "us": float("nan"), "calls": [], "devices": []},  # no usable time
    {"status": "ok", "us": -1.0, "calls": [], "devices": []},
    {"status": "ok", "us": 1.0, "calls": [], "devices": [], "verdict": "correct"},  # extra
    {"status": "ok", "us": 1.0, "calls": [[["here"]]], "devices": []},  # a layout that is not numbers
    {"status": "ok", "us": 1.0},  # missing fields
    {"status": "correct"},  # a status the runner never writes
    ["not", "a", "dict"],
])
def test_anything_else_is_unreadable_and_the_verdict_calls_it_tampering(raw):
    found = parse_report(RegionReport, raw)
    assert isinstance(found, Failure) and found.status == "unreadable_report"
    verdict = step_failure(StepView({0: found}))
    assert verdict.status is Status.TAMPERING and "never writes" in verdict.message


def test_a_candidates_watch_report_keeps_what_it_found():
    raw = {"status": "ok", "devices": {"0": ["cuda:0"]}, "calls": {"0": [[], []]}, "rank_builds": 0,
           "tampered": ["torch.Tensor.clone"]}
    assert parse_report(TrialsReport, raw).tampered == ["torch.Tensor.clone"]
