"""Megatron tensor-parallel MLP: column-parallel fc1 + bias, GeLU (tanh), row-parallel fc2, all-reduce, + bias.

Models: the MLP of GPT-style transformer layers under tensor parallelism without sequence
parallelism (Megatron-LM ParallelMLP, GPT-NeoX, vLLM/TensorRT-LLM serving of GPT-2/GPT-J/Falcon-like
models): the activation is replicated, fc1 is split by output columns and fc2 by input rows, so the
only communication is one all-reduce of the fc2 partial outputs; fc2's bias is added once after it.

Contract: ``solution(x, w1, b1, w2, b2)`` is called on every rank r. ``x`` is the ``(tokens, hidden)``
activation and ``b2`` the ``(hidden,)`` fc2 bias, both identical on every rank; ``w1`` ``(hidden, ffn_per_rank)``,
``b1`` ``(ffn_per_rank,)`` and ``w2`` ``(ffn_per_rank, hidden)`` are rank r's shards. Every rank returns the same
new ``(tokens, hidden)`` tensor of x's dtype: ``sum_j gelu_tanh(x @ w1_j + b1_j) @ w2_j + b2``. Inputs must not
be modified.
"""

import torch
import torch.distributed as dist
import torch.nn.functional as F

from pkb_ray.problem import InputContext, Traffic

META = dict(
    id="tp_mlp_block",
    name="Tensor-parallel GeLU MLP (fc1 column-parallel, fc2 row-parallel)",
    category="gemm",
    world_sizes=dict(min=2),
    dtypes=["float32", "bfloat16"],
    tolerances={
        "float32": dict(atol=1e-4, rtol=1e-4, reason="two fp32 GEMMs and a W-term sum reassociate: ~sqrt(k) ulp"),
        "bfloat16": dict(atol=5e-2, rtol=5e-2,
                         reason="8-bit mantissa: GeLU output, W partials and each all-reduce hop round to bf16"),
    },
    # tokens: GEMM rows; hidden: model dim; ffn_per_rank: fc1 output columns per rank (4 * hidden / 8 at default).
    sizes={
        "small": dict(tokens=16, hidden=64, ffn_per_rank=32),
        "default": dict(tokens=2048, hidden=4096, ffn_per_rank=2048),
        "large": dict(tokens=8192, hidden=8192, ffn_per_rank=4096),
    },
)


def make_inputs(ctx: InputContext):
    s = ctx.size
    h, f = s["hidden"], s["ffn_per_rank"]
    g = ctx.shared_generator()  # replicated tensors: the same on every rank
    x = torch.randn(s["tokens"], h, generator=g).to(ctx.device, ctx.dtype)
    b2 = torch.randn(h, generator=g).to(ctx.device, ctx.dtype)
    # weights scaled by 1/sqrt(fan_in) (fc2's fan-in is the full W * ffn_per_rank), so activations are O(1)
    w1 = ctx.randn(h, f, dtype=torch.float32).mul_(h ** -0.5).to(ctx.dtype)
    b1 = ctx.randn(f)
    w2 = ctx.randn(f, h, dtype=torch.float32).mul_((ctx.world_size * f) ** -0.5).to(ctx.dtype)
    return x, w1, b1, w2, b2


def solution(x: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor, b2: torch.Tensor) -> torch.Tensor:
    act = F.gelu(torch.addmm(b1, x, w1), approximate="tanh")
    out = act @ w2
    dist.all_reduce(out, op=dist.ReduceOp.SUM)
    out += b2
    return out


def speed_of_light(size, world_size, dtype) -> Traffic:
    m, h, f = size["tokens"], size["hidden"], size["ffn_per_rank"]
    b = dtype.itemsize
    # Ring all-reduce sends 2 (W-1)/W of the (m x h) output; two GEMMs of 2 m h f flops (elementwise work
    # ignored); read x and the shards once, write the output once (the (m x f) activation can stay on chip).
    return Traffic(
        interconnect_bytes=2 * (world_size - 1) / world_size * m * h * b,
        flops=4 * m * h * f,
        hbm_bytes=(m * h + 2 * h * f + f + h + m * h) * b,
    )


def oracle(inputs, size, world_size):
    x, _, _, _, b2 = inputs[0]
    w1 = torch.cat([a[1] for a in inputs], dim=1).double()
    b1 = torch.cat([a[2] for a in inputs]).double()
    w2 = torch.cat([a[3] for a in inputs], dim=0).double()
    out = (F.gelu(x.double() @ w1 + b1, approximate="tanh") @ w2 + b2.double()).to(x.dtype)
    return [out.clone() for _ in range(world_size)]
