"""Check problem files: each reference on W gloo ranks against its single-process oracle.

    .venv/bin/python scripts/check_problems.py                         # every problem, W = 2, 3, 4
    .venv/bin/python scripts/check_problems.py --ids moe_dispatch,ring_attention --world-sizes 2,4 --presets small,default
    python3 scripts/check_problems.py --device cuda --world-sizes 2 --dtype bfloat16      # NCCL on GPUs 0..W-1
    .venv/bin/python scripts/check_problems.py --pkb-root ~/src/pkb --world-sizes 2,3,4   # probe PKB's problems

A ParallelKernelBench problem states no oracle: for those the check is a probe (the builder and the
reference run at that W, a seed's inputs come out the same twice, and the reference leaves its
inputs alone) and its speed of light is traced at run time, not checked here.

Also checks that inputs differ per seed and rank and that the speed-of-light model is positive.
Exit status 1 if anything fails; each failure is printed with the problem, preset, dtype and seed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pkb_ray.problem import DTYPES, load_problems
from pkb_ray.problems.check import check


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ids", help="comma-separated problem ids (default: all)")
    ap.add_argument("--world-sizes", default="2,3,4")
    ap.add_argument("--presets", default="small")
    ap.add_argument("--dtype", help="default: each problem's first dtype")
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--problems-dir", type=Path)
    ap.add_argument("--pkb-root", type=Path, help="a ParallelKernelBench checkout: check its problems instead")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--timeout", type=float, default=120.0, help="collective timeout: a hung problem fails after it")
    args = ap.parse_args()
    if args.pkb_root:
        import tempfile

        from pkb_ray.pkb.shims import write_shims

        args.problems_dir = write_shims(args.pkb_root, tempfile.mkdtemp(prefix="pkb-shims-"))
    problems = load_problems(args.problems_dir)
    ids = args.ids.split(",") if args.ids else sorted(problems)
    unknown = [i for i in ids if i not in problems]
    if unknown:
        print(f"error: unknown problem id(s) {unknown}", file=sys.stderr)
        return 2
    failed = 0
    for pid in ids:
        p = problems[pid]
        for preset in args.presets.split(","):
            sol = p.speed_of_light(p.meta.sizes[preset], 4, DTYPES[p.meta.dtypes[0]])
            if max(sol.interconnect_bytes, sol.flops, sol.hbm_bytes) <= 0 and not getattr(p.module, "TRACE_SOL", False):
                print(f"FAIL {pid}|{preset}: speed_of_light is zero")
                failed += 1
    for w in (int(x) for x in args.world_sizes.split(",")):
        failures = check(problems, ids, w, presets=tuple(args.presets.split(",")),
                         seeds=tuple(int(s) for s in args.seeds.split(",")), dtype=args.dtype,
                         timeout_s=args.timeout, device=args.device)
        for key, why in failures.items():
            print(f"FAIL W={w} {key}: {why}")
        failed += len(failures)
        checked = sum(p.meta.world_sizes.supports(w) and (not args.dtype or args.dtype in p.meta.dtypes)
                      for p in map(problems.get, ids))
        print(f"W={w}: {checked} problems, {len(failures)} failure(s)", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
