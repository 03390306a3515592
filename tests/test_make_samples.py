"""The synthetic sample set: each variant gets the status it promises, through a real harness (its
rows: tests/unit/test_sample_rows.py)."""

import importlib.util
import random

import pytest

from conftest import REPO
from pkb_ray.schema import Sample

spec = importlib.util.spec_from_file_location("make_samples", REPO / "scripts" / "make_samples.py")
make_samples = importlib.util.module_from_spec(spec)
spec.loader.exec_module(make_samples)


@pytest.mark.parametrize("variant", ["twice", "off_by_one", "averaged", "stale", "crash", "hang"])
def test_each_variant_gets_the_status_it_promises(make_harness, problems, variant):
    source, expect, _ = make_samples.make(problems["all_reduce"], [], variant, random.Random(0), "t/0")
    result = make_harness(2, timeout_s=5).evaluate(
        Sample(problem_id="all_reduce", model="t", sample_index=0, source=source))
    assert result.status.value in expect.split("|"), result.message
