"""Where the time of a small all-reduce goes on this machine: NCCL and symmetric memory, eager.

    python scripts/probe_gpu_floor.py --numel 4096 > probe.txt     # 2 GPUs, one process per GPU
    python scripts/probe_gpu_floor.py --numel 2048 --dtype bfloat16 --kernel kernels/all_reduce/03_cuda_one_or_two_shot.py

For k back-to-back calls between two device-wide synchronisations (the harness's rounds), prints
microseconds per call, and the host-side cost of issuing the calls (no synchronisation), for:
NCCL all_reduce in place, clone + all_reduce (the reference), symm_mem two_shot in place, and
copy-in + two_shot + clone (the shipped kernel).

With ``--kernel`` (an all-reduce file of ``kernels/`` whose ``solution(x)`` takes one tensor), it
also times that kernel's ``solution`` called eagerly, its pieces (the fresh output alone, the
kernel launch alone into a preallocated output), and 100 calls captured in one CUDA graph and
replayed: the graph has no Python and no launch overhead between calls, so its time per call is
what the device needs, and the gap to the eager time is the host's.
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


def load_kernel(path: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location("probed_kernel", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def kernel_cases(path: str, x: torch.Tensor) -> dict:
    """The kernel's solution eagerly, its pieces, and its calls replayed from one CUDA graph."""
    k = load_kernel(path)
    out = k.solution(x)  # plans the shape (collective: rendezvous of its symmetric buffer)
    torch.cuda.synchronize()
    cases = {f"{path.rsplit('/', 1)[-1]}: solution": lambda: k.solution(x),
             "  empty_like alone": lambda: torch.empty_like(x)}
    plan = getattr(k, "_plans", {}).get((x.device, x.dtype, x.numel()))
    if plan:  # the launch with every argument worked out, into a preallocated output
        launch, ptrs, pads, n, rank, world, two_shot, blocks, device = plan
        raw = torch._C._cuda_getCurrentRawStream
        cases["  launch alone (ctypes)"] = lambda: launch(x.data_ptr(), ptrs, pads, out.data_ptr(), n, rank, world,
                                                          two_shot, blocks, raw(device))
    calls = 100
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            k.solution(x)  # warm up on the capture stream
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    dist.barrier()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            k.solution(x)
    torch.cuda.synchronize()
    dist.barrier()
    # one replay runs `calls` calls: bench's k counts replays, so divide by `calls` when printing
    cases[f"  {calls} calls in one CUDA graph"] = (graph.replay, calls)
    return cases


def worker(rank: int, world: int, numel: int, dtype: str, kernel: str | None) -> None:
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", rank))
    import torch.distributed._symmetric_memory as symm_mem

    x = torch.randn(numel, device="cuda", dtype=getattr(torch, dtype))
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
    if kernel:
        cases.update(kernel_cases(kernel, x))
    for case in cases.values():
        fn = case[0] if isinstance(case, tuple) else case
        bench(fn, 10, 3)  # warm up
    for label, case in cases.items():
        fn, per = case if isinstance(case, tuple) else (case, 1)
        for k in ((1, 10) if per > 1 else (1, 10, 100)):
            us, issue = bench(fn, k)
            if rank == 0:
                print(f"{label:34s} k={k * per:4d}  {us / per:8.1f} us/call   host issue {issue / per:6.1f} us/call",
                      flush=True)
    dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--numel", type=int, default=4096)
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    ap.add_argument("--kernel", help="an all-reduce file of kernels/ to time as well (its solution(x))")
    args = ap.parse_args()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    world = torch.cuda.device_count()
    size = args.numel * torch.tensor([], dtype=getattr(torch, args.dtype)).element_size()
    print(f"{world} GPUs, {args.numel} {args.dtype} ({size / 1024:.0f} KiB), torch {torch.__version__}")
    mp.spawn(worker, args=(world, args.numel, args.dtype, args.kernel), nprocs=world)


if __name__ == "__main__":
    main()
