"""Decode-time row-parallel GEMV: a few tokens times a weight row shard, then an all-reduce.

Models: autoregressive decoding in tensor-parallel LLM serving (vLLM, TensorRT-LLM, SGLang): the
attention-output and MLP down projections of each layer see a batch of 1-8 new tokens, so the GEMM
is a weight-streaming GEMV and the all-reduce of a few KB is bound by latency, not bandwidth
(the case one-shot / custom all-reduce kernels and fused GEMV + all-reduce target).

Contract: ``solution(x, w)`` is called on every rank r. ``x`` is rank r's ``(batch, hidden_per_rank)`` input
slice; ``w`` is rank r's ``(hidden_per_rank, out)`` weight shard. Every rank returns the same new
``(batch, out)`` tensor of x's dtype: ``sum_j x_j @ w_j``. Inputs must not be modified.
"""

import torch
import torch.distributed as dist

from pkb_ray.problem import InputContext, Traffic

META = dict(
    id="decode_gemv_allreduce",
    name="Decode GEMV + all-reduce (row-parallel, small batch)",
    category="gemm",
    world_sizes=dict(min=2),
    dtypes=["float32", "bfloat16"],
    tolerances={
        "float32": dict(atol=1e-4, rtol=1e-4,
                        reason="fp32 sums over W * hidden_per_rank terms reassociate: ~sqrt(k) ulp"),
        "bfloat16": dict(atol=5e-2, rtol=5e-2,
                         reason="8-bit mantissa: W bf16 partials summed in the collective's order, rounded each hop"),
    },
    # batch: tokens decoded per step; hidden_per_rank: inner dim per rank (8192 total at W=8); out: output features.
    sizes={
        "small": dict(batch=2, hidden_per_rank=32, out=64),
        "default": dict(batch=4, hidden_per_rank=1024, out=8192),
        "large": dict(batch=8, hidden_per_rank=3584, out=8192),
    },
)


def make_inputs(ctx: InputContext):
    s = ctx.size
    x = ctx.randn(s["batch"], s["hidden_per_rank"])
    # scaled by 1/sqrt(full fan-in W * hidden_per_rank), so the summed output is O(1)
    w = ctx.randn(s["hidden_per_rank"], s["out"], dtype=torch.float32)
    return x, w.mul_((ctx.world_size * s["hidden_per_rank"]) ** -0.5).to(ctx.dtype)


def solution(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    out = x @ w
    dist.all_reduce(out, op=dist.ReduceOp.SUM)
    return out


def speed_of_light(size, world_size, dtype) -> Traffic:
    m, k, n = size["batch"], size["hidden_per_rank"], size["out"]
    b = dtype.itemsize
    # Ring all-reduce sends 2 (W-1)/W of the (m x n) output; 2 m k n GEMV flops plus the reduction adds; read the
    # weight shard and x once, write the output once (the weight read dominates).
    return Traffic(
        interconnect_bytes=2 * (world_size - 1) / world_size * m * n * b,
        flops=2 * m * k * n + (world_size - 1) / world_size * m * n,
        hbm_bytes=(m * k + k * n + m * n) * b,
    )


def oracle(inputs, size, world_size):
    total = sum(x.double() @ w.double() for x, w in inputs).to(inputs[0][0].dtype)
    return [total.clone() for _ in range(world_size)]
