"""Samples evaluated with rank sets forked from the zygote against sets started fresh (eval.zygote).

    .venv/bin/python -m benchmarks zygote --samples 12 [--device cuda --world-size 1 --problems-dir D]

It evaluates the same copies of a problem's reference through one sandboxed Harness per setting
(off first, then on), and prints and writes each setting's statuses, the median ``ready``
phase and seconds a sample, and samples an hour. Figures: docs/benchmarks/throughput.md.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks import common
from pkb_ray.evaluate.harness import Harness
from pkb_ray.problem import load_problems
from pkb_ray.spec.config import EvalConfig, HardwareConfig
from pkb_ray.spec.schema import Sample


def measure(zygote: bool, args, problems, work: Path) -> dict:
    cuda = args.device == "cuda"
    cfg = EvalConfig(trials=2, timing_sets=2, warmup=2, rounds=20, max_round_calls=1, timeout_s=60, prewarm=0,
                     zygote=zygote, size="small")
    hardware = HardwareConfig(device=args.device,
                              world_sizes=[args.world_size], gpus_per_node=args.world_size,
                              **({"nvlink_multicast": False} if cuda else {}))
    devices = [f"cuda:{i}" if cuda else "cpu" for i in range(args.world_size)]
    harness = Harness(devices, cfg, hardware, problems, work_dir=work / f"w{int(zygote)}", cache_dir=work / "cache")
    source = problems[args.problem].source()
    started = time.monotonic()
    rows = []
    for i in range(args.samples):
        t = time.monotonic()
        r = harness.evaluate(Sample(problem_id=args.problem, model="copy", sample_index=i, source=source))
        rows.append({"status": r.status, "ready": (r.phase_seconds or {}).get("ready"), "seconds": time.monotonic() - t})
    wall = time.monotonic() - started
    used_zygote = harness.rank_sets.zygotes is not None and harness.rank_sets.zygotes.failed is None
    why = harness.rank_sets.zygotes.failed if harness.rank_sets.zygotes is not None else "eval.zygote=false"
    harness.close()
    later = rows[1:] or rows  # the first sample also starts the clean set (and the template)
    return {"zygote": zygote, "forked": used_zygote, "why_not": None if used_zygote else why,
            "statuses": sorted({r["status"] for r in rows}), "samples": len(rows),
            "ready_p50_s": statistics.median(r["ready"] for r in later if r["ready"] is not None),
            "sample_p50_s": statistics.median(r["seconds"] for r in later),
            "samples_per_hour": round(3600 * len(rows) / wall), "wall_s": round(wall, 1)}


def main(argv: list[str]) -> int:
    run = common.Run.of(__name__, argv)
    p = run.parser(__doc__)
    p.add_argument("--samples", type=int, default=12)
    p.add_argument("--problem", default="all_reduce")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--world-size", type=int, default=2)
    p.add_argument("--problems-dir", default=None)
    args = p.parse_args(argv)
    out = run.out(args.out)
    problems = load_problems(args.problems_dir) if args.problems_dir else load_problems()
    work = Path(tempfile.mkdtemp(prefix="bench-zygote-"))
    results = [measure(False, args, problems, work), measure(True, args, problems, work)]
    for r in results:
        print(json.dumps(r, default=str))
    print("wrote", run.write(out, results))
    return 0
