"""The synthetic sample set: each variant gets the status it promises, through a real harness (its
rows: tests/unit/test_sample_rows.py)."""

import importlib.util
import random

import pytest

from conftest import REPO
from pkb_ray.spec.schema import Sample

spec = importlib.util.spec_from_file_location("make_samples", REPO / "scripts" / "make_samples.py")
make_samples = importlib.util.module_from_spec(spec)
spec.loader.exec_module(make_samples)


@pytest.mark.parametrize("variant", ["twice", "off_by_one", "averaged", "stale", "crash", "hang"])
def test_each_variant_gets_the_status_it_promises(shared_harness, problems, variant):
    source, expect, _ = make_samples.make(problems["all_reduce"], [], variant, random.Random(0), "t/0")
    # The hang waits out a short deadline; the others get one that two test processes on 2 cores
    # do not reach (an honest variant once ran past 5 s there).
    result = shared_harness(2, timeout_s=5 if variant == "hang" else 30).evaluate(
        Sample(problem_id="all_reduce", model="t", sample_index=0, source=source))
    assert result.status.value in expect.split("|"), result.message
