"""Where the time of a small all-reduce goes on this machine: NCCL and symmetric memory, eager.

    python scripts/probe_gpu_floor.py --numel 4096 > probe.txt     # 2 GPUs, one process per GPU

For k back-to-back calls between two device-wide synchronisations (the harness's rounds), prints
microseconds per call, and the host-side cost of issuing the calls (no synchronisation), for:
NCCL all_reduce in place, clone + all_reduce (the reference), symm_mem two_shot in place, and
copy-in + two_shot + clone (the shipped kernel).
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def bench(fn, k: int, reps: int = 20) -> tuple[float, float]:
    per_call, issue = [], []
    for _ in range(reps):
        dist.barrier()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(k):
            fn()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        per_call.append((t2 - t0) * 1e6 / k)
        issue.append((t1 - t0) * 1e6 / k)
    per_call.sort()
    issue.sort()
    return per_call[len(per_call) // 2], issue[len(issue) // 2]


def worker(rank: int, world: int, numel: int) -> None:
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", rank))
    import torch.distributed._symmetric_memory as symm_mem

    x = torch.randn(numel, device="cuda")
    name = dist.group.WORLD.group_name
    buf = symm_mem.empty(numel, dtype=x.dtype, device=x.device)
    symm_mem.rendezvous(buf, name)
    cases = {
        "nccl in place": lambda: dist.all_reduce(x),
        "clone+nccl (reference)": lambda: dist.all_reduce(x.clone()),
        "two_shot in place": lambda: torch.ops.symm_mem.two_shot_all_reduce_(buf, "sum", name),
        "copy+two_shot+clone": lambda: (buf.copy_(x), torch.ops.symm_mem.two_shot_all_reduce_(buf, "sum", name),
                                        buf.clone()),
        "one_shot (out of place)": lambda: torch.ops.symm_mem.one_shot_all_reduce(buf, "sum", name),
    }
    for fn in cases.values():
        bench(fn, 10, 3)  # warm up
    for label, fn in cases.items():
        for k in (1, 10, 100):
            us, issue = bench(fn, k)
            if rank == 0:
                print(f"{label:26s} k={k:3d}  {us:8.1f} us/call   host issue {issue:6.1f} us/call", flush=True)
    dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--numel", type=int, default=4096)
    args = ap.parse_args()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    world = torch.cuda.device_count()
    print(f"{world} GPUs, {args.numel} float32 ({args.numel * 4 / 1024:.0f} KiB), torch {torch.__version__}")
    mp.spawn(worker, args=(world, args.numel), nprocs=world)


if __name__ == "__main__":
    main()
