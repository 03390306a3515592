"""``pkb-ray compare`` as a process, on results folders written with pkb_ray.results.parquet.write_results."""

import random
import subprocess
import sys

from conftest import REPO
from pkb_ray.results.parquet import write_results
from pkb_ray.spec.names import Status
from pkb_ray.spec.schema import Result, Sample


def results(seed: int, p_correct: float) -> list[Result]:
    rng, out = random.Random(seed), []
    for pid in ("all_reduce", "all_gather", "scatter"):
        for i in range(10):
            ok = rng.random() < p_correct
            s = Sample(problem_id=pid, model="replay", sample_index=i, source=f"# {pid} {i}\n")
            out.append(Result.for_sample(s, Status.CORRECT if ok else Status.WRONG_OUTPUT, "", world_size=2,
                                         hardware="cpu_2", category="collective",
                                         speedup=rng.lognormvariate(0, 0.2) if ok else None))
    return out


def compare(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pkb_ray.cli", "compare", *map(str, args)], cwd=REPO,
                          capture_output=True, text=True, timeout=300)


def test_compare_exits_1_on_a_regression_0_without_and_2_on_bad_input(tmp_path):
    write_results(results(1, 0.8), tmp_path / "a" / "results")  # a run folder
    write_results(results(2, 0.8), tmp_path / "b")  # a results folder
    write_results(results(3, 0.1), tmp_path / "worse")
    same = compare(tmp_path / "a", tmp_path / "b")
    assert same.returncode == 0, same.stdout + same.stderr
    assert "no regression" in same.stdout and all(len(line) <= 120 for line in same.stdout.splitlines())
    worse = compare(tmp_path / "a", tmp_path / "worse", "--out", tmp_path / "page", "--alpha", "0.01")
    assert worse.returncode == 1, worse.stdout + worse.stderr
    every = next(line for line in worse.stdout.splitlines() if " ALL " in line)
    assert "pass@1" in every.split("]")[-1]  # flagged in the regressed column
    md = (tmp_path / "page" / "compare.md").read_text()
    assert "significant regression(s)" in md and "| replay | ALL |" in md
    assert "<table>" in (tmp_path / "page" / "compare.html").read_text()
    missing = compare(tmp_path / "a", tmp_path / "nowhere")
    assert missing.returncode == 2 and missing.stderr == f"error: run B ({tmp_path / 'nowhere'}): no such folder\n"


def test_compare_and_report_take_file_uris_and_name_one_they_cannot_read(tmp_path):
    write_results(results(1, 0.8), tmp_path / "a" / "results")
    write_results(results(3, 0.1), tmp_path / "worse" / "results")
    same = compare(f"file://{tmp_path / 'a'}", f"file://{tmp_path / 'a' / 'results'}")  # a run and its results
    assert same.returncode == 0 and "test: replay paired (both runs evaluated the same sources)" in same.stdout
    worse = compare(f"file://{tmp_path / 'a'}", f"file://{tmp_path / 'worse'}")
    assert worse.returncode == 1 and "significant regression(s)" in worse.stdout, worse.stdout + worse.stderr
    assert "pass@1" in next(line for line in worse.stdout.splitlines() if " ALL " in line).split("]")[-1]
    for a, b, side, said in ((f"file://{tmp_path / 'gone'}", tmp_path / "a", "A", "no such folder"),
                             (tmp_path / "a", "file://relative/path", "B", "Unsupported hostname"),
                             (tmp_path / "a", "ftp://KEY:SECRET@host/x", "B", "Unrecognized filesystem type")):
        bad = compare(a, b)
        assert bad.returncode == 2 and bad.stdout == "", bad.stdout
        shown = str(a if side == "A" else b).replace("KEY:SECRET", "***")
        assert bad.stderr.startswith(f"error: run {side} ({shown}): ") and said in bad.stderr, bad.stderr
        assert len(bad.stderr.splitlines()) == 1 and "SECRET" not in bad.stderr
    report = subprocess.run([sys.executable, "-m", "pkb_ray.cli", "report", f"file://{tmp_path / 'a'}",
                             f"file://{tmp_path / 'gone'}", "--out", str(tmp_path / "page")], cwd=REPO,
                            capture_output=True, text=True, timeout=300)
    assert report.returncode == 2 and report.stderr == f"error: file://{tmp_path / 'gone'}: no such folder\n"
    report = subprocess.run([sys.executable, "-m", "pkb_ray.cli", "report", f"file://{tmp_path / 'a'}",
                             "--out", str(tmp_path / "page")], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert report.returncode == 0 and (tmp_path / "page" / "report.html").is_file(), report.stderr
