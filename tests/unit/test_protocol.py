"""The report pipe between a rank and its parent: whole lines only, the ready report re-readable,
anything that is not a report an ``unreadable_report`` (which the verdict calls tampering)."""

import json
import os

from pkb_ray.evaluate.verdict import StepView, step_failure
from pkb_ray.runner.protocol import ReportReader, Step
from pkb_ray.spec.names import Status
from pkb_ray.spec.wire import parse_report, Report


def _pipe():
    r, w = os.pipe()
    return ReportReader(r), w


def test_reports_arrive_whole_and_by_tag_even_when_split_across_writes():
    reader, w = _pipe()
    line = json.dumps({"tag": "region.3.ab", "report": {"status": "ok", "us": 1.5}}) + "\n"
    os.write(w, json.dumps({"phase": "warmup (cand)"}).encode() + b"\n" + line[:10].encode())
    assert reader.take("region.3.ab") is None and reader.phase == "warmup (cand)"
    os.write(w, line[10:].encode())
    assert reader.take("region.3.ab") == {"status": "ok", "us": 1.5}
    assert reader.take("region.3.ab") is None  # read once
    os.close(w)
    reader.poll()
    assert reader.eof
    reader.close()
    reader.close()  # closing twice never closes a descriptor reused since


def test_the_ready_report_can_be_waited_for_again():
    reader, w = _pipe()
    os.write(w, (json.dumps({"tag": Step.READY, "report": {"status": "ok"}}) + "\n").encode())
    assert reader.take(Step.READY) == reader.take(Step.READY) == {"status": "ok"}
    os.close(w)
    reader.close()


def test_a_line_that_is_not_a_report_is_tampering():
    reader, w = _pipe()
    os.write(w, b'{"tag": "keep.1.x", "report": [1]}\n')
    found = reader.take("region.9.cd")
    assert found["status"] == "unreadable_report"
    verdict = step_failure(StepView({0: parse_report(Report, found)}))
    assert verdict.status is Status.TAMPERING and "not a report" in verdict.message
    os.close(w)
    reader.close()
