"""All-gather of sequence-parallel activations along tokens, then a GEMM with a column-parallel weight shard.

Models: the entry of a tensor-parallel block under sequence parallelism (Megatron-LM
``--sequence-parallel``, NeMo, TensorRT-LLM, torch async-TP): each rank holds a slice of the tokens
after LayerNorm, gathers the full sequence, and multiplies it by its own column shard of the QKV or
fc1 weight. Fused all-gather + GEMM kernels (Flux, TransformerEngine userbuffers, async TP) overlap
the gather with the matmul.

Contract: ``solution(x, w)`` is called on every rank r. ``x`` is rank r's ``(tokens_per_rank, hidden)``
activation shard (rows r * tokens_per_rank onward of the full sequence); ``w`` is rank r's
``(hidden, n_per_rank)`` weight shard. Every rank returns a new ``(W * tokens_per_rank, n_per_rank)``
tensor of x's dtype: ``cat([x_0, ..., x_{W-1}]) @ w``, rows in rank order. Inputs must not be modified.
"""

import torch
import torch.distributed as dist

from pkb_ray.problem import InputContext, Traffic
from pkb_ray.problem_helpers import all_gather_single

META = dict(
    id="allgather_gemm",
    name="All-gather + GEMM (sequence-parallel column-parallel linear)",
    category="gemm",
    world_sizes=dict(min=2),
    dtypes=["float32", "bfloat16"],
    tolerances={
        "float32": dict(atol=1e-4, rtol=1e-4,
                        reason="fp32 accumulation over hidden terms in another order: ~sqrt(k) ulp"),
        "bfloat16": dict(atol=2e-2, rtol=2e-2,
                         reason="fp32-accumulated GEMM rounded once to bf16 (8-bit mantissa): ~1 ulp of O(1) outputs"),
    },
    # tokens_per_rank: sequence shard per rank; hidden: model dim (GEMM k); n_per_rank: this rank's output
    # columns (e.g. Llama-70B fc1 28672 / 8 = 3584).
    sizes={
        "small": dict(tokens_per_rank=8, hidden=64, n_per_rank=48),
        "default": dict(tokens_per_rank=1024, hidden=8192, n_per_rank=3584),
        "large": dict(tokens_per_rank=4096, hidden=8192, n_per_rank=7168),
    },
)


def make_inputs(ctx: InputContext):
    s = ctx.size
    x = ctx.randn(s["tokens_per_rank"], s["hidden"])
    # weights scaled by 1/sqrt(fan_in) as in real initialisation, so outputs are O(1)
    w = ctx.randn(s["hidden"], s["n_per_rank"], dtype=torch.float32).mul_(s["hidden"] ** -0.5).to(ctx.dtype)
    return x, w


def solution(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    full = x.new_empty(dist.get_world_size() * x.shape[0], x.shape[1])
    all_gather_single(full, x)
    return full @ w


def speed_of_light(size, world_size, dtype) -> Traffic:
    t, h, n = size["tokens_per_rank"], size["hidden"], size["n_per_rank"]
    m = world_size * t
    b = dtype.itemsize
    # Receive the W-1 other shards; one (W*t x h) @ (h x n) GEMM; read own x and w once, write the output once.
    return Traffic(
        interconnect_bytes=(world_size - 1) * t * h * b,
        flops=2 * m * h * n,
        hbm_bytes=(t * h + h * n + m * n) * b,
    )


def oracle(inputs, size, world_size):
    x_full = torch.cat([args[0] for args in inputs]).double()
    return [(x_full @ w.double()).to(w.dtype) for _, w in inputs]
