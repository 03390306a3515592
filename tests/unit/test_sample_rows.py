"""The synthetic sample set (scripts/make_samples.py): valid rows, duplicates at the copy rate (each
variant's status: tests/test_make_samples.py)."""

import importlib.util

from conftest import REPO
from pkb_ray.pipeline.wiring import prepare
from pkb_ray.spec.schema import Sample

spec = importlib.util.spec_from_file_location("make_samples", REPO / "scripts" / "make_samples.py")
make_samples = importlib.util.module_from_spec(spec)
spec.loader.exec_module(make_samples)


def test_rows_are_valid_samples_with_realistic_duplicates(problems):
    rows = make_samples.generate(60, ["a", "b"], seed=1, problem_ids=["all_reduce", "all_gather", "scatter"])
    assert len(rows) == 360
    assert all(isinstance(prepare(r, problems, 2), Sample) for r in rows)  # validates and compiles
    duplicates = 1 - len({r["source"] for r in rows}) / len(rows)
    copies = sum(r["metadata"]["variant"] == "copy" for r in rows) / len(rows)
    assert 0.05 < duplicates <= copies + 0.01  # only verbatim copies repeat
    variants = {r["metadata"]["variant"] for r in rows}
    assert {"copy", "twice", "off_by_one", "stale", "kernel"} <= variants and "averaged" not in {
        r["metadata"]["variant"] for r in rows if r["problem_id"] == "scatter"}  # not a reduction
    assert make_samples.generate(60, ["a", "b"], seed=1, problem_ids=["all_reduce"]) == [
        r for r in rows if r["problem_id"] == "all_reduce"]  # deterministic per (seed, model, problem)
