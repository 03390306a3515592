"""What the sandbox and the unforgeable verdict path cost, and what hostile samples get, side by side.

    python -m benchmarks isolation --device cuda --out /tmp/isolation.json        # 2 x H200, NCCL
    python -m benchmarks isolation --device cpu --size small --out /tmp/iso.json  # gloo

One harness per isolation level (``none``, ``sandbox``) on the same devices, with no rank set
started ahead (``prewarm=0``: each sample pays its own start, so the sandbox's start is counted).
The samples alternate between them: reference copies of a few problems and the expert kernels
of kernels/. Per sample and level: status, speedup, seconds per phase. Then the hostile samples
(tests/samples, and tests/samples/gpu on GPU) through the sandboxed harness, each with the status
it got. The summary says, per level, the median seconds per sample and, for the sandbox, the
seconds outside the timing step (the verdict path: reference, start, trials, checks, clean-up).
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path

from omegaconf import OmegaConf

from benchmarks import common
from pkb_ray.evaluate.harness import Harness
from pkb_ray.generate.samples import read_samples
from pkb_ray.pipeline.selection import hardware_profile
from pkb_ray.problem import load_problems
from pkb_ray.spec.config import EvalConfig
from pkb_ray.spec.schema import Sample

REPO = common.REPO

COPIES = ["all_reduce", "rmsnorm_allreduce", "moe_dispatch_skewed", "all_to_all"]
HOSTILE = ["correct_then_cached", "breaks_reference", "rewrites_check", "forges_reports",
           "memo_by_address", "memo_by_values", "memo_by_hash", "shares_output_buffer", "reads_secrets",
           "deletes_results", "escapes_with_children", "fills_disk", "segfaults", "hangs_while_timed"]


def main(argv: list[str]) -> int:
    run = common.Run.of(__name__, argv)
    p = run.parser(__doc__)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cuda")
    p.add_argument("--size", default="default")
    p.add_argument("--reps", type=int, default=2, help="evaluations of each sample per level")
    p.add_argument("--skip", default="", help="comma separated: copies, kernels, hostile")
    p.add_argument("--kernels", default="", help="comma separated parts of kernel file names (default: all)")
    args = p.parse_args(argv)
    out = run.out(args.out)
    problems = load_problems()
    eval_cfg = OmegaConf.to_container(OmegaConf.load(REPO / f"conf/eval/{'gpu' if args.device == 'cuda' else 'cpu'}.yaml"))
    eval_cfg.update(size=args.size, prewarm=0)
    hw = hardware_profile("h200_2" if args.device == "cuda" else "cpu_gloo")
    devices = ["cuda:0", "cuda:1"] if args.device == "cuda" else ["cpu", "cpu"]
    tmp = Path(tempfile.mkdtemp(prefix="bench-isolation-"))
    harness = {level: Harness(devices, EvalConfig(**{**eval_cfg, "isolation": level}), hw, problems,
                              work_dir=tmp / f"work-{level}", cache_dir=tmp / "cache")
               for level in ("none", "sandbox")}
    print("isolation:", harness["sandbox"].probe.describe(), flush=True)
    samples = []
    if "copies" not in args.skip:
        samples += [("copy", Sample(problem_id=pid, model="copy", sample_index=0, source=problems[pid].source()))
                    for pid in COPIES if pid in problems]
    if "kernels" not in args.skip:
        wanted = [k for k in args.kernels.split(",") if k]
        samples += [(row["metadata"].get("file", row["problem_id"]), Sample(**row))
                    for row in read_samples(REPO / "kernels", model="kernels")
                    if not wanted or any(k in row["metadata"].get("file", "") for k in wanted)]
    rows = []
    for rep in range(args.reps):
        for kind, sample in samples:
            for level in ("none", "sandbox") if rep % 2 == 0 else ("sandbox", "none"):
                t0 = time.monotonic()
                r = harness[level].evaluate(sample)
                rows.append({"kind": kind, "problem": r.problem_id, "level": level, "rep": rep, "status": str(r.status),
                             "speedup": r.speedup, "cand_us": r.cand_time_us, "ref_us": r.ref_time_us, "eval_s": r.eval_seconds, "wall_s": time.monotonic() - t0,
                             "phases": r.phase_seconds, "message": r.message[:300]})
                print(f"{level:8s} {kind:34s} {r.problem_id:22s} {r.status!s:14s} x{r.speedup or 0:6.3f} "
                      f"{r.eval_seconds:6.2f}s {r.phase_seconds}", flush=True)
                if str(r.status) != "correct":
                    print("   ", r.message[-600:].replace("\n", " | "), flush=True)
    hostile = []
    if "hostile" not in args.skip:
        files = [REPO / f"tests/samples/{n}.py" for n in HOSTILE] + [REPO / "samples/replay/all_reduce/09_rewrites_timer.py"]
        if args.device == "cuda":
            files += sorted((REPO / "tests/samples/gpu").glob("*.py"))
        for i, path in enumerate(files):
            s = Sample(problem_id="all_reduce", model="hostile", sample_index=i, source=path.read_text())
            r = harness["sandbox"].evaluate(s)
            expect = next((ln.split(":", 1)[1].strip() for ln in path.read_text().splitlines()
                           if ln.startswith("# expect:")), "")
            hostile.append({"file": str(path.relative_to(REPO)), "status": str(r.status), "expect": expect,
                            "speedup": r.speedup, "message": r.message[:400]})
            print(f"hostile {path.name:28s} {r.status!s:14s} {expect:24s} {r.message[:150]!r}", flush=True)
    for h in harness.values():
        h.close()
    run.write(out, {"isolation": harness["sandbox"].probe.describe(), "rows": rows, "hostile": hostile,
                    "summary": summarize(rows)})
    print(json.dumps(summarize(rows), indent=1))
    print("wrote", out)
    return 0


def summarize(rows: list[dict]) -> dict:
    out = {}
    for level in ("none", "sandbox"):
        mine = [r for r in rows if r["level"] == level]
        if not mine:
            continue
        outside = [r["eval_s"] - r["phases"].get("timing", 0.0) for r in mine]
        out[level] = {"median_eval_s": statistics.median(r["eval_s"] for r in mine),
                      "median_outside_timing_s": statistics.median(outside),
                      "max_outside_timing_s": max(outside),
                      "copy_speedups": [round(r["speedup"], 3) for r in mine if r["kind"] == "copy" and r["speedup"]]}
    pairs = {}
    for r in rows:
        pairs.setdefault((r["kind"], r["problem"], r["rep"]), {})[r["level"]] = r
    both = [v for v in pairs.values() if len(v) == 2]
    if both:
        out["sandbox_minus_none_s"] = statistics.median(v["sandbox"]["eval_s"] - v["none"]["eval_s"] for v in both)
        ratios = [v["sandbox"]["speedup"] / v["none"]["speedup"] for v in both
                  if v["sandbox"]["speedup"] and v["none"]["speedup"] and v["sandbox"]["kind"] != "copy"]
        out["kernel_speedup_ratio_sandbox_over_none"] = [round(x, 3) for x in ratios]
    # the 3 % question: each kernel's median time over the repetitions, per level
    times: dict = {}
    for r in rows:
        if r["kind"] != "copy" and r.get("cand_us"):
            times.setdefault(r["kind"], {}).setdefault(r["level"], []).append(r["cand_us"])
    out["kernel_median_us"] = {k: {lvl: round(statistics.median(v), 2) for lvl, v in by.items()}
                               | ({"sandbox_over_none": round(statistics.median(by["sandbox"])
                                                              / statistics.median(by["none"]), 4)}
                                  if len(by) == 2 else {})
                               for k, by in times.items()}
    return out

