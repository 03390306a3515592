"""Evaluate the shipped replay set through the harness alone (no Ray) and compare statuses.

    python scripts/check_replay_set.py --device cuda --world-size 2    # on a GPU machine (NCCL)
    python scripts/check_replay_set.py --device cpu --world-size 2     # gloo

For machines without Ray (the GPU image lacks it): validate, compile and evaluate each sample of
samples/replay, print one line per sample (expected vs got status, speedup, seconds) and exit 1
if any status differs from the file's ``# expect:``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from pkb_ray.evaluate.harness import Harness
from pkb_ray.generate.samples import read_samples
from pkb_ray.pipeline.compile import build_settings
from pkb_ray.pipeline.wiring import prepare_here
from pkb_ray.problem import load_problems
from pkb_ray.spec.config import EvalConfig, HardwareConfig
from pkb_ray.spec.schema import Sample

REPO = Path(__file__).resolve().parent.parent


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--world-size", type=int, default=2)
    ap.add_argument("--size", default="small")
    ap.add_argument("--rounds", type=int, default=50)
    ap.add_argument("--timeout", type=float, default=20)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    w = args.world_size
    devices = [f"cuda:{i}" for i in range(w)] if args.device == "cuda" else ["cpu"] * w
    hw = HardwareConfig(name=f"{args.device}_{w}", device=args.device, world_sizes=[w], gpus_per_node=w,
                        link_gbps=450.0 if args.device == "cuda" else 5.0)
    problems = load_problems()
    rows, bad = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        h = Harness(devices, EvalConfig(rounds=args.rounds, warmup=10, timeout_s=args.timeout, size=args.size),
                    hw, problems, work_dir=Path(tmp) / "work", cache_dir=Path(tmp) / "cache")
        for row in read_samples(REPO / "samples/replay"):
            t0 = time.monotonic()
            out = prepare_here(row, problems, w, build_settings(hw.arch, Path(tmp) / "cache", 300))
            out = h.evaluate(out) if isinstance(out, Sample) else out
            expect = row["metadata"]["expect"]
            bad += out.status.value != expect
            rows.append({"file": row["metadata"]["file"], "expect": expect, "status": out.status.value,
                         "speedup": out.speedup, "ref_us": out.ref_time_us, "cand_us": out.cand_time_us,
                         "seconds": time.monotonic() - t0, "message": out.message[-300:]})
            r = rows[-1]
            print(f"{'ok ' if expect == r['status'] else 'BAD'} {r['file']:42s} {r['status']:14s} "
                  f"speedup={r['speedup'] or 0:6.2f} ref={r['ref_us'] or 0:9.1f}us {r['seconds']:5.1f}s", flush=True)
        h.close()
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    print(f"{len(rows) - bad}/{len(rows)} statuses as expected")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
