"""Runs known only by their summary.json (a CI artifact): ``pkb-ray report`` makes a leaderboard
of them and ``pkb-ray compare`` compares them, flagging a real drop and not the same run twice."""

import json

from benchmarks import report_size as bench
from pkb_ray.results.parquet import write_results
from pkb_ray.spec.names import Status
from pkb_ray.summary import RunSummary, render_json
from pkb_ray.summary.cli import compare_main, main, read_runs


def _run(folder, results, keep_rows: bool):
    """A run folder with its summary.json, and its result rows only where ``keep_rows``."""
    write_results(results, folder / "results")
    render_json.write(RunSummary.of(read_runs([folder])), folder, "t")
    if not keep_rows:
        import shutil

        shutil.rmtree(folder / "results")
    return folder


def _worse(results):
    """Most correct samples turned wrong: a drop no interval hides."""
    return [r.model_copy(update={"status": Status.WRONG_OUTPUT, "speedup": None})
            if r.status == Status.CORRECT and i % 5 else r for i, r in enumerate(results)]


def test_compare_of_summaries_flags_a_real_drop_and_not_the_same_run(tmp_path, capsys):
    results = bench.synthetic_results(200)
    a = _run(tmp_path / "a", results, keep_rows=False)
    same = _run(tmp_path / "same", results, keep_rows=False)
    worse = _run(tmp_path / "worse", _worse(results), keep_rows=False)
    assert compare_main([str(a), str(same / "summary.json")]) == 0
    said = capsys.readouterr().out
    assert "from summary.json" in said and "REGRESSION" not in said and "no regression" in said
    assert compare_main([str(a), str(worse)]) == 1
    said = capsys.readouterr().out
    assert "model-a" in said and any("pass@1" in line and "REGRESSION" in line for line in said.splitlines())
    # one side with rows: its summary comes from them
    rows = _run(tmp_path / "rows", results, keep_rows=True)
    assert compare_main([str(rows), str(worse / "summary.json")]) == 1


def test_report_over_summaries_is_a_leaderboard_and_mixing_rows_is_refused(tmp_path, capsys):
    results = bench.synthetic_results(200)
    a = _run(tmp_path / "a", results, keep_rows=False)
    b = _run(tmp_path / "b", _worse(results), keep_rows=False)
    assert main([str(a / "summary.json"), str(b), "--out", str(tmp_path / "rep")]) == 0
    md = (tmp_path / "rep" / "report.md").read_text()
    board = [line for line in md.splitlines() if line.startswith("| ") and "model-a" in line]
    assert len(board) == 2 and all("[" in line for line in board)  # each run's row, figures with intervals
    assert "8 rows from 2 summary.json" in capsys.readouterr().out
    rows = _run(tmp_path / "rows", results, keep_rows=True)
    assert main([str(a), str(rows), "--out", str(tmp_path / "rep2")]) == 2
    assert "only a summary.json" in capsys.readouterr().err


def test_a_summary_json_that_is_not_one_is_named(tmp_path, capsys):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "summary.json").write_text(json.dumps({"title": "x"}))
    assert compare_main([str(bad), str(bad / "summary.json")]) == 2
    err = capsys.readouterr().err
    assert "run A" in err and "summary.json: no 'overall' table" in err
