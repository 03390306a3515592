"""What a rank set's sandbox costs to start: rank sets started until every rank joined its process
group, sandboxed and not, one after another (the start a sample pays when no set was started
ahead of it).

    python3 -m benchmarks sandbox_start --device cpu --world-size 2 --reps 10 --out start.json
    python3 -m benchmarks sandbox_start --device cuda --world-size 1 --reps 10 --out start.json

To compare two checkouts (say, before and after a change to the sandbox) in one session, run it
with each one's pkb_ray: ``cd <tree> && PYTHONPATH=<tree>:<this checkout> python -m benchmarks
sandbox_start ...`` (the output's ``code`` names the tree). Prints the median and spread of the
seconds to ready per isolation level, and the sandbox's extra over ``none``.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks import common
from pkb_ray.isolation.ranks import RankIsolation, RankSet


def start_once(devices: list[str], backend: str, level: str, work: Path) -> float:
    job = Path(tempfile.mkdtemp(dir=work))
    t0 = time.monotonic()
    ranks = RankSet(devices, backend=backend, job_dir=job, isolation=RankIsolation(level, gpu=backend == "nccl"))
    try:
        ready = ranks.wait_ready(120)
        if not ready.ok:
            raise RuntimeError(f"{level}: not ready: {ready}; {ranks.log_tail(0)}")
        return time.monotonic() - t0
    finally:
        ranks.close()


def main(argv: list[str]) -> int:
    run = common.Run.of(__name__, argv)
    p = run.parser(__doc__)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--world-size", type=int, default=2)
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--levels", default="none,sandbox", help="comma separated isolation levels")
    args = p.parse_args(argv)
    out_path = run.out(args.out)
    devices = [f"cuda:{i}" for i in range(args.world_size)] if args.device == "cuda" else ["cpu"] * args.world_size
    backend = "nccl" if args.device == "cuda" else "gloo"
    work = Path(tempfile.mkdtemp(prefix="bench-start-"))
    start_once(devices, backend, "sandbox", work)  # warm the file cache and the probe
    times = {level: [] for level in args.levels.split(",")}
    for _ in range(args.reps):  # alternate, so that drift on the machine hits both levels alike
        for level in times:
            times[level].append(start_once(devices, backend, level, work))
    summary = {level: {"median_s": round(statistics.median(t), 3), "min_s": round(min(t), 3),
                       "max_s": round(max(t), 3)} for level, t in times.items()}
    if {"none", "sandbox"} <= set(times):
        summary["sandbox_extra_s"] = round(summary["sandbox"]["median_s"] - summary["none"]["median_s"], 3)
    out = {"code": str(common.pkb_ray_tree()), "device": args.device, "world_size": args.world_size, "reps": args.reps,
           "summary": summary, "seconds": times}
    print(json.dumps(summary))
    print("wrote", run.write(out_path, out))
    return 0
