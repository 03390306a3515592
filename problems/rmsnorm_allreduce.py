"""All-reduce of a row-parallel layer's partial output, fused with the residual add and RMSNorm.

Models: the end of every attention and MLP block of a tensor-parallel decoder (Megatron-LM, vLLM,
TensorRT-LLM): the row-parallel projection leaves each TP rank with a partial sum of the block's
output; it is all-reduced, added to the residual stream (replicated on every TP rank) and the sum
is RMS-normalised for the next block. vLLM and TensorRT-LLM fuse these three steps into one kernel.

Contract: ``solution(partial, residual, weight)`` is called on every rank. ``partial`` is this
rank's ``(tokens, hidden)`` partial output; ``residual`` ``(tokens, hidden)`` and ``weight``
``(hidden,)`` are identical on every rank; all are in the problem dtype. Every rank returns
``(normed, new_residual)``, both ``(tokens, hidden)`` in that dtype: ``new_residual = sum over
ranks of partial + residual`` and ``normed = new_residual * rsqrt(mean(new_residual**2, dim=-1) +
1e-6) * weight``, the normalisation computed in float32 and rounded to the dtype before the
weight multiplies it. Inputs must not be modified.
"""

import math

import torch
import torch.distributed as dist

from pkb_ray.problem import InputContext, Traffic

EPS = 1e-6

META = dict(
    id="rmsnorm_allreduce",
    name="All-reduce + residual add + RMSNorm (tensor parallel)",
    category="norm",
    world_sizes=dict(min=2),
    dtypes=["float32", "bfloat16"],
    tolerances={
        "float32": dict(atol=1e-4, rtol=1e-4, reason="W-term sums reassociate; the row RMS then rescales a few ulp"),
        "bfloat16": dict(atol=5e-2, rtol=5e-2,
                         reason="8-bit mantissa: the partial sums and the residual add round in bf16, in any order"),
    },
    # tokens: rows of the batch (a prefill chunk); hidden: model width.
    sizes={
        "small": dict(tokens=16, hidden=64),
        "default": dict(tokens=2048, hidden=8192),
        "large": dict(tokens=8192, hidden=8192),
    },
)


def make_inputs(ctx: InputContext):
    t, h = ctx.size["tokens"], ctx.size["hidden"]
    g = ctx.shared_generator()
    residual = torch.randn(t, h, generator=g).to(ctx.device, ctx.dtype)
    weight = (1 + 0.1 * torch.randn(h, generator=g)).to(ctx.device, ctx.dtype)
    # each rank's share of the layer output, scaled so that their sum has unit variance like the residual
    return ctx.randn(t, h) / math.sqrt(ctx.world_size), residual, weight


def solution(partial: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor):
    new_residual = partial.clone()
    dist.all_reduce(new_residual, op=dist.ReduceOp.SUM)
    new_residual += residual
    x = new_residual.float()
    normed = (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS)).to(partial.dtype) * weight
    return normed, new_residual


def speed_of_light(size, world_size, dtype) -> Traffic:
    n = size["tokens"] * size["hidden"]
    nbytes = n * dtype.itemsize
    # All-reduce as reduce-scatter + all-gather: 2 (W-1)/W of the buffer each way; its adds, then the residual
    # add and ~4 flops per element of RMSNorm. Memory: read partial and residual, write the two outputs.
    return Traffic(
        interconnect_bytes=2 * (world_size - 1) / world_size * nbytes,
        flops=((world_size - 1) / world_size + 5) * n,
        hbm_bytes=4 * nbytes + size["hidden"] * dtype.itemsize,
    )


def oracle(inputs, size, world_size):
    dtype = inputs[0][0].dtype
    _, residual, weight = inputs[0]
    x = sum(args[0].double() for args in inputs) + residual.double()
    normed = x / torch.sqrt((x * x).mean(-1, keepdim=True) + EPS) * weight.double()
    return [(normed.to(dtype), x.to(dtype)) for _ in range(world_size)]
