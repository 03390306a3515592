"""One evaluation's speedup spread on CPU at the tests' short protocol (the noise the hostile tests' bounds sit above).

    .venv/bin/python -m benchmarks short_protocol --reps 3 [--no-zygote] [--rounds 30] [--out F.json]

Evaluates, ``reps`` times in turn, a copy of all_reduce's reference and the hostile samples that
do the reference's own work while trying to slow its timing (tests/samples), through one sandboxed
Harness of 2 gloo ranks with the settings of ``tests/conftest.cpu_harness`` (2 trials, 2 timing sets,
2 warm-up calls, ``--rounds`` rounds). Prints each reading (status, speedup, reference and
candidate microseconds) and the min / median / max of the speedups judged correct.
Figures: docs/benchmarks/timing.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from benchmarks import common
from pkb_ray.evaluate.harness import Harness
from pkb_ray.problem import load_problems
from pkb_ray.spec.config import EvalConfig, HardwareConfig
from pkb_ray.spec.names import Status
from pkb_ray.spec.schema import Sample

REPO = common.REPO
SAMPLES = {"copy": REPO / "samples/replay/all_reduce/00_reference_copy.py",
           **{p: REPO / "tests/samples" / p for p in ("slows_reference_in_cpp.py", "overrides_dispatcher.py",
                                                     "patches_and_restores.py", "loads_cpu_when_idle.py")}}


def main(argv: list[str]) -> int:
    run = common.Run.of(__name__, argv)
    ap = run.parser(__doc__)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--zygote", action=argparse.BooleanOptionalAction, default=True)
    args = ap.parse_args(argv)
    out = run.out(args.out)
    cfg = EvalConfig(trials=2, timing_sets=2, warmup=2, rounds=args.rounds, max_round_calls=1, timeout_s=20,
                     prewarm=0, zygote=args.zygote)
    work = Path(tempfile.mkdtemp(prefix="short-protocol-"))
    harness = Harness(["cpu"] * 2, cfg, HardwareConfig(world_sizes=[2], gpus_per_node=2), load_problems(),
                      work_dir=work / "work", cache_dir=work / "cache")
    readings = []
    try:
        for rep in range(args.reps):
            for i, (name, path) in enumerate(SAMPLES.items()):
                r = harness.evaluate(Sample(problem_id="all_reduce", model="bench", sample_index=rep * 10 + i,
                                            source=path.read_text()))
                readings.append({"sample": name, "status": r.status.value, "speedup": r.speedup,
                                 "ref_time_us": r.ref_time_us, "cand_time_us": r.cand_time_us})
                print(json.dumps(readings[-1]), flush=True)
    finally:
        harness.close()
    speedups = sorted(x["speedup"] for x in readings if x["status"] == Status.CORRECT.value and x["speedup"])
    summary = {"zygote": args.zygote, "rounds": args.rounds, "readings": readings, "correct": len(speedups),
               "min": speedups[0], "median": statistics.median(speedups), "max": speedups[-1]} if speedups else {}
    print(f"{len(speedups)} correct readings: min {summary.get('min', 0):.2f}, median {summary.get('median', 0):.2f}, "
          f"max {summary.get('max', 0):.2f}")
    print("wrote", run.write(out, summary or {"zygote": args.zygote, "rounds": args.rounds, "readings": readings}))
    return 0
