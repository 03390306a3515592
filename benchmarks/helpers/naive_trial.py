"""One trial of the naive baseline harness (run by torchrun for ``python -m benchmarks throughput``).

    torchrun --nproc_per_node W benchmarks/helpers/naive_trial.py --problem P.py --module M.py --seed S --out DIR

Imports the module (the problem's reference or a candidate), runs ``solution`` once on the seed's
inputs, saves each rank's output, then times ``--iters`` calls (one per barrier) and saves the
times: what a PyTorch-only harness does for every trial of every side.
"""

import argparse
import importlib.util
import time
from pathlib import Path

import torch
import torch.distributed as dist

from pkb_ray.problem import DTYPES, InputContext, load_problem


def main() -> None:
    ap = argparse.ArgumentParser()
    for name in ("--problem", "--module", "--out", "--size", "--dtype"):
        ap.add_argument(name, required=name in ("--problem", "--module", "--out"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--iters", type=int, default=20)
    args = ap.parse_args()
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", rank % torch.cuda.device_count()) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    problem = load_problem(args.problem)
    spec = importlib.util.spec_from_file_location("candidate", args.module)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    dtype = args.dtype or problem.meta.dtypes[0]
    _, knobs = problem.size(args.size or "small")
    ctx = InputContext(size=knobs, rank=rank, world_size=world, dtype=DTYPES[dtype], device=device, seed=args.seed)
    inputs = tuple(problem.make_inputs(ctx))
    out = module.solution(*inputs)
    times = []
    for _ in range(args.iters):
        dist.barrier()
        t0 = time.perf_counter()
        module.solution(*inputs)
        if cuda:
            torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e6)
    torch.save({"outputs": out, "times_us": times}, Path(args.out) / f"rank{rank}.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
