"""RMSNorm over a hidden dimension that is itself sharded across tensor-parallel ranks.

Models: norms applied to the output of a column-parallel projection without gathering it first:
QK-norm over the whole query/key projection (OLMo-2 style) when its heads are split across TP
ranks, and the gated RMSNorm of Mamba-2 over a TP-sharded inner dimension (vLLM, Megatron-LM).
Each rank holds a slice of every row, so the row's mean of squares needs an all-reduce of
per-row partial sums; the normalisation itself stays local.

Contract: ``solution(x, weight)`` is called on every rank. ``x`` ``(tokens, hidden_per_rank)`` is
this rank's slice of the columns of the full ``(tokens, world_size * hidden_per_rank)`` activation
(rank r holds columns ``r * hidden_per_rank ...``), and ``weight`` ``(hidden_per_rank,)`` the
matching slice of the norm weight; both in the problem dtype. Every rank returns its slice of
``rmsnorm(full) = full * rsqrt(mean(full**2, dim=-1) + 1e-6) * weight`` as a ``(tokens,
hidden_per_rank)`` tensor in the dtype, the mean over the full hidden dimension, the normalisation
computed in float32 and rounded to the dtype before the weight multiplies it. Inputs must not be modified.
"""

import torch
import torch.distributed as dist

from pkb_ray.problem import InputContext, Traffic

EPS = 1e-6

META = dict(
    id="rmsnorm_sharded_hidden",
    name="RMSNorm over a TP-sharded hidden dimension",
    category="norm",
    world_sizes=dict(min=2),
    dtypes=["float32", "bfloat16"],
    tolerances={
        "float32": dict(atol=1e-5, rtol=1e-5, reason="the row sum of squares reassociates: a few ulp of the result"),
        "bfloat16": dict(atol=2e-2, rtol=2e-2, reason="8-bit mantissa: one or two roundings of the output"),
    },
    # tokens: rows; hidden_per_rank: columns of each rank's slice (the full hidden size is W times larger).
    sizes={
        "small": dict(tokens=16, hidden_per_rank=32),
        "default": dict(tokens=4096, hidden_per_rank=1024),
        "large": dict(tokens=16384, hidden_per_rank=2048),
    },
)


def make_inputs(ctx: InputContext):
    t, h = ctx.size["tokens"], ctx.size["hidden_per_rank"]
    return ctx.randn(t, h), 1 + 0.1 * ctx.randn(h)


def solution(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    xf = x.float()
    sum_sq = xf.pow(2).sum(-1, keepdim=True)
    dist.all_reduce(sum_sq, op=dist.ReduceOp.SUM)
    hidden = x.shape[-1] * dist.get_world_size()
    return (xf * torch.rsqrt(sum_sq / hidden + EPS)).to(x.dtype) * weight


def speed_of_light(size, world_size, dtype) -> Traffic:
    t, h = size["tokens"], size["hidden_per_rank"]
    # All-reduce of one float32 per row: 2 (W-1)/W of 4 t bytes each way. Memory: read x, write the output.
    # Flops: square and add, then scale and weight: ~4 per element.
    return Traffic(
        interconnect_bytes=2 * (world_size - 1) / world_size * t * 4,
        flops=4 * t * h,
        hbm_bytes=2 * t * h * dtype.itemsize + h * dtype.itemsize,
    )


def oracle(inputs, size, world_size):
    dtype = inputs[0][0].dtype
    x = torch.cat([args[0] for args in inputs], dim=1).double()
    w = torch.cat([args[1] for args in inputs]).double()
    out = x / torch.sqrt((x * x).mean(-1, keepdim=True) + EPS) * w
    return [chunk.to(dtype) for chunk in out.chunk(world_size, dim=1)]
