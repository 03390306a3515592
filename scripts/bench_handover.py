"""Cost of handing one trial's outputs to a clean rank: the old path (torch.save of CPU copies, then
a full read, SHA-256 and torch.load) against runner/tensor_io (flat file, no pickle), on CPU.

    .venv/bin/python scripts/bench_handover.py --tokens 2048 --hidden 8192 --reps 5

The value is rmsnorm_allreduce's at its default size: outputs (2 x 64 MiB) and inputs after the
call (2 x 64 MiB + the weight), float32. Best of --reps, seconds, in a folder on --dir.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import tempfile
import time
from pathlib import Path

import torch

from pkb_ray.measure.correctness import to_cpu
from pkb_ray.runner import tensor_io


def best(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--hidden", type=int, default=8192)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()
    t, h = args.tokens, args.hidden
    value = {"outputs": (torch.randn(t, h), torch.randn(t, h)),
             "inputs_after": (torch.randn(t, h), torch.randn(t, h), torch.randn(h))}
    folder = Path(tempfile.mkdtemp(dir=args.dir))
    old, new = folder / "old.pt", folder / "new.tensors"

    def old_write():
        torch.save({"outputs": to_cpu(value["outputs"]), "inputs_after": to_cpu(value["inputs_after"])}, old)

    def old_read_reference():
        data = old.read_bytes()
        hashlib.sha256(data).hexdigest()
        torch.load(io.BytesIO(data))

    old_write()
    sha = tensor_io.write(new, value, digest=True)
    mib = sum(x.numel() * 4 for x in [*value["outputs"], *value["inputs_after"]]) / 2**20
    rows = {
        "write (candidate, per trial)": (best(old_write, args.reps), best(lambda: tensor_io.write(new, value), args.reps)),
        "read candidate's file": (best(lambda: torch.load(old), args.reps), best(lambda: tensor_io.read(new), args.reps)),
        "read + verify a reference file": (best(old_read_reference, args.reps),
                                           best(lambda: tensor_io.read(new, sha256=sha), args.reps)),
    }
    print(f"{mib:.0f} MiB per trial and rank, best of {args.reps}, seconds (old torch.save path | tensor_io)")
    for name, (a, b) in rows.items():
        print(f"  {name:32s} {a:7.3f} | {b:7.3f}")
    print("  a reference kept on the device (runner/resident): no read at all after the first")


if __name__ == "__main__":
    main()
