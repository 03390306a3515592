"""Where a region's bracket goes, per side: an all-reduce copy against the reference, through the
harness at W=1 (one GPU; or gloo on the CPU), eager and graph.

    python3 -m benchmarks bracket --max-calls 50,500 --modes eager,graph

For each evaluation and side, medians over the timed regions (microseconds): ``bracket`` (the
parent's clock, resume to the last done line), ``fixed`` (subtracted: the side's blanks),
``time`` (the region's time), ``rank_calls`` (the rank's own clock around its k calls: a
diagnostic), ``after_done`` (done line to the last report) and ``before_calls`` (bracket minus
rank_calls), split by the rank's own stamps (:func:`split`). Fixed work left unsubtracted is what
compresses a speedup: a candidate twice as fast reads (F + C) / (F + C / 2). For speedups of known
truth, ``python -m benchmarks ladder``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

import torch

from benchmarks import common
from pkb_ray.evaluate import rounds
from pkb_ray.evaluate.harness import Harness
from pkb_ray.problem import load_problems
from pkb_ray.spec.config import EvalConfig, HardwareConfig
from pkb_ray.spec.schema import Sample


def side_figures(regions: list) -> dict:
    def med(f) -> float:
        return round(statistics.median(f(g) for g in regions), 1)

    return {"bracket": med(lambda g: g.bracket_us), "rank_calls": med(lambda g: g.reports[0].us * g.k),
            "fixed": med(lambda g: g.fixed_us), "after_done": med(lambda g: g.after_us), "time": med(lambda g: g.us),
            "before_calls": med(lambda g: g.bracket_us - g.reports[0].us * g.k), **split(regions, med)}


def split(regions: list, med) -> dict:
    """``before_calls`` split by rank 0's own stamps (its clock is the parent's: CLOCK_MONOTONIC):
    ``wake`` (resume to the fire line read), ``prepare`` (to the calls' start), ``calls`` (the
    rank's clock around them, with the sync) and ``placing`` (from the done line to the report
    made: the layouts, the exports, outside the bracket)."""
    stamped = [g for g in regions if len(g.reports[0].stamps) == 4 and g.started]
    if not stamped:
        return {}

    def part(f) -> float:
        return med(lambda g: f(g.reports[0].stamps, g.started) * 1e6)

    return {"wake": part(lambda s, t0: s[0] - t0), "prepare": part(lambda s, t0: s[1] - s[0]),
            "calls": part(lambda s, t0: s[2] - s[1]), "placing": part(lambda s, t0: s[3] - s[2])}


def main(argv: list[str]) -> int:
    run = common.Run.of(__name__, argv)
    parser = run.parser(__doc__)
    parser.add_argument("--max-calls", default="50,500", help="eval.max_round_calls values")
    parser.add_argument("--modes", default="eager,graph")
    parser.add_argument("--round-us", type=float, default=2000.0)
    parser.add_argument("--numel", type=int, default=1 << 20, help="elements a rank (float32)")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--no-zygote", action="store_true",
                        help="candidates' sets started as sandboxes of their own, not forked from a template "
                             "(is the candidate's extra cost after a resume the fork's?)")
    parser.add_argument("--touch", action=argparse.BooleanOptionalAction, default=True,
                        help="eval.touch_devices: a clean process uses the device before each region")
    args = parser.parse_args(argv)
    out_path = run.out(args.out)
    timings = []
    driver_run = rounds.RoundDriver.run

    def keep(self):  # the driver's Timing (its regions), which a result does not carry
        timings.append(driver_run(self))
        return timings[-1]

    rounds.RoundDriver.run = keep
    try:
        rows = measure(args, timings)
    finally:
        rounds.RoundDriver.run = driver_run
    cuda = torch.cuda.is_available()
    print("wrote", run.write(out_path, {"device": torch.cuda.get_device_name(0) if cuda else "cpu",
                                        "zygote": not args.no_zygote, "touch": args.touch,
                                        "round_us": args.round_us, "numel": args.numel, "rows": rows}))
    return 0


def measure(args, timings: list) -> list[dict]:
    """One row per evaluation: each setting of ``--max-calls`` and ``--modes``, ``--reps`` times."""
    cuda = torch.cuda.is_available()
    device = "cuda:0" if cuda else "cpu"
    problems, out = load_problems(), []
    for max_calls in (int(x) for x in args.max_calls.split(",")):
        for mode in args.modes.split(","):
            tmp = Path(tempfile.mkdtemp())
            hw = HardwareConfig(name="gpu_1" if cuda else "cpu_1", device="cuda" if cuda else "cpu",
                                world_sizes=[1], gpus_per_node=1)
            cfg = EvalConfig(trials=2, timing_sets=2, warmup=3, rounds=20, size={"numel": args.numel}, timeout_s=120,
                             prewarm=0, max_round_calls=max_calls, timing_mode=mode, round_us=args.round_us,
                             zygote=not args.no_zygote, touch_devices=args.touch)
            h = Harness([device], cfg, hw, problems, work_dir=tmp / "work", cache_dir=tmp / "cache")
            try:
                for index in range(args.reps):
                    result = h.evaluate(Sample(problem_id="all_reduce", model="copy", sample_index=index,
                                               source=problems["all_reduce"].source()))
                    # the sample's own timing: its first (an interference check may time the reference alone, or
                    # beside an honest copy, after it)
                    t = next((t for t in timings if any(g.side.value == "cand" for g in t.regions)), None)
                    timings.clear()
                    if t is None:  # the timing step failed: say why instead of figures
                        print(json.dumps({"max_calls": max_calls, "mode": mode, "status": result.status,
                                          "message": result.message[:600]}), flush=True)
                        continue
                    row = {"max_calls": max_calls, "mode": mode, "status": result.status, "speedup": result.speedup,
                           **({"message": result.message[:600]} if result.status != "correct" else {}),
                           "k": t.k, "k_graph": t.k_graph, "eval_s": round(result.eval_seconds, 3),
                           "outside_timing_s": round(result.eval_seconds - t.seconds, 3),
                           "phases": {k: round(v, 3) for k, v in result.phase_seconds.items()},
                           **{side: side_figures([g for g in t.regions if g.side.value == side]) for side in ("ref", "cand")}}
                    print(json.dumps(row), flush=True)
                    out.append(row)
            finally:
                h.close()
    return out
