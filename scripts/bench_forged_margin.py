"""How far a forger of its report times is above what the forged-time rule allows, on CPU (gloo).

    .venv/bin/python scripts/bench_forged_margin.py --reps 3 --rounds 100

Evaluates tests/samples/forges_reports.py (an honest all-reduce whose region reports say 50x less
than the region took) ``reps`` times through one harness with the settings of
tests/test_hostile_on_cpu.py's forged-times test, and prints each verdict: the hidden time a region
and the allowance the rule gave it (pkb_ray.verdict.forged_time). A margin near 1x means the test
would flake on a loaded machine.
"""

from __future__ import annotations

import argparse
import re
import tempfile
from pathlib import Path

from pkb_ray.config import EvalConfig, HardwareConfig
from pkb_ray.harness import Harness
from pkb_ray.problem import load_problems
from pkb_ray.schema import Sample

REPO = Path(__file__).resolve().parent.parent
FORGER = REPO / "tests" / "samples" / "forges_reports.py"
# the tests' short protocol (tests/conftest.py cpu_harness) at the forged-times test's size
SETTINGS = dict(trials=2, timing_sets=2, warmup=2, max_round_calls=1, prewarm=0, size={"numel": 1 << 20})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--timeout-s", type=float, default=60.0)
    args = ap.parse_args()
    problems = load_problems()
    tmp = Path(tempfile.mkdtemp(prefix="pkb-forged-"))
    h = Harness(["cpu", "cpu"], EvalConfig(**SETTINGS, rounds=args.rounds, timeout_s=args.timeout_s),
                HardwareConfig(world_sizes=[2], gpus_per_node=2), problems, work_dir=tmp / "work",
                cache_dir=tmp / "cache")
    try:
        for i in range(args.reps):
            r = h.evaluate(Sample(problem_id="all_reduce", model="forger", sample_index=i, source=FORGER.read_text()))
            found = re.search(r"took (\d+) us more .* \(allowed (\d+) us\)", r.message)
            margin = f"{int(found[1]) / int(found[2]):.2f}x the allowance" if found else "-"
            print(f"{r.status.value:12s} {margin:22s} {r.message[:200]}", flush=True)
    finally:
        h.close()


if __name__ == "__main__":
    main()
