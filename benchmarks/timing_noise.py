"""The spread of one reference copy's speedup, evaluation after evaluation, on CPU (gloo): the noise
model of tests/test_timing_on_cpu.py (docs/benchmarks/timing.md).

    .venv/bin/python -m benchmarks timing_noise --reps 24

One Harness, W=2, all_reduce at size small, 200 timed rounds (the test's settings); prints each
speedup, then mean, standard deviation, min and max.
"""

from __future__ import annotations

import json
import statistics
import tempfile
from pathlib import Path

from benchmarks import common
from pkb_ray.evaluate.harness import Harness
from pkb_ray.problem import load_problems
from pkb_ray.spec.config import EvalConfig, HardwareConfig
from pkb_ray.spec.schema import Sample


def main(argv: list[str]) -> int:
    run = common.Run.of(__name__, argv)
    ap = run.parser(__doc__)
    ap.add_argument("--reps", type=int, default=24)
    ap.add_argument("--rounds", type=int, default=200)
    args = ap.parse_args(argv)
    out = run.out(args.out)
    problems = load_problems()
    tmp = Path(tempfile.mkdtemp(prefix="pkb-noise-"))
    cfg = EvalConfig(trials=2, timing_sets=3, warmup=10, rounds=args.rounds, max_round_calls=1, timeout_s=20, prewarm=0)
    h = Harness(["cpu"] * 2, cfg, HardwareConfig(world_sizes=[2], gpus_per_node=2), problems,
                work_dir=tmp / "work", cache_dir=tmp / "cache")
    sample = Sample(problem_id="all_reduce", model="m", sample_index=0, source=problems["all_reduce"].source())
    speedups = []
    try:
        for i in range(args.reps):
            r = h.evaluate(sample)
            speedups.append(r.speedup)
            print(i, r.status.value, round(r.speedup or 0.0, 3), flush=True)
    finally:
        h.close()
    ok = [s for s in speedups if s]
    figures = {"rounds": args.rounds, "speedups": ok, "not_timed": len(speedups) - len(ok),
               **({"mean": statistics.mean(ok), "stdev": statistics.stdev(ok), "min": min(ok), "max": max(ok)}
                  if len(ok) > 1 else {})}
    print(json.dumps(figures))
    print("wrote", run.write(out, figures))
    return 0
