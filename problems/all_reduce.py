"""All-reduce (sum) of one tensor across all ranks.

Models: data-parallel gradient synchronisation (DDP, ZeRO) and the output of a tensor-parallel
row-parallel linear layer. Every rank ends with the element-wise sum of every rank's input.
"""

import torch
import torch.distributed as dist

from pkb_ray.problem import InputContext, Traffic

META = dict(
    id="all_reduce",
    name="All-reduce (sum)",
    category="collective",
    world_sizes=dict(min=2),
    dtypes=["float32", "bfloat16"],
    tolerances={
        "float32": dict(atol=1e-5, rtol=1e-5, reason="W-term sums reassociate: a few ulp of the result"),
        "bfloat16": dict(atol=2e-2, rtol=2e-2, reason="8-bit mantissa; summation order differs by algorithm"),
    },
    sizes={"small": dict(numel=4096), "default": dict(numel=1 << 20), "large": dict(numel=1 << 27)},
    ladder=[dict(numel=1 << p) for p in range(10, 27, 2)],  # 4 KiB .. 256 MiB of float32 a rank
)


def make_inputs(ctx: InputContext):
    return (ctx.randn(ctx.size["numel"]),)


def solution(x: torch.Tensor) -> torch.Tensor:
    out = x.clone()
    dist.all_reduce(out, op=dist.ReduceOp.SUM)
    return out


def speed_of_light(size, world_size, dtype) -> Traffic:
    nbytes = size["numel"] * dtype.itemsize
    # Reduce-scatter then all-gather: each rank sends (and receives) 2 (W-1)/W of the buffer.
    return Traffic(
        interconnect_bytes=2 * (world_size - 1) / world_size * nbytes,
        flops=(world_size - 1) / world_size * size["numel"],
        hbm_bytes=3 * nbytes,
    )


def oracle(inputs, size, world_size):
    total = sum(args[0].double() for args in inputs).to(inputs[0][0].dtype)
    return [total.clone() for _ in range(world_size)]
