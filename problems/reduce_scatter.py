"""Reduce-scatter (sum): each rank ends with its own chunk of the element-wise sum.

Models: ZeRO / FSDP gradient reduction (each rank keeps the summed gradients of the parameters it
owns) and the sequence-parallel output of a tensor-parallel row-parallel linear layer
(Megatron-LM). Rank r returns chunk r of the sum of every rank's input.
"""

import torch
import torch.distributed as dist

from pkb_ray.problem import InputContext, Traffic
from pkb_ray.problem_helpers import reduce_scatter_single

META = dict(
    id="reduce_scatter",
    name="Reduce-scatter (sum)",
    category="collective",
    world_sizes=dict(min=2),
    dtypes=["float32", "bfloat16"],
    tolerances={
        "float32": dict(atol=1e-5, rtol=1e-5, reason="W-term sums reassociate: a few ulp of the result"),
        "bfloat16": dict(atol=2e-2, rtol=2e-2, reason="8-bit mantissa; summation order differs by algorithm"),
    },
    # numel: elements of each rank's output chunk; every rank's input holds world_size * numel.
    sizes={"small": dict(numel=4096), "default": dict(numel=1 << 20), "large": dict(numel=1 << 26)},
    ladder=[dict(numel=1 << p) for p in range(10, 27, 2)],  # 4 KiB .. 256 MiB of float32 a rank
)


def make_inputs(ctx: InputContext):
    return (ctx.randn(ctx.world_size * ctx.size["numel"]),)


def solution(x: torch.Tensor) -> torch.Tensor:
    out = x.new_empty(x.numel() // dist.get_world_size())
    reduce_scatter_single(out, x, op=dist.ReduceOp.SUM)
    return out


def speed_of_light(size, world_size, dtype) -> Traffic:
    chunk = size["numel"] * dtype.itemsize
    # Ring: each rank sends (and receives) W-1 partial chunks, adds W-1 of them, reads W chunks, writes 1.
    return Traffic(
        interconnect_bytes=(world_size - 1) * chunk,
        flops=(world_size - 1) * size["numel"],
        hbm_bytes=(world_size + 1) * chunk,
    )


def oracle(inputs, size, world_size):
    total = sum(args[0].double() for args in inputs).to(inputs[0][0].dtype)
    return [chunk.clone() for chunk in total.chunk(world_size)]
