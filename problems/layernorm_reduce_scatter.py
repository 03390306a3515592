"""Reduce-scatter of a row-parallel layer's partial output along tokens, fused with the residual add and LayerNorm.

Models: sequence parallelism in tensor-parallel transformers (Megatron-LM, NeMo): the row-parallel
projection's partial outputs are reduce-scattered along the sequence instead of all-reduced, so
each TP rank holds the summed output of its own slice of tokens; it adds that slice of the
residual stream and applies the next block's LayerNorm to its slice only.

Contract: ``solution(partial, residual, weight, bias)`` is called on every rank. ``partial`` is
this rank's ``(world_size * tokens_per_rank, hidden)`` partial output, token-major; ``residual``
``(tokens_per_rank, hidden)`` is this rank's slice of the residual stream (tokens
``rank * tokens_per_rank`` up to the next rank's); ``weight`` and ``bias`` ``(hidden,)`` are identical
on every rank; all are in the problem dtype. Rank r returns ``(normed, new_residual)``, both
``(tokens_per_rank, hidden)`` in that dtype: ``new_residual`` is rows ``r * tokens_per_rank ...``
of the sum over ranks of ``partial``, plus ``residual``; ``normed = layer_norm(new_residual,
weight, bias, eps=1e-5)`` over the hidden dimension (statistics in float32). Inputs must not be modified.
"""

import math

import torch
import torch.distributed as dist
import torch.nn.functional as F

from pkb_ray.problem import InputContext, Traffic
from pkb_ray.problem_helpers import reduce_scatter_single

EPS = 1e-5

META = dict(
    id="layernorm_reduce_scatter",
    name="Reduce-scatter + residual add + LayerNorm (sequence parallel)",
    category="norm",
    world_sizes=dict(min=2),
    dtypes=["float32", "bfloat16"],
    tolerances={
        "float32": dict(atol=1e-4, rtol=1e-4, reason="W-term sums reassociate; normalisation rescales a few ulp"),
        "bfloat16": dict(atol=5e-2, rtol=5e-2,
                         reason="8-bit mantissa: the partial sums and the residual add round in bf16, in any order"),
    },
    # tokens_per_rank: tokens of each rank's sequence slice (the full sequence is W times longer); hidden: width.
    sizes={
        "small": dict(tokens_per_rank=8, hidden=64),
        "default": dict(tokens_per_rank=1024, hidden=8192),
        "large": dict(tokens_per_rank=4096, hidden=8192),
    },
)


def make_inputs(ctx: InputContext):
    t, h = ctx.size["tokens_per_rank"], ctx.size["hidden"]
    g = ctx.shared_generator()
    weight = (1 + 0.1 * torch.randn(h, generator=g)).to(ctx.device, ctx.dtype)
    bias = (0.1 * torch.randn(h, generator=g)).to(ctx.device, ctx.dtype)
    # each rank's share of the layer output, scaled so that their sum has unit variance like the residual
    partial = ctx.randn(ctx.world_size * t, h) / math.sqrt(ctx.world_size)
    return partial, ctx.randn(t, h), weight, bias


def solution(partial: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor):
    new_residual = torch.empty_like(residual)
    reduce_scatter_single(new_residual, partial, op=dist.ReduceOp.SUM)
    new_residual += residual
    normed = F.layer_norm(new_residual, (new_residual.shape[-1],), weight, bias, EPS)
    return normed, new_residual


def speed_of_light(size, world_size, dtype) -> Traffic:
    w = world_size
    shard = size["tokens_per_rank"] * size["hidden"]
    # Ring reduce-scatter: W-1 partial shards sent (and received). Memory: read the W-shard partial and the
    # residual shard, write two shards. Flops: W-1 adds, the residual add, ~7 per element of LayerNorm.
    return Traffic(
        interconnect_bytes=(w - 1) * shard * dtype.itemsize,
        flops=(w - 1 + 8) * shard,
        hbm_bytes=(w + 3) * shard * dtype.itemsize,
    )


def oracle(inputs, size, world_size):
    dtype = inputs[0][0].dtype
    _, _, weight, bias = inputs[0]
    total = sum(args[0].double() for args in inputs)
    out = []
    for r, chunk in enumerate(total.chunk(world_size)):
        x = chunk + inputs[r][1].double()
        mean = x.mean(-1, keepdim=True)
        var = ((x - mean) ** 2).mean(-1, keepdim=True)
        normed = (x - mean) / torch.sqrt(var + EPS) * weight.double() + bias.double()
        out.append((normed.to(dtype), x.to(dtype)))
    return out
