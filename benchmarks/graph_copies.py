"""A copy of a problem's reference, timed against the reference over message sizes, eager and as
CUDA-graph replays (eval.timing_mode): the convention's accuracy (a copy must time at 1.00) and
what each mode costs per sample.

    python3 -m benchmarks graph_copies                                            # all GPUs (at most 2)
    python3 -m benchmarks graph_copies --world-size 1 --modes graph --sizes 10,18,26 --out ...

Through the harness without Ray or problem validation (so W=1 runs on a one-GPU machine: NCCL on
one rank still launches and captures its kernels). Sizes are powers of two of elements
(float32: 2^10 = 4 KiB). ``--candidate kernels/<problem>/<file>.py`` times an expert kernel
instead of the copy (at W=1 on a one-GPU machine: whether it captures into a graph). Each size
is evaluated ``--reps`` times on one harness (the first also computes the reference outputs).
Per evaluation: the reference's and the candidate's time (eager and graph where both ran),
speedup, calls per region, and the seconds of the timing step.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

import torch

from benchmarks import common
from pkb_ray.evaluate import rounds
from pkb_ray.evaluate.harness import Harness
from pkb_ray.problem import load_problems
from pkb_ray.spec.config import EvalConfig, HardwareConfig
from pkb_ray.spec.schema import Sample


def knobs(problem: str, numel: int) -> dict:
    """The size knobs of ``numel`` elements a rank (all-to-all: rows of 1024 elements)."""
    return {"rows_per_peer": max(1, numel // 1024), "dim": 1024} if problem == "all_to_all" else {"numel": numel}


def main(argv: list[str]) -> int:
    run = common.Run.of(__name__, argv)
    ap = run.parser(__doc__)
    ap.add_argument("--problem", default="all_reduce")
    ap.add_argument("--candidate", type=Path, help="a kernel file to time instead of the reference's copy "
                                                    "(its problem: the folder it is in, kernels/<problem>/)")
    ap.add_argument("--world-size", type=int, default=min(2, torch.cuda.device_count()))
    ap.add_argument("--modes", default="eager,graph")
    ap.add_argument("--sizes", default="10,12,14,16,18,20,22,24,26", help="log2 of elements per rank")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--graph-calls-factor", type=int, default=rounds.GRAPH_CALLS_FACTOR,
                    help="graph regions hold at most this many times the eager region's calls")
    ap.add_argument("--timeout", type=float, default=60.0, help="per evaluation step, seconds (a candidate's "
                                                                   "CUDA builds on the rank count in its first)")
    args = ap.parse_args(argv)
    out = run.out(args.out)
    factor = rounds.GRAPH_CALLS_FACTOR
    rounds.GRAPH_CALLS_FACTOR = args.graph_calls_factor  # read by the harness's round driver, in this process
    try:
        rows = measure(args)
    finally:
        rounds.GRAPH_CALLS_FACTOR = factor
    print("wrote", run.write(out, {"world_size": args.world_size, "gpu": torch.cuda.get_device_name(0),
                                   "torch": torch.__version__, "rows": rows}))
    return 0 if all(r["status"] == "correct" for r in rows) else 1


def measure(args) -> list[dict]:
    """One row per evaluation: each mode and size, ``--reps`` times."""
    problems = load_problems()
    w = args.world_size
    hw = HardwareConfig(name=f"h200_{w}", device="cuda", world_sizes=[w], gpus_per_node=w)
    if args.candidate:
        args.problem = args.candidate.resolve().parent.name
    source = args.candidate.read_text() if args.candidate else problems[args.problem].source()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for mode in args.modes.split(","):
            for p in (int(x) for x in args.sizes.split(",")):
                cfg = EvalConfig(trials=2, timing_sets=2, warmup=5, rounds=args.rounds,
                                 size=knobs(args.problem, 1 << p), timeout_s=args.timeout, prewarm=1,
                                 max_round_calls=500, timing_mode=mode)
                h = Harness([f"cuda:{i}" for i in range(w)], cfg, hw, problems, work_dir=Path(tmp) / f"{mode}{p}",
                            cache_dir=Path(tmp) / "cache")
                try:
                    for rep in range(args.reps):
                        t0 = time.perf_counter()
                        model = "kernels" if args.candidate else "copies"
                        r = h.evaluate(Sample(problem_id=args.problem, model=model, sample_index=rep, source=source))
                        rows.append(dict(mode=mode, bytes=4 << p, rep=rep, factor=args.graph_calls_factor,
                                         status=r.status.value,
                                         timing_mode=r.timing_mode, graph_error=r.graph_error[-200:],
                                         ref_us=r.ref_time_us, cand_us=r.cand_time_us, speedup=r.speedup,
                                         k=r.calls_per_round, timing_s=r.phase_seconds.get("timing"),
                                         **{f"{m}_{side}_us": getattr(r, f"{m}_{side}_time_us")
                                            for m in ("eager", "graph") for side in ("ref", "cand")},
                                         eval_s=round(time.perf_counter() - t0, 2)))
                        print(json.dumps(rows[-1]), flush=True)
                finally:
                    h.close()
    return rows
