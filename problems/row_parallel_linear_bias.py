"""Row-parallel linear with a replicated bias: GEMM on the input shard, all-reduce, then add the bias once.

Models: Megatron-LM ``RowParallelLinear(input_is_parallel=True)`` and vLLM's ``RowParallelLinear``, as
used for the attention output projection of tensor-parallel transformer layers: the input arrives
split along its features (one slice of heads per rank), each rank computes a partial output, the
partials are summed on every rank, and the bias, held by every rank, is added once after the sum.

Contract: ``solution(x, w, bias)`` is called on every rank r. ``x`` is rank r's ``(tokens, k_per_rank)`` input
slice; ``w`` is rank r's ``(k_per_rank, hidden)`` weight shard; ``bias`` is the ``(hidden,)`` bias, identical on
every rank. Every rank returns the same new ``(tokens, hidden)`` tensor of x's dtype:
``sum_j x_j @ w_j + bias``. Inputs must not be modified.
"""

import torch
import torch.distributed as dist

from pkb_ray.problem import InputContext, Traffic

META = dict(
    id="row_parallel_linear_bias",
    name="Row-parallel linear + all-reduce + bias",
    category="gemm",
    world_sizes=dict(min=2),
    dtypes=["float32", "bfloat16"],
    tolerances={
        "float32": dict(atol=1e-4, rtol=1e-4, reason="fp32 sums over W * k_per_rank terms reassociate: ~sqrt(k) ulp"),
        "bfloat16": dict(atol=5e-2, rtol=5e-2,
                         reason="8-bit mantissa: W bf16 partials summed in the collective's order, rounded each hop"),
    },
    # tokens: GEMM rows; k_per_rank: attention features per rank (Llama-70B: 8192 / 8 = 1024); hidden: model dim.
    sizes={
        "small": dict(tokens=16, k_per_rank=32, hidden=64),
        "default": dict(tokens=4096, k_per_rank=1024, hidden=8192),
        "large": dict(tokens=16384, k_per_rank=2048, hidden=8192),
    },
)


def make_inputs(ctx: InputContext):
    s = ctx.size
    x = ctx.randn(s["tokens"], s["k_per_rank"])
    # scaled by 1/sqrt(full fan-in W * k_per_rank), so the summed output is O(1)
    w = ctx.randn(s["k_per_rank"], s["hidden"], dtype=torch.float32).mul_((ctx.world_size * s["k_per_rank"]) ** -0.5)
    bias = torch.randn(s["hidden"], generator=ctx.shared_generator()).to(ctx.device, ctx.dtype)  # replicated
    return x, w.to(ctx.dtype), bias


def solution(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    out = x @ w
    dist.all_reduce(out, op=dist.ReduceOp.SUM)
    out += bias
    return out


def speed_of_light(size, world_size, dtype) -> Traffic:
    m, k, h = size["tokens"], size["k_per_rank"], size["hidden"]
    b = dtype.itemsize
    # Ring all-reduce sends 2 (W-1)/W of the (m x h) output; one (m x k) @ (k x h) GEMM, the reduction adds and
    # the bias; read x, w and bias once, write the output once.
    return Traffic(
        interconnect_bytes=2 * (world_size - 1) / world_size * m * h * b,
        flops=2 * m * k * h + (world_size - 1) / world_size * m * h + m * h,
        hbm_bytes=(m * k + k * h + h + m * h) * b,
    )


def oracle(inputs, size, world_size):
    total = sum(x.double() @ w.double() for x, w, _ in inputs) + inputs[0][2].double()
    out = total.to(inputs[0][0].dtype)
    return [out.clone() for _ in range(world_size)]
