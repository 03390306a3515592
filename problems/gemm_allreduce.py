"""Row-parallel GEMM giving partial sums, then an all-reduce (tensor parallelism without sequence parallelism).

Models: the attention-output and MLP down/fc2 projections of tensor-parallel transformer layers
(Megatron-LM RowParallelLinear, vLLM, TensorRT-LLM, SGLang): each rank multiplies its slice of the
inner dimension by its row shard of the weight and the partial outputs are summed on every rank.
Fused GEMM + all-reduce kernels (TensorRT-LLM, Flux, symmetric-memory all-reduce) overlap the two.

Contract: ``solution(x, w)`` is called on every rank r. ``x`` is rank r's ``(tokens, k_per_rank)`` input
(all tokens, r's slice of the inner dimension); ``w`` is rank r's ``(k_per_rank, hidden)`` weight shard.
Every rank returns the same new ``(tokens, hidden)`` tensor of x's dtype: ``sum_j x_j @ w_j``. Inputs
must not be modified.
"""

import torch
import torch.distributed as dist

from pkb_ray.problem import InputContext, Traffic

META = dict(
    id="gemm_allreduce",
    name="GEMM + all-reduce (row-parallel linear)",
    category="gemm",
    world_sizes=dict(min=2),
    dtypes=["float32", "bfloat16"],
    tolerances={
        "float32": dict(atol=1e-4, rtol=1e-4, reason="fp32 sums over W * k_per_rank terms reassociate: ~sqrt(k) ulp"),
        "bfloat16": dict(atol=5e-2, rtol=5e-2,
                         reason="8-bit mantissa: W bf16 partials summed in the collective's order, rounded each hop"),
    },
    # tokens: GEMM rows (a prefill batch); k_per_rank: inner dim shard (Llama-70B ffn 28672 / 8 = 3584);
    # hidden: model dim.
    sizes={
        "small": dict(tokens=16, k_per_rank=48, hidden=64),
        "default": dict(tokens=4096, k_per_rank=3584, hidden=8192),
        "large": dict(tokens=16384, k_per_rank=3584, hidden=8192),
    },
)


def make_inputs(ctx: InputContext):
    s = ctx.size
    x = ctx.randn(s["tokens"], s["k_per_rank"])
    # scaled by 1/sqrt(full fan-in W * k_per_rank), so the summed output is O(1)
    w = ctx.randn(s["k_per_rank"], s["hidden"], dtype=torch.float32).mul_((ctx.world_size * s["k_per_rank"]) ** -0.5)
    return x, w.to(ctx.dtype)


def solution(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    out = x @ w
    dist.all_reduce(out, op=dist.ReduceOp.SUM)
    return out


def speed_of_light(size, world_size, dtype) -> Traffic:
    m, k, h = size["tokens"], size["k_per_rank"], size["hidden"]
    b = dtype.itemsize
    # Ring all-reduce sends 2 (W-1)/W of the (m x h) output; one (m x k) @ (k x h) GEMM plus the reduction adds;
    # read x and w once, write the output once.
    return Traffic(
        interconnect_bytes=2 * (world_size - 1) / world_size * m * h * b,
        flops=2 * m * k * h + (world_size - 1) / world_size * m * h,
        hbm_bytes=(m * k + k * h + m * h) * b,
    )


def oracle(inputs, size, world_size):
    total = sum(x.double() @ w.double() for x, w in inputs).to(inputs[0][0].dtype)
    return [total.clone() for _ in range(world_size)]
