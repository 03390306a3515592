"""Row-parallel GEMM giving partial sums, then a reduce-scatter along tokens (sequence parallelism).

Models: the exit of a tensor-parallel block under sequence parallelism (Megatron-LM
``--sequence-parallel``, NeMo, TensorRT-LLM, torch async-TP): each rank multiplies its slice of the
inner dimension (attention heads or ffn columns) by its row shard of the output/fc2 weight, and
the partial results are summed and split back into token shards. Fused GEMM + reduce-scatter
kernels (Flux, TransformerEngine userbuffers) overlap the two.

Contract: ``solution(x, w)`` is called on every rank r. ``x`` is rank r's ``(W * tokens_per_rank,
k_per_rank)`` input (all tokens, r's slice of the inner dimension); ``w`` is rank r's ``(k_per_rank,
hidden)`` weight shard. Every rank returns a new ``(tokens_per_rank, hidden)`` tensor of x's dtype:
rows ``r * tokens_per_rank`` to ``(r + 1) * tokens_per_rank`` of ``sum_j x_j @ w_j``. Inputs must not be
modified.
"""

import torch
import torch.distributed as dist

from pkb_ray.problem import InputContext, Traffic
from pkb_ray.problem_helpers import reduce_scatter_single

META = dict(
    id="gemm_reduce_scatter",
    name="GEMM + reduce-scatter (sequence-parallel row-parallel linear)",
    category="gemm",
    world_sizes=dict(min=2),
    dtypes=["float32", "bfloat16"],
    tolerances={
        "float32": dict(atol=1e-4, rtol=1e-4, reason="fp32 sums over W * k_per_rank terms reassociate: ~sqrt(k) ulp"),
        "bfloat16": dict(atol=5e-2, rtol=5e-2,
                         reason="8-bit mantissa: W bf16 partials summed in the collective's order, rounded each hop"),
    },
    # tokens_per_rank: output token shard (the GEMM has W * tokens_per_rank rows); k_per_rank: inner dim shard
    # (e.g. Llama-70B ffn 28672 / 8 = 3584); hidden: model dim.
    sizes={
        "small": dict(tokens_per_rank=8, k_per_rank=48, hidden=64),
        "default": dict(tokens_per_rank=1024, k_per_rank=3584, hidden=8192),
        "large": dict(tokens_per_rank=4096, k_per_rank=7168, hidden=8192),
    },
)


def make_inputs(ctx: InputContext):
    s, w_ = ctx.size, ctx.world_size
    x = ctx.randn(w_ * s["tokens_per_rank"], s["k_per_rank"])
    # scaled by 1/sqrt(full fan-in W * k_per_rank), so the summed output is O(1)
    w = ctx.randn(s["k_per_rank"], s["hidden"], dtype=torch.float32).mul_((w_ * s["k_per_rank"]) ** -0.5)
    return x, w.to(ctx.dtype)


def solution(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    partial = x @ w
    out = partial.new_empty(partial.shape[0] // dist.get_world_size(), partial.shape[1])
    reduce_scatter_single(out, partial, op=dist.ReduceOp.SUM)
    return out


def speed_of_light(size, world_size, dtype) -> Traffic:
    t, k, h = size["tokens_per_rank"], size["k_per_rank"], size["hidden"]
    m = world_size * t
    b = dtype.itemsize
    # Ring reduce-scatter: send the W-1 partial chunks that other ranks own; one (W*t x k) @ (k x h) GEMM plus
    # the W-1 additions of the own chunk; read x and w once, write the output once.
    return Traffic(
        interconnect_bytes=(world_size - 1) * t * h * b,
        flops=2 * m * k * h + (world_size - 1) * t * h,
        hbm_bytes=(m * k + k * h + t * h) * b,
    )


def oracle(inputs, size, world_size):
    total = sum(x.double() @ w.double() for x, w in inputs)
    dtype = inputs[0][0].dtype
    return [chunk.to(dtype) for chunk in total.chunk(world_size)]
