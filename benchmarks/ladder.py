"""Ladders through the harness: speedups whose true value is known by construction, read back.

    python3 -m benchmarks ladder --sizes small,default --modes eager --out ladder.json

Rungs (:mod:`pkb_ray.problems.ladders`): a candidate that is the reference doing its work ``n``
times (true speedup ``1/n``, ``--ns``), and a problem whose reference does it ``m`` times against
the plain reference (true ``m``, ``--ms``); ``n = 1`` is the copy. On one GPU (W=1, the problem's
ladder copies allowed there) or on ``--world-size`` gloo ranks on the CPU. Each row: the rung,
the true ratio, the read speedup and its interval, the error, and the parts of the regions'
times (the parent's bracket, the fixed work subtracted, the work after the done lines, the
rank's own clock around its calls), medians in microseconds.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

from benchmarks import common
from pkb_ray.evaluate import rounds
from pkb_ray.evaluate.harness import Harness
from pkb_ray.problem import default_problems_dir, load_problems
from pkb_ray.problems.ladders import repeated_source, write_ladder
from pkb_ray.spec.config import EvalConfig, HardwareConfig
from pkb_ray.spec.schema import Sample


def side_parts(timing, side: str) -> dict:
    """Medians of one side's regions (and blanks) of the first mode that ran, microseconds."""
    mode = timing.modes[0]
    mine = [g for g in timing.of(mode) if g.side.value == side]
    blanks = [g.bracket_us for g in timing.blanks if g.side.value == side and g.mode == mode]

    def med(values) -> float:
        values = list(values)
        return round(statistics.median(values), 1) if values else 0.0

    return {"bracket": med(g.bracket_us for g in mine), "fixed": med(g.fixed_us for g in mine),
            "blank": med(blanks), "after": med(g.after_us for g in mine), "charge": med(g.charge_us for g in mine),
            "time": med(g.us for g in mine), "rank_calls": med(g.reports[0].us * g.k for g in mine if g.reports)}


def series(timing) -> dict:
    """Each side's regions of the first mode, in the order they ran: microseconds a call by the
    rank's own clock (to see whether a side's calls get cheaper as its process ages)."""
    mode = timing.modes[0]
    return {side: [round(g.reports[0].us, 1) for g in timing.of(mode) if g.side.value == side and g.reports]
            for side in ("ref", "cand")}


def conf_eval(device: str) -> dict:
    """The shipped eval defaults of the device kind (conf/eval/gpu.yaml or cpu.yaml)."""
    from omegaconf import OmegaConf

    path = common.REPO / "conf/eval" / f"{'gpu' if device == 'cuda' else 'cpu'}.yaml"
    return {k: v for k, v in OmegaConf.to_container(OmegaConf.load(path)).items() if v is not None}


def rungs(ns: list[int], ms: list[int]) -> list[tuple[str, int, int, float]]:
    """(name, the problem's m, the candidate's n, true speedup) for each rung."""
    return ([(f"cand_x{n}", 1, n, 1.0 / n) for n in ns] + [(f"ref_x{m}", m, 1, float(m)) for m in ms if m != 1])


def main(argv: list[str]) -> int:
    run = common.Run.of(__name__, argv)
    parser = run.parser(__doc__)
    parser.add_argument("--problem", default="all_reduce")
    parser.add_argument("--sizes", default="default", help="the problem's named sizes")
    parser.add_argument("--modes", default="eager", help="eager, graph (GPU)")
    parser.add_argument("--ns", default="8,4,2,1", help="candidates doing the work n times")
    parser.add_argument("--ms", default="2,4", help="references doing it m times")
    parser.add_argument("--reps", type=int, default=1, help="evaluations a rung")
    parser.add_argument("--world-size", type=int, default=0, help="gloo ranks on the CPU (default 2; 1 on a GPU)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="an eval setting (JSON value), e.g. --set rounds=40 --set round_us=5000")
    parser.add_argument("--series", action="store_true",
                        help="each row also lists every timed region's calls by the rank's own clock, in order")
    args = parser.parse_args(argv)
    out = run.out(args.out)
    timings = []
    driver_run = rounds.RoundDriver.run

    def keep(self):  # the driver's Timing (its regions and blanks), which a result does not carry
        timings.append(driver_run(self))
        return timings[-1]

    rounds.RoundDriver.run = keep
    try:
        world, overrides, rows = measure(args, timings)
    finally:
        rounds.RoundDriver.run = driver_run
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    print("wrote", run.write(out, {"device": device, "world_size": world, "settings": overrides, "rows": rows}))
    return 0


def measure(args, timings: list) -> tuple[int, dict, list[dict]]:
    """The world size, the eval settings given, and one row per evaluation of each rung."""
    cuda = torch.cuda.is_available()
    world = args.world_size or (1 if cuda else 2)
    ns, ms = [int(x) for x in args.ns.split(",") if x], [int(x) for x in args.ms.split(",") if x]
    tmp = Path(tempfile.mkdtemp(prefix="pkb-ladder-"))
    source = (default_problems_dir() / f"{args.problem}.py").read_text()
    write_ladder(source, tmp / "problems", sorted({1, *ms}), min_world_size=1)
    problems = load_problems(tmp / "problems")
    overrides = {k: json.loads(v) for k, v in (s.split("=", 1) for s in args.set)}
    rows = []
    for size in args.sizes.split(","):
        for mode in args.modes.split(","):
            hw = HardwareConfig(name="gpu_1" if cuda else "cpu", device="cuda" if cuda else "cpu",
                                world_sizes=[world], gpus_per_node=world)
            settings = dict(trials=2, timing_sets=2, warmup=3, size=size, timeout_s=300, prewarm=0, timing_mode=mode)
            cfg = EvalConfig(**{**conf_eval(hw.device), **settings, **overrides})
            devices = ["cuda:0"] if cuda else ["cpu"] * world
            h = Harness(devices, cfg, hw, problems, work_dir=tmp / "work", cache_dir=tmp / "cache")
            try:
                for name, m, n, true in rungs(ns, ms):
                    for rep in range(args.reps):
                        sample = Sample(problem_id=f"{args.problem}_x{m}", model=name, sample_index=rep,
                                        source=repeated_source(source, n))
                        t0 = time.monotonic()
                        result = h.evaluate(sample)
                        timing = next((t for t in timings if any(g.side.value == "cand" for g in t.regions)), None)
                        timings.clear()
                        row = {"size": size, "mode": result.timing_mode or mode, "rung": name, "true": true,
                               "status": result.status, "speedup": result.speedup, "lo": result.speedup_lo,
                               "hi": result.speedup_hi, "k": result.calls_per_round,
                               "error": round(result.speedup / true - 1, 4) if result.speedup else None,
                               "eval_s": round(time.monotonic() - t0, 2),
                               "timed_s": round(timing.seconds, 2) if timing else None,
                               "rounds": len([g for g in timing.regions if g.side.value == "cand"]) if timing else 0,
                               **({"message": result.message[:400]} if result.status != "correct" else {}),
                               **({s: side_parts(timing, s) for s in ("ref", "cand")} if timing and timing.regions else {}),
                               **({"series": series(timing)} if args.series and timing else {})}
                        print(json.dumps(row), flush=True)
                        rows.append(row)
            finally:
                h.close()
    return world, overrides, rows
