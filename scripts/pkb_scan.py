"""What pkb_ray makes of a ParallelKernelBench checkout and folders of its solutions, before anything runs.

    .venv/bin/python scripts/pkb_scan.py --root ~/src/pkb --samples <folder of solutions_*/> \
        --world-size 2 --hardware h200_2

Prints the problems by category, the samples per model and backend, how many were matched through an
alias or carry a number that names another problem, and what validation says of each (at the world
size, on the hardware profile's NVLink multicast setting). Writes nothing but the generated problem
files (under a temporary folder).
"""

from __future__ import annotations

import argparse
import collections
import tempfile
from pathlib import Path

from pkb_ray.generate.samples import read_samples
from pkb_ray.pipeline.selection import hardware_profile
from pkb_ray.pipeline.validate import validate
from pkb_ray.pkb.shims import write_shims
from pkb_ray.pkb.solutions import number_mismatches
from pkb_ray.problem import load_problems
from pkb_ray.spec.placement import Layout
from pkb_ray.spec.schema import Sample, Where


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", required=True, help="a ParallelKernelBench checkout")
    ap.add_argument("--samples", help="a folder of PKB solution files, or of solutions_* run folders")
    ap.add_argument("--world-size", type=int, default=2)
    ap.add_argument("--hardware", default="h200_2", help="a profile in conf/hardware (its nvlink_multicast)")
    args = ap.parse_args()
    hw = hardware_profile(args.hardware)
    problems = load_problems(write_shims(args.root, tempfile.mkdtemp(prefix="pkb-scan-")))
    print(f"{len(problems)} problems:", dict(collections.Counter(p.meta.category for p in problems.values())))
    print("minimum world size above 2:", {pid: p.meta.world_sizes.min for pid, p in problems.items()
                                           if p.meta.world_sizes.min > 2})
    if not args.samples:
        return
    rows = read_samples(Path(args.samples), "replay")
    number_mismatches(rows, {pid: p.module.NUMBER for pid, p in problems.items()})
    runs = collections.Counter((r["model"], r["backend"]) for r in rows)
    print(f"{len(rows)} samples:", {f"{m}/{b}": n for (m, b), n in sorted(runs.items())})
    print("matched through an alias:", dict(collections.Counter(r["metadata"]["pkb_alias"] for r in rows
                                                                if "pkb_alias" in r["metadata"])))
    print("number names another problem:", {f"{m}/{b}": n for (m, b), n in sorted(collections.Counter(
        (r["model"], r["backend"]) for r in rows if "pkb_number_mismatch" in r["metadata"]).items())})
    verdicts, why = collections.Counter(), collections.Counter()
    for row in rows:
        out = validate(row, problems, Where(Layout(1, args.world_size), hardware=hw.name), multicast=hw.nvlink_multicast)
        status = "to evaluate" if isinstance(out, Sample) else str(out.status)
        verdicts[(row["backend"], status)] += 1
        if not isinstance(out, Sample):
            why[(row["backend"], status, out.message.split(" (")[0].split(": line")[0][:90])] += 1
    print(f"at W={args.world_size} on {hw.name} (nvlink_multicast={hw.nvlink_multicast}):")
    for (backend, status), n in sorted(verdicts.items()):
        print(f"  {backend:16s} {status:22s} {n}")
    for (backend, status, message), n in why.most_common():
        print(f"    {n:3d} {backend}: {message}")


if __name__ == "__main__":
    main()
