"""FSDP / ZeRO-3 forward of one linear layer: all-gather the sharded weight, then multiply the local batch by it.

Models: fully sharded data parallelism (PyTorch FSDP/FSDP2, DeepSpeed ZeRO-3, Megatron distributed
optimizer with parameter gathering): every rank keeps only a slice of each weight, gathers the full
weight just before the layer runs, and applies it to its own micro-batch. Overlapping (or fusing)
the parameter all-gather with the GEMM is what these systems optimise.

Contract: ``solution(x, w_shard)`` is called on every rank r. ``x`` is rank r's own ``(tokens_per_rank,
in_features)`` batch; ``w_shard`` is rank r's ``(out_per_rank, in_features)`` slice of the ``nn.Linear`` weight
(rows r * out_per_rank onward of the full ``(W * out_per_rank, in_features)`` weight). Every rank returns a
new ``(tokens_per_rank, W * out_per_rank)`` tensor of x's dtype: ``x @ cat([w_0, ..., w_{W-1}]).T``. Inputs
must not be modified.
"""

import torch
import torch.distributed as dist
import torch.nn.functional as F

from pkb_ray.problem import InputContext, Traffic
from pkb_ray.problem_helpers import all_gather_single

META = dict(
    id="fsdp_allgather_weight_gemm",
    name="FSDP weight all-gather + linear",
    category="gemm",
    world_sizes=dict(min=2),
    dtypes=["float32", "bfloat16"],
    tolerances={
        "float32": dict(atol=1e-4, rtol=1e-4, reason="fp32 accumulation over in_features terms in another order"),
        "bfloat16": dict(atol=2e-2, rtol=2e-2,
                         reason="fp32-accumulated GEMM rounded once to bf16 (8-bit mantissa): ~1 ulp of O(1) outputs"),
    },
    # tokens_per_rank: local micro-batch rows; in_features: GEMM k; out_per_rank: weight rows each rank holds.
    sizes={
        "small": dict(tokens_per_rank=8, in_features=64, out_per_rank=16),
        "default": dict(tokens_per_rank=4096, in_features=8192, out_per_rank=1024),
        "large": dict(tokens_per_rank=8192, in_features=8192, out_per_rank=3584),
    },
)


def make_inputs(ctx: InputContext):
    s = ctx.size
    x = ctx.randn(s["tokens_per_rank"], s["in_features"])
    w = ctx.randn(s["out_per_rank"], s["in_features"], dtype=torch.float32).mul_(s["in_features"] ** -0.5)
    return x, w.to(ctx.dtype)


def solution(x: torch.Tensor, w_shard: torch.Tensor) -> torch.Tensor:
    w_full = w_shard.new_empty(dist.get_world_size() * w_shard.shape[0], w_shard.shape[1])
    all_gather_single(w_full, w_shard)
    return F.linear(x, w_full)


def speed_of_light(size, world_size, dtype) -> Traffic:
    t, k, o = size["tokens_per_rank"], size["in_features"], size["out_per_rank"]
    n = world_size * o
    b = dtype.itemsize
    # Receive the W-1 other weight shards; one (t x k) @ (k x W o) GEMM; read x and the own shard once, write the
    # output once.
    return Traffic(
        interconnect_bytes=(world_size - 1) * o * k * b,
        flops=2 * t * k * n,
        hbm_bytes=(t * k + o * k + t * n) * b,
    )


def oracle(inputs, size, world_size):
    w_full = torch.cat([w for _, w in inputs]).double()
    return [(x.double() @ w_full.T).to(x.dtype) for x, _ in inputs]
