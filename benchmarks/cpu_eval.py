"""Per-sample evaluation time and the speedup spread of reference copies, on CPU (gloo).

    .venv/bin/python -m benchmarks cpu_eval --world-size 2 --reps 3 --out docs/benchmarks/data/bench_cpu_eval_w2.json

Evaluates every problem's reference copy (from samples/replay) ``reps`` times through one
Harness, with and without prewarmed rank processes, and prints: seconds per sample (handed to
the harness until its result), and min/median/max/stdev of the copies' speedups.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from benchmarks import common
from pkb_ray.evaluate.harness import Harness
from pkb_ray.generate.samples import read_samples
from pkb_ray.problem import load_problems
from pkb_ray.spec.config import EvalConfig, HardwareConfig
from pkb_ray.spec.schema import Sample

REPO = common.REPO


def measure(world_size: int, reps: int, prewarm: bool, rounds: int) -> dict:
    problems = load_problems()
    rows = [r for r in read_samples(REPO / "samples/replay") if r["metadata"].get("label") == "reference_copy"]
    with tempfile.TemporaryDirectory() as tmp:
        h = Harness(["cpu"] * world_size, EvalConfig(prewarm=prewarm, rounds=rounds, warmup=10),
                    HardwareConfig(world_sizes=[world_size], gpus_per_node=world_size), problems,
                    work_dir=Path(tmp) / "work", cache_dir=Path(tmp) / "cache")
        for row in rows:  # fill the reference cache first: it is paid once per problem, not per sample
            h.evaluate(Sample.model_validate(row))
        seconds, speedups = [], []
        for _ in range(reps):
            for row in rows:
                t0 = time.monotonic()
                r = h.evaluate(Sample.model_validate(row))
                seconds.append(time.monotonic() - t0)
                speedups.append(r.speedup)
        h.close()
    return {"world_size": world_size, "prewarm": prewarm, "rounds": rounds, "samples": len(seconds),
            "seconds_median": statistics.median(seconds), "seconds_mean": statistics.mean(seconds),
            "speedup_min": min(speedups), "speedup_median": statistics.median(speedups),
            "speedup_max": max(speedups), "speedup_stdev": statistics.pstdev(speedups)}


def main(argv: list[str]) -> int:
    run = common.Run.of(__name__, argv)
    ap = run.parser(__doc__)
    ap.add_argument("--world-size", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=30)
    args = ap.parse_args(argv)
    out = run.out(args.out)
    rows = [measure(args.world_size, args.reps, prewarm, args.rounds) for prewarm in (False, True)]
    for r in rows:
        print(f"W={r['world_size']} prewarm={r['prewarm']!s:5} n={r['samples']} "
              f"s/sample median={r['seconds_median']:.2f} mean={r['seconds_mean']:.2f}  "
              f"copy speedup min={r['speedup_min']:.3f} median={r['speedup_median']:.3f} "
              f"max={r['speedup_max']:.3f} stdev={r['speedup_stdev']:.3f}")
    print("wrote", run.write(out, rows))
    return 0
