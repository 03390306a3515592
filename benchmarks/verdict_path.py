"""Seconds of a sample outside its timing step (the verdict path), per phase, for large outputs.

    python -m benchmarks verdict_path --device cuda --out /tmp/verdict.json            # 2 x H200
    python -m benchmarks verdict_path --device cpu --rounds 10 --out /tmp/verdict.json  # gloo

One sandboxed harness at the eval profile's settings (default size, its own ``prewarm``, so a
rank set's start is hidden as in a run), reference copies of problems with outputs of 100s of MB.
The first sample of a problem also computes and stores its references; the later ones find them.
Per sample: status, seconds per phase, and the seconds outside the ``timing`` phase.
"""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path

from omegaconf import OmegaConf

from benchmarks import common
from pkb_ray.evaluate.harness import Harness
from pkb_ray.pipeline.selection import hardware_profile
from pkb_ray.problem import load_problems
from pkb_ray.spec.config import EvalConfig
from pkb_ray.spec.schema import Sample

REPO = common.REPO

PROBLEMS = ["all_reduce", "all_to_all", "rmsnorm_allreduce", "moe_dispatch_skewed"]


def main(argv: list[str]) -> int:
    run = common.Run.of(__name__, argv)
    p = run.parser(__doc__)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cuda")
    p.add_argument("--size", default="default")
    p.add_argument("--reps", type=int, default=3, help="samples per problem (the first one stores the references)")
    p.add_argument("--rounds", type=int, default=None, help="override eval.rounds (the timed part, not measured here)")
    p.add_argument("--warmup", type=int, default=None, help="override eval.warmup (not part of what is measured)")
    p.add_argument("--timeout", type=float, default=None, help="override eval.timeout_s (CPU at default size is slow)")
    p.add_argument("--isolation", default="sandbox")
    p.add_argument("--problems", default=",".join(PROBLEMS))
    args = p.parse_args(argv)
    out = run.out(args.out)
    problems = load_problems()
    gpu = args.device == "cuda"
    eval_cfg = OmegaConf.to_container(OmegaConf.load(REPO / f"conf/eval/{'gpu' if gpu else 'cpu'}.yaml"))
    eval_cfg.update(size=args.size, isolation=args.isolation, **({"rounds": args.rounds} if args.rounds else {}),
                    **({"timeout_s": args.timeout} if args.timeout else {}),
                    **({"warmup": args.warmup} if args.warmup is not None else {}))
    hw = hardware_profile("h200_2" if gpu else "cpu_gloo")
    tmp = Path(tempfile.mkdtemp(prefix="bench-verdict-"))
    harness = Harness(["cuda:0", "cuda:1"] if gpu else ["cpu", "cpu"], EvalConfig(**eval_cfg), hw, problems,
                      work_dir=tmp / "work", cache_dir=tmp / "cache")
    harness.prewarm()
    rows = []
    try:
        for pid in args.problems.split(","):
            for rep in range(args.reps):
                r = harness.evaluate(Sample(problem_id=pid, model="copy", sample_index=rep,
                                            source=problems[pid].source()))
                outside = r.eval_seconds - r.phase_seconds.get("timing", 0.0)
                rows.append({"problem": pid, "rep": rep, "status": str(r.status), "speedup": r.speedup,
                             "eval_s": round(r.eval_seconds, 3), "outside_timing_s": round(outside, 3),
                             "phases": r.phase_seconds})
                print(f"{pid:22s} rep {rep} {r.status!s:12s} x{r.speedup or 0:6.3f} outside timing "
                      f"{outside:6.2f}s {r.phase_seconds}", flush=True)
    finally:
        harness.close()
    summary = {pid: statistics.median(x["outside_timing_s"] for x in rows if x["problem"] == pid and x["rep"] > 0)
               for pid in args.problems.split(",") if args.reps > 1}
    print("median seconds outside timing (samples after the first):", summary)
    print("wrote", run.write(out, {"rows": rows, "median_outside_timing_s": summary, "device": args.device,
                                   "size": args.size, "isolation": args.isolation}))
    return 0
